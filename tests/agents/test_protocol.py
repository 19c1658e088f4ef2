"""The server side of the agent protocol, in-process: registration, fencing (acceptance 5),
claims, placement, exit handling, cancel and the lost-node sweep."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from apps.fleet.services import nodes_sweep
from apps.nodes.models import Node, NodePool
from apps.runs.models import Assignment, Attempt, Run
from apps.runs.services.lifecycle import run_cancel
from apps.runs.services.placement import NodeFree, RunNeed, first_fit
from apps.scheduling.services import placement_pass
from tests.agents.server import claim, make_run, register

A = "/api/v1/agent/"


@pytest.fixture
def pool(db: Any) -> NodePool:
    return NodePool.objects.create(name="local")


def test_register_rejects_bad_join_token_and_bad_input(pool: NodePool) -> None:
    resp = APIClient().post(A + "register/", {"agent_uid": "x", "hostname": "h", "join_token": "tyj_nope",
                                              "devices": [{"index": 0}]}, format="json")
    assert resp.status_code == 403
    resp = APIClient().post(A + "register/", {"agent_uid": "", "hostname": "h", "devices": []}, format="json")
    assert resp.status_code == 400 and "agent_uid" in resp.json()["error"]["fields"]


def test_stale_attempt_reports_are_refused(cast: Any, pool: NodePool) -> None:
    client, reg = register(pool, "n1")
    run = make_run(cast, pool)
    assert placement_pass() == 1
    [spec] = claim(client, reg["session"])
    # Registered only now, so the first placement cannot land on it whatever the packing order.
    other, _ = register(pool, "n2")
    first = spec["attempt_id"]
    report = {"attempt_id": first, "number": 1, "node_rank": 0, "event": "started", "time": 0}
    assert client.post(A + "events/", report, format="json").status_code == 200
    assert Run.objects.get(pk=run.pk).status == "running"
    # Another node may not report for this attempt at all.
    assert other.post(A + "events/", report, format="json").status_code == 404
    # The node goes silent: the attempt is lost, the run requeued and placed again (attempt 2).
    Node.objects.filter(agent_uid="n1").update(last_heartbeat_at=timezone.now() - timedelta(hours=1))
    nodes_sweep()
    assert Attempt.objects.get(pk=first).status == "lost"
    assert Run.objects.get(pk=run.pk).status == "queued"
    Attempt.objects.create(run=run, number=2)
    bodies: list[tuple[str, dict[str, Any]]] = [("logs/", {"chunks": [{"rank": 0, "seq": 1, "stream": "stdout", "text": "x"}]}),
                       ("progress/", {"steps_done": 5}), ("events/", {"node_rank": 0, "event": "exited", "exit_code": 0}),
                       ("checkpoints/", {"step": 1, "file": "ckpt-0000000001.pt", "size": 1, "sha256": "a" * 64, "metrics": {}})]
    for path, body in bodies:
        resp = client.post(A + path, {"attempt_id": first, "number": 1, **body}, format="json")
        assert resp.status_code == 409, (path, resp.content)
        assert resp.json()["error"]["code"] == "stale_attempt"
    # A wrong fencing number is refused the same way.
    assert client.post(A + "logs/", {"attempt_id": first, "number": 7, "chunks": []}, format="json").status_code == 409
    # The heartbeat tells the node to kill the stale attempt it still runs.
    resp = client.post(A + "heartbeat/", {"session": reg["session"], "draining": False, "devices": [],
                                          "running": [{"attempt_id": first, "number": 1, "node_rank": 0}]}, format="json")
    assert resp.status_code == 200 and resp.json()["kill"] == [first]


def test_exit_codes_cancel_and_audit(cast: Any, pool: NodePool) -> None:
    client, reg = register(pool, "n1")
    run = make_run(cast, pool)
    placement_pass()
    [spec] = claim(client, reg["session"])
    base = {"attempt_id": spec["attempt_id"], "number": 1, "node_rank": 0, "time": 0}
    client.post(A + "events/", {**base, "event": "started"}, format="json")
    resp = client.post(A + "events/", {**base, "event": "exited", "exit_code": 2, "log_tail": "Traceback\nKeyError: 'x'"},
                       format="json")
    assert resp.status_code == 200
    run.refresh_from_db()
    assert run.status == "failed" and "exit code 2" in run.status_reason and "KeyError" in run.status_reason
    assert run.restarts == 0 and run.reason_code == "exit_code"  # a deterministic failure burns no restarts
    with pytest.raises(Exception) as err:
        run_cancel(run=run, user=cast.alice)
    assert getattr(err.value, "status_code", None) == 409

    run2 = make_run(cast, pool)
    placement_pass()
    [spec] = claim(client, reg["session"])
    base = {"attempt_id": spec["attempt_id"], "number": 1, "node_rank": 0, "time": 0}
    client.post(A + "events/", {**base, "event": "started"}, format="json")
    run_cancel(run=run2, user=cast.alice)
    hb = client.post(A + "heartbeat/", {"session": reg["session"], "draining": False, "devices": [],
                                        "running": [{"attempt_id": spec["attempt_id"], "number": 1, "node_rank": 0}]}, format="json")
    assert hb.json()["stop"] == [{"attempt_id": spec["attempt_id"], "kind": "cancel", "grace_period_s": 30}]
    client.post(A + "events/", {**base, "event": "exited", "exit_code": 0, "stop_kind": "cancel"}, format="json")
    run2.refresh_from_db()
    assert run2.status == "cancelled"


def test_drain_exit_requeues_never_succeeds(cast: Any, pool: NodePool) -> None:
    client, reg = register(pool, "n1")
    run = make_run(cast, pool)
    placement_pass()
    [spec] = claim(client, reg["session"])
    base = {"attempt_id": spec["attempt_id"], "number": 1, "node_rank": 0, "time": 0}
    client.post(A + "events/", {**base, "event": "started"}, format="json")
    client.post(A + "events/", {**base, "event": "exited", "exit_code": 0, "stop_kind": "drain"}, format="json")
    run.refresh_from_db()
    assert run.status == "queued" and run.reason_code == "preempted" and run.restarts == 0
    assert Attempt.objects.get(pk=spec["attempt_id"]).status == "preempted"


def test_gang_all_or_nothing(cast: Any, pool: NodePool) -> None:
    register(pool, "n1")
    run = make_run(cast, pool, nodes=2)
    assert placement_pass() == 0  # one node is not enough for two ranks
    register(pool, "n2")
    assert placement_pass() == 1
    assert Assignment.objects.filter(attempt__run=run).count() == 2
    placements = first_fit(runs=[RunNeed(run_id=1, pool_id=1, nodes=2, devices_per_node=1)],
                           nodes=[NodeFree(node_id=1, pool_id=1, free=(0,)), NodeFree(node_id=2, pool_id=2, free=(0,))])
    assert placements == []


def test_nodes_api_hides_other_teams_runs(cast: Any, pool: NodePool) -> None:
    client, reg = register(pool, "n1")
    make_run(cast, pool)
    placement_pass()
    claim(client, reg["session"])
    mine = cast.client(cast.alice).get("/api/v1/nodes/").json()
    theirs = cast.client(cast.bob).get("/api/v1/nodes/").json()
    assert mine["nodes"][0]["runs"][0]["project"] == "vision/digits"
    assert theirs["nodes"][0]["runs"][0] == {"id": None, "name": "another team's run", "project": None, "status": None,
                                             "attempt": None, "rank": None}
    assert theirs["nodes"][0]["state"] == "busy"
    node_id = mine["nodes"][0]["id"]
    assert cast.client(cast.alice).post(f"/api/v1/nodes/{node_id}/drain/").status_code == 403
    assert cast.client(cast.admin).post(f"/api/v1/nodes/{node_id}/drain/").json()["state"] == "draining"
    assert cast.client(cast.admin).post(f"/api/v1/nodes/{node_id}/undrain/").json()["state"] == "ready"


def test_nodes_page_renders(cast: Any, pool: NodePool) -> None:
    client, reg = register(pool, "n1")
    make_run(cast, pool)
    placement_pass()
    claim(client, reg["session"])
    from django.test import Client

    web = Client()
    web.force_login(cast.bob)
    page = web.get("/nodes/").content.decode()
    assert "n1" in page and "another team&#x27;s run" in page and "vision/digits" not in page


def test_progress_rate_leaves_start_up_out(cast: Any, pool: NodePool, monkeypatch: Any) -> None:
    """The first progress report of an attempt anchors its rate, so the seconds spent starting
    (interpreter, framework, data) do not make the run look slow to the ETA or the scheduler."""
    from apps.runs.selectors import run_live_rate
    from apps.runs.services import reports
    from apps.tracking.selectors import run_progress

    client, reg = register(pool, "n1")
    run = make_run(cast, pool)
    placement_pass()
    [spec] = claim(client, reg["session"])
    base = {"attempt_id": spec["attempt_id"], "number": 1}
    client.post(A + "events/", {**base, "node_rank": 0, "event": "started", "time": 0}, format="json")
    started = Attempt.objects.get(pk=spec["attempt_id"]).started_at
    assert started is not None
    clock = [started]
    monkeypatch.setattr(reports.timezone, "now", lambda: clock[0])

    def report(after_s: float, steps: int) -> Run:
        clock[0] = started + timedelta(seconds=after_s)
        assert client.post(A + "progress/", {**base, "total_steps": 40_000, "steps_done": steps}, format="json").status_code == 200
        return Run.objects.get(pk=run.pk)

    # Five seconds to start, then 1,000 steps a second.
    first = report(5.2, 200)
    assert (first.progress_from_step, first.progress_from_at) == (200, started + timedelta(seconds=5.2))
    # One report only: no rate yet (since the start, 38 steps/s, would say 17 minutes to go).
    assert run_live_rate(run=first, started_at=started) is None
    first.started_at = started
    assert run_progress(run=first)["eta_s"] is None
    assert run_progress(run=first)["steps_per_s"] == pytest.approx(200 / 5.2), "shown, start-up included, but no ETA from it"
    # A run from before the anchor existed keeps the rate since its start.
    first.progress_from_at = first.progress_from_step = None
    assert run_live_rate(run=first, started_at=started) == pytest.approx(200 / 5.2)
    later = report(7.2, 2200)
    assert later.progress_from_step == 200, "later reports keep the first as the anchor"
    assert run_live_rate(run=later, started_at=started) == pytest.approx(1000.0)
    # Counted from the start it would read 306 steps/s and an ETA of two minutes, not 38 s.
    later.started_at = started
    assert run_progress(run=later)["eta_s"] == pytest.approx(37.8)
    # A new attempt gets an anchor of its own.
    Run.objects.filter(pk=run.pk).update(progress_from_at=started - timedelta(hours=1))
    assert report(9.0, 2300).progress_from_step == 2300
