"""What a user waiting for a run reads, read some time after the pass that wrote it: reasons and
estimates must be true when read, not only when written."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from apps.nodes.models import NodePool
from apps.runs.models import Run
from apps.scheduling.models import SchedulerState
from apps.scheduling.services import scheduling_pass
from tests.agents.server import register
from tests.fixtures.browser import page_in_new_context
from tests.scheduling.test_django_scheduling import make, start

# "in 40 seconds", "in about 5 minutes": a wait counted from some moment the reader cannot see.
COUNTED = re.compile(r"\bin (about )?\d+(\.\d+)? (seconds?|minutes?|hours|days)\b")
STATIC = Path(__file__).resolve().parents[2] / "static"


@pytest.fixture
def pool(db: Any) -> NodePool:
    return NodePool.objects.create(name="local")


def _clock(at: datetime) -> str:
    """As the reason names a time: UTC, to the nearest minute."""
    return datetime.fromtimestamp(round(at.timestamp() / 60) * 60, tz=UTC).strftime("%H:%M UTC")


def _head_waiting(cast: Any, pool: NodePool) -> tuple[Run, datetime]:
    """A run next in line behind one running for its 5-minute maximum (no history to predict from),
    and when that run's devices are reserved for it."""
    register(pool, "n1")
    blocker = make(cast, pool, max_runtime_s=300)
    assert scheduling_pass().placed == [blocker.pk]
    attempt = start(blocker)
    waiting = make(cast, pool, team="vision")
    scheduling_pass()
    waiting.refresh_from_db()
    attempt.refresh_from_db()
    assert waiting.reason_code == "waiting_for_resources", waiting.status_reason
    assert attempt.started_at is not None
    return waiting, attempt.started_at + timedelta(seconds=300)


def _later(monkeypatch: pytest.MonkeyPatch, minutes: float) -> datetime:
    """Every reader's clock `minutes` on from now (the pass's rows stay as the pass wrote them)."""
    later = timezone.now() + timedelta(minutes=minutes)
    monkeypatch.setattr(timezone, "now", lambda: later)
    return later


def _page(cast: Any, path: str = "/queue/?partial=1") -> str:
    web = Client()
    web.force_login(cast.alice)
    response = web.get(path)
    assert response.status_code == 200
    return response.content.decode()


def test_a_reason_read_ten_minutes_after_its_pass_names_no_time_and_no_wait_from_the_pass(
        cast: Any, pool: NodePool, monkeypatch: pytest.MonkeyPatch) -> None:
    # The time is the estimate's alone (from the live ETA of the runs ahead): a clock in the reason,
    # from predicted runtimes, would name a second start time for the same run (issue 29, item 2).
    waiting, reserved = _head_waiting(cast, pool)
    said = "Devices are reserved for it: it starts next"
    assert _clock(reserved) not in waiting.status_reason, waiting.status_reason
    assert said in waiting.status_reason and not COUNTED.search(waiting.status_reason), waiting.status_reason

    _later(monkeypatch, 10)  # the reservation is 5 minutes gone; no pass has run since
    run = cast.client(cast.alice).get(f"/api/v1/runs/{waiting.pk}/").json()
    assert said in run["status_reason"] and not COUNTED.search(run["status_reason"]), run["status_reason"]
    queue = cast.client(cast.alice).get("/api/v1/queue/").json()
    [entry] = [e for p in queue["pools"] for e in p["queue"] if e["run"] and e["run"]["id"] == waiting.pk]
    message = entry["reason"]["message"]
    assert said in message and not COUNTED.search(message), message
    row = _page(cast).split(f'data-run="{waiting.pk}"', 1)[1].split("</tr>", 1)[0]
    reason = row.split('class="reason"', 1)[1].split('class="estimate"', 1)[0]
    assert said in reason and not COUNTED.search(reason), reason


