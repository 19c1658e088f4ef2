"""Issue 28, acceptance 3: the queue's accuracy line scores the runs that really waited (over 10
minutes, over an hour) and the new estimate a requeued run gets, as the trace replay does
(`trace_replay.waited_estimates`), in the selector, the API and the page."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from apps.billing.models import Quota
from apps.nodes.models import NodePool
from apps.runs.models import Attempt, Run, RunStatus
from apps.scheduling import trace_replay
from apps.scheduling.models import EstimateKind, QueueEstimate
from apps.scheduling.selectors import WAITED_BUCKETS, estimate_accuracy
from apps.scheduling.services import scheduling_pass
from tests.agents.server import register
from tests.scheduling.test_django_scheduling import exit_, make, refresh, start

MIN = 60.0
HOUR = 3600.0


@pytest.fixture
def pool(db: Any) -> NodePool:
    return NodePool.objects.create(name="local")


def _estimate(run: Run, *, waited_s: float, error_s: float, actual: datetime) -> tuple[float, float, float, float]:
    """An estimate given `waited_s` before the run's start at `actual`, off by `error_s`; returns
    the replay's tuple (since, start, guess, pool median) for the same wait."""
    recorded = actual - timedelta(seconds=waited_s)
    QueueEstimate.objects.create(run=run, kind=EstimateKind.AT_SUBMISSION, recorded_at=recorded,
                                 estimated_start=actual - timedelta(seconds=error_s), actual_start=actual, error_s=error_s)
    return recorded.timestamp(), actual.timestamp(), actual.timestamp() - error_s, 0.0


def _attempt(run: Run, *, at: datetime, number: int = 1) -> None:
    attempt = Attempt.objects.create(run=run, number=number)
    Attempt.objects.filter(pk=attempt.pk).update(created_at=at)


def test_the_buckets_are_the_replays(cast: Any, pool: NodePool) -> None:
    now = timezone.now()
    actual = now - timedelta(minutes=1)
    first: list[tuple[float, float, float, float]] = []
    # First waits (waited, error): two placed at once (not scored), then 30 s / 15 min / 20 min /
    # 2 h / 3 h; within max(10 min, 25% of the wait): yes, yes, no, yes, no.
    for waited, error in ((5, 0), (10, 0), (30, 5), (15 * MIN, 2 * MIN), (20 * MIN, 15 * MIN), (2 * HOUR, 20 * MIN),
                          (3 * HOUR, 1.5 * HOUR)):
        run = make(cast, pool, status=RunStatus.RUNNING)
        first.append(_estimate(run, waited_s=waited, error_s=error, actual=actual))
    # Requeues: the new estimate, recorded after the run's first attempt began. One run was placed
    # at once when submitted (no estimate then); one waited first, was requeued, and waited again.
    requeued: list[tuple[float, float, float, float]] = []
    at_once = make(cast, pool, status=RunStatus.RUNNING)
    _attempt(at_once, at=now - timedelta(hours=5))
    requeued.append(_estimate(at_once, waited_s=40 * MIN, error_s=5 * MIN, actual=actual))
    twice = make(cast, pool, status=RunStatus.RUNNING)
    first.append(_estimate(twice, waited_s=30 * MIN, error_s=-3 * MIN, actual=now - timedelta(hours=3)))
    _attempt(twice, at=now - timedelta(hours=3))
    requeued.append(_estimate(twice, waited_s=HOUR, error_s=30 * MIN, actual=actual))
    quick = make(cast, pool, status=RunStatus.RUNNING)
    _attempt(quick, at=now - timedelta(hours=1))
    _estimate(quick, waited_s=5, error_s=1, actual=actual)

    accuracy = estimate_accuracy(pool=pool)
    # Overall: the six first waits over 20 s (the requeues are apart), four close.
    assert (accuracy["runs"], accuracy["within"], accuracy["started_at_once"]) == (6, 4, 2)
    assert accuracy["summary"].startswith("67% of the 6 runs that waited")
    over_10m, over_1h, again = accuracy["over_10m"], accuracy["over_1h"], accuracy["at_requeue"]
    assert (over_10m["runs"], over_10m["within"]) == (5, 3)
    assert over_10m["median_abs_error_s"] == pytest.approx(15 * MIN)  # of 2, 3, 15, 20, 90 min
    assert over_10m["starts_now_share"] == 0.0
    assert (over_1h["runs"], over_1h["within"], over_1h["median_abs_error_s"]) == (2, 1, pytest.approx(55 * MIN))
    assert (again["runs"], again["within"], again["started_at_once"]) == (2, 1, 1)
    assert again["median_abs_error_s"] == pytest.approx(17.5 * MIN)
    assert over_10m["summary"] == ("Waited over 10 minutes: 3 of 5 started within 10 minutes (or a quarter of the wait) "
                                   "of their estimate (60%); median error 15 minutes.")
    assert over_1h["summary"].startswith("Waited over 1 hour: 1 of 2 started within")
    assert again["summary"].startswith("Requeued (preempted, or its node failed): 1 of 2 restarted within")
    assert "Not counted: 1 that restarted within 20 seconds" in again["summary"]

    # The same waits through the replay's scoring give the same counts and shares.
    replay = trace_replay.waited_estimates(first)
    assert [floor for _, floor in WAITED_BUCKETS] == [floor for _, floor in trace_replay.WAITED_BUCKETS]
    for (name, _), (key, _) in zip(trace_replay.WAITED_BUCKETS, WAITED_BUCKETS, strict=True):
        assert replay[name]["jobs"] == accuracy[key]["runs"]
        assert replay[name]["estimate"] == pytest.approx(accuracy[key]["share"])
        assert replay[name]["starts_now"] == pytest.approx(accuracy[key]["starts_now_share"])
    assert trace_replay.waited_estimates(requeued, all_waits=True)["all"]["estimate"] == pytest.approx(again["share"])

    # The API carries every bucket; the page shows a line for each.
    api = cast.client(cast.bob).get("/api/v1/queue/").json()
    [local] = [p for p in api["pools"] if p["pool"] == "local"]
    assert local["accuracy"]["runs"] == 6 and local["accuracy"]["summary"] == accuracy["summary"]
    assert local["accuracy"]["over_10m"]["runs"] == 5 and local["accuracy"]["over_1h"]["share"] == 0.5
    assert local["accuracy"]["at_requeue"] == again
    client = Client()
    client.force_login(cast.alice)
    page = client.get("/queue/").content.decode()
    assert 'data-bucket="over_10m" data-runs="5">Waited over 10 minutes: 3 of 5 started within' in page
    assert 'data-bucket="over_1h" data-runs="2">Waited over 1 hour: 1 of 2' in page
    assert 'data-bucket="at_requeue" data-runs="2">Requeued (preempted, or its node failed): 1 of 2' in page


