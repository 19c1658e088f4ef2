"""The run page's History: the run's own audit events, in words, for the people who may see the run."""

from __future__ import annotations

from typing import Any

from django.test import Client

from apps.nodes.models import NodePool
from apps.runs.models import Attempt, Run
from apps.runs.services.lifecycle import assignment_started, run_cancel, run_preempt
from apps.scheduling.services import scheduling_pass
from apps.tracking import history
from tests.agents.server import register
from tests.scheduling.test_django_scheduling import make


def _page(user: Any, run: Run) -> tuple[int, str]:
    client = Client()
    client.force_login(user)
    response = client.get(f"/runs/{run.pk}/")
    return response.status_code, response.content.decode()


def _section(html: str) -> str:
    start = html.index('id="run-history"')
    return html[start: html.index("</section>", start)]


def test_history_tells_the_run_story(cast: Any) -> None:
    pool = NodePool.objects.create(name="local")
    register(pool, "n1")
    run = make(cast, pool)
    scheduling_pass()
    attempt = Attempt.objects.get(run=run)
    for assignment in attempt.assignments.all():
        assignment_started(attempt_id=attempt.pk, node_id=assignment.node_id, node_rank=assignment.node_rank)
    run_preempt(run=Run.objects.get(pk=run.pk), reason="preempted to make room for an urgent job of team nlp")
    run_cancel(run=Run.objects.get(pk=run.pk), user=cast.alice)

    status, html = _page(cast.alice, run)
    assert status == 200
    section = _section(html)
    rows = section.split("<tr>")[2:]  # past the header row
    text = [" ".join(r.split()) for r in rows]
    # Oldest first: placed by the scheduler on n1, running, asked to stop for a preemption, then
    # alice's cancel, each naming who did it (alice by name, though no request was involved).
    placed = next(i for i, r in enumerate(text) if "scheduler" in r and "queued → scheduled" in r)
    assert "on n1" in text[placed]
    running = next(i for i, r in enumerate(text) if "→ running" in r and "attempt 1" not in r)
    preempt = next(i for i, r in enumerate(text) if "stop requested" in r and "to preempt it" in r)
    cancel = next(i for i, r in enumerate(text) if "<td>alice</td>" in r and "cancel requested" in r)
    assert placed < running < preempt < cancel
    assert any(r.startswith("<td") and "attempt 1:" in r for r in rows), "the attempt's own events are listed too"
    # Another team's engineer gets the plain 404, not the history.
    assert _page(cast.bob, run)[0] == 404


def test_history_api_serves_the_card_and_the_attempts_for_live_pages(cast: Any) -> None:
    pool = NodePool.objects.create(name="local")
    register(pool, "n1")
    run = make(cast, pool)
    scheduling_pass()
    run_preempt(run=Run.objects.get(pk=run.pk), reason="room for an urgent job")
    client = Client()
    client.force_login(cast.alice)
    body = client.get(f"/api/v1/runs/{run.pk}/history/").json()
    expected, _ = history.run_history(run=run, attempts=list(Attempt.objects.filter(run=run)))
    assert [(e["actor"], e["what"], e["detail"]) for e in body["events"]] == [(e.actor, e.what, e.detail) for e in expected]
    assert any("queued → scheduled" in e["detail"] and "on n1" in e["detail"] for e in body["events"])
    assert body["older"] is False
    assert [(a["number"], a["nodes"]) for a in body["attempts"]] == [(1, ["n1"])]
    other = Client()
    other.force_login(cast.bob)
    assert other.get(f"/api/v1/runs/{run.pk}/history/").status_code == 404


def test_history_shows_the_latest_and_says_older_ones_were_left_out(cast: Any, monkeypatch: Any) -> None:
    pool = NodePool.objects.create(name="local")
    run = make(cast, pool)
    assert "older ones are in the audit log" not in _section(_page(cast.alice, run)[1])
    monkeypatch.setattr(history, "HISTORY_LIMIT", 1)
    run_cancel(run=run, user=cast.alice)
    events, older = history.run_history(run=run, attempts=[])
    assert older and [e.what for e in events] == ["cancelled"]
    assert "older ones are in the audit log" in _section(_page(cast.alice, run)[1])


def test_details_read_only_what_they_understand() -> None:
    # Each action writes its own shape; none may break the run page.
    assert history._detail({"status": "queued"}, {"status": "scheduled", "nodes": ["n1", "n2"]}) == "queued → scheduled · on n1, n2"
    assert history._detail(None, {"status": "queued", "nodes": 1, "devices_per_node": 2}) == "queued"
    assert history._detail(["odd"], "odd") == ""
    assert history._detail({}, {"node": "vm", "rank": 0}) == "on vm"
    assert history._detail({}, {"kind": "drain"}) == "its node is draining"
    assert history._detail({}, {"reason": "r", "work_lost_device_s": 1234.5}) == "r · work since its last checkpoint: 1,234 device-seconds"
    assert history._detail({"status": 3}, {"status": None, "reason": 7}) == ""