def test_an_estimate_gone_by_says_how_long_ago_not_due_now(cast: Any, pool: NodePool,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    waiting, _ = _head_waiting(cast, pool)
    at = waiting.estimated_start
    assert at is not None

    def cell() -> str:
        found = re.search(rf'data-run="{waiting.pk}".*?<td class="estimate">(.*?)</td>', _page(cast), re.S)
        assert found is not None
        return found.group(1)

    assert re.search(r"\(in \d+ (seconds?|minutes?)\)", cell())
    # Just past the estimate (passes every 10 s rewrite it only once it moves 20 s): due now.
    monkeypatch.setattr(timezone, "now", lambda: at + timedelta(seconds=30))
    assert "(due now)" in cell()
    # Ten minutes past it, with no pass since: the estimate was missed, and the page says by how much.
    monkeypatch.setattr(timezone, "now", lambda: at + timedelta(minutes=10))
    missed = cell()
    assert "(was due 10 minutes ago)" in missed and "due now" not in missed, missed


def test_the_queue_page_says_its_reasons_are_old_when_no_pass_has_run_lately(cast: Any, pool: NodePool,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    _head_waiting(cast, pool)
    fresh = _page(cast)
    assert re.search(r"Last scheduling pass \d+ seconds? ago", fresh) and "No pass has run since" not in fresh
    _later(monkeypatch, 10)
    old = _page(cast).split("</p>", 1)[0]
    assert "Last scheduling pass 10 minutes ago" in old, old
    assert "No pass has run since, so the reasons and estimates below are from then." in old, old
    assert SchedulerState.objects.get().pass_started_at is not None


def test_the_queue_page_names_the_zone_of_its_clock_times(cast: Any, pool: NodePool) -> None:
    # The reason says "14:05 UTC"; the estimate column beside it must not leave its time to be
    # read as the reader's own local time: each estimate names its zone, in the one time format
    # (<time class="when">, which static/core/times.js writes in the viewer's zone, named).
    _head_waiting(cast, pool)
    html = _page(cast, "/queue/")
    assert "<th>Estimated start</th>" in html
    cell = html.split('<td class="estimate">', 1)[1].split("</td>", 1)[0]
    assert re.search(r'<time class="when" data-at="[^"]+" datetime="[^"]+">\d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC</time>', cell), cell


@pytest.mark.browser
def test_a_refresh_that_lands_on_sign_in_keeps_the_queue_and_says_it_is_old(cast: Any, pool: NodePool,
                                                                            chromium: Any) -> None:
    # Signed out meanwhile: the partial's fetch is redirected to the sign-in page, which must not
    # replace the queue, and the page must stop claiming it refreshes every few seconds.
    _head_waiting(cast, pool)
    html = _page(cast, "/queue/")
    origin = "http://queue.test"

    def serve(route: Any) -> None:
        url = route.request.url
        path = url[len(origin):]
        if path == "/queue/":
            route.fulfill(status=200, content_type="text/html", body=html)
        elif path.startswith("/queue/?partial=1"):
            route.fulfill(status=302, headers={"Location": "/login/?next=/queue/"})
        elif path.startswith("/login/"):
            route.fulfill(status=200, content_type="text/html", body="<html><body><form id='sign-in'>Sign in</form></body></html>")
        elif path.startswith("/static/") and (STATIC / path[len("/static/"):]).is_file() and "plotly" not in path:
            route.fulfill(status=200, path=str(STATIC / path[len("/static/"):]))
        else:
            route.fulfill(status=404, body="")

    with page_in_new_context(chromium) as page:
        page.route(f"{origin}/**", serve)
        page.clock.install()
        page.goto(f"{origin}/queue/")
        assert "Refreshes every 7 seconds." in page.inner_text("#queue-refresh")
        page.clock.run_for(8000)
        page.wait_for_function("() => document.getElementById('queue-refresh').textContent.startsWith('Not refreshed since')")
        assert "Pool local" in page.inner_text("#queue-pools") and page.locator("#sign-in").count() == 0
        assert "signed out, or the portal cannot be reached" in page.inner_text("#queue-refresh")


def test_runs_held_by_hardware_are_listed_but_not_counted_in_the_way(cast: Any, pool: NodePool) -> None:
    register(pool, "n1")
    blocker = make(cast, pool)
    scheduling_pass()
    start(blocker)
    # Urgent, so first in line; but no node has 64 devices: skipped, not waited for.
    too_big = make(cast, pool, team="nlp", dpn=64, priority="urgent")
    behind = make(cast, pool, team="nlp")
    mine = make(cast, pool, team="vision")
    scheduling_pass()
    too_big.refresh_from_db()
    assert too_big.reason_code == "no_hardware"
    entries = cast.client(cast.alice).get("/api/v1/queue/").json()["pools"][0]["queue"]
    entry = next(e for e in entries if e["run"] and e["run"]["id"] == mine.pk)
    assert entry["position"] == 3
    assert entry["ahead"]["runs"] == 1 and entry["ahead"]["devices"] == 1 and entry["ahead"]["held"] == 1
    assert behind.pk  # the one really ahead
    client = Client()
    client.force_login(cast.alice)
    html = client.get("/queue/").content.decode()
    assert "Ahead of it: 1 run needing 1 device (nlp: 1 run, 1 dev.); 1 more held by budget, quota or hardware, not in its way" in html


def test_a_runtime_without_history_says_it_is_the_limit_not_a_prediction(cast: Any, pool: NodePool) -> None:
    register(pool, "n1")
    blocker = make(cast, pool)
    scheduling_pass()
    start(blocker)
    make(cast, pool, max_runtime_s=7200)
    scheduling_pass()
    entry = cast.client(cast.alice).get("/api/v1/queue/").json()["pools"][0]["queue"][0]
    assert entry["predicted_runtime_s"] == 7200 and entry["predicted_from_history"] is False
    assert entry["predicted_runtime_text"] == "at most 2.0 hours (its limit; no similar run has finished yet)"
    client = Client()
    client.force_login(cast.alice)
    html = client.get("/queue/").content.decode()
    assert "7200 s" not in html and "at most 2.0 hours (its limit" in html


def test_the_cli_says_how_long_ago_a_past_estimate_fell_due() -> None:
    from trainyard._cli_reports import _when

    now = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    assert _when((now - timedelta(seconds=20)).isoformat(), now).endswith("(due now)")
    assert _when((now - timedelta(minutes=10)).isoformat(), now).endswith("(was due 10m00s ago)")
    assert _when((now + timedelta(minutes=2)).isoformat(), now).endswith("(in 2m00s)")