def test_empty_buckets_say_so(cast: Any, pool: NodePool) -> None:
    run = make(cast, pool, status=RunStatus.RUNNING)
    _estimate(run, waited_s=5 * MIN, error_s=MIN, actual=timezone.now())
    accuracy = estimate_accuracy(pool=pool)
    assert accuracy["runs"] == 1
    for key in ("over_10m", "over_1h", "at_requeue"):
        assert accuracy[key]["runs"] == 0 and accuracy[key]["share"] is None
        assert accuracy[key]["median_abs_error_s"] is None
        assert accuracy[key]["summary"].endswith(": none in the last 7 days yet.")
    schema = cast.client(cast.alice).get("/api/schema/", {"format": "json"}).json()
    fields = schema["components"]["schemas"]["Accuracy"]["properties"]
    assert {"over_10m", "over_1h", "at_requeue", "starts_now_share", "runs", "summary"} <= fields.keys()
    client = Client()
    client.force_login(cast.alice)
    page = client.get("/queue/").content.decode()
    assert "Waited over 10 minutes: none in the last 7 days yet." in page
    assert "Requeued (preempted, or its node failed): none in the last 7 days yet." in page


def test_a_preempted_run_gets_a_new_estimate_at_requeue_scored_at_its_restart(cast: Any, pool: NodePool) -> None:
    register(pool, "n1")
    register(pool, "n2")
    Quota.objects.create(team=cast.nlp, pool=pool, guaranteed_devices=0, borrow_limit=2)
    low1 = make(cast, pool, team="nlp", priority="low")
    low2 = make(cast, pool, team="nlp", priority="low")
    assert sorted(scheduling_pass().placed) == [low1.pk, low2.pk]
    start(low1), start(low2)
    # Both were placed at once: no estimate at submission.
    assert not QueueEstimate.objects.filter(run__in=[low1, low2]).exists()
    urgent = make(cast, pool, team="vision", priority="urgent")
    [victim_id] = scheduling_pass().preempted
    victim = Run.objects.get(pk=victim_id)
    other = low2 if victim.pk == low1.pk else low1
    exit_(victim, stop_kind="preempt")
    assert scheduling_pass().placed == [urgent.pk]
    refresh(victim)
    assert victim.status == RunStatus.QUEUED and victim.estimated_start is not None
    [row] = QueueEstimate.objects.filter(run=victim)
    assert row.kind == EstimateKind.AT_SUBMISSION and row.estimated_start == victim.estimated_start
    assert row.actual_start is None
    start(urgent)
    exit_(other)
    assert scheduling_pass().placed == [victim.pk]
    row.refresh_from_db()
    assert row.actual_start is not None and row.error_s is not None
    # Placed by the next pass, it restarted at once; given 30 minutes earlier, it waited.
    again = estimate_accuracy(pool=pool)["at_requeue"]
    assert again["runs"] + again["started_at_once"] == 1
    QueueEstimate.objects.filter(pk=row.pk).update(recorded_at=row.actual_start - timedelta(minutes=30))
    Attempt.objects.filter(run=victim, number=1).update(created_at=row.actual_start - timedelta(hours=1))
    accuracy = estimate_accuracy(pool=pool)
    assert accuracy["at_requeue"]["runs"] == 1
    assert accuracy["at_requeue"]["median_abs_error_s"] == pytest.approx(abs(row.error_s))
    # Not a first wait: the overall line and its buckets count only the urgent run's.
    assert accuracy["runs"] + accuracy["started_at_once"] == 1 and accuracy["over_10m"]["runs"] == 0
