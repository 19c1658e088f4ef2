"""Issue 28 housekeeping: one definition of a requeued estimate (`outcomes.estimate_requeued`) for
the queue page's accuracy tally, the lag of first waits and the learned correction, as the trace
replay means it (an attempt was placed before the estimate); and the learned correction read
once a pass, reused by the forecasts (`outcomes.calibrations_cached`)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.core.cache import cache
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from apps.billing.models import Quota
from apps.nodes.models import NodePool
from apps.runs.models import Attempt, AttemptStatus, Run, RunStatus
from apps.scheduling import outcomes
from apps.scheduling.estimate import WaitCalibration
from apps.scheduling.model import Policy
from apps.scheduling.models import EstimateKind, QueueEstimate
from apps.scheduling.outcomes import calibration_outcomes, calibrations_cached, calibrations_from, estimate_requeued
from apps.scheduling.selectors import estimate_accuracy
from apps.scheduling.services import estimate_errors_record, scheduling_pass
from apps.scheduling.snapshot import lags_load
from apps.scheduling.trace import TraceJob
from apps.scheduling.trace_replay import POLICIES, Replay
from tests.agents.server import register
from tests.runs.factories import body, local_pool, make_template
from tests.scheduling.test_django_scheduling import exit_, make, start

HOUR = 3600.0


@pytest.fixture(autouse=True)
def _fresh_cache() -> Iterator[None]:
    # The test cache lives as long as the process; rows of earlier tests are rolled back.
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def pool(db: Any) -> NodePool:
    return NodePool.objects.create(name="local")


def _placed_at_once_then_requeued(cast: Any, pool: NodePool, *, at: datetime) -> Run:
    """A run placed on its first pass (so no estimate then), preempted two hours later; back in line,
    its estimate said an hour and it restarted after three."""
    run = make(cast, pool, status=RunStatus.RUNNING)
    attempt = Attempt.objects.create(run=run, number=1)
    Attempt.objects.filter(pk=attempt.pk).update(created_at=at - timedelta(hours=2))
    QueueEstimate.objects.create(run=run, recorded_at=at, kind=EstimateKind.AT_SUBMISSION,
                                 estimated_start=at + timedelta(hours=1), raw_estimated_start=at + timedelta(hours=1),
                                 actual_start=at + timedelta(hours=3), error_s=2 * HOUR)
    return run


def test_a_run_placed_at_once_then_requeued_is_a_requeue_everywhere(cast: Any, pool: NodePool) -> None:
    now = timezone.now()
    for i in range(25):
        _placed_at_once_then_requeued(cast, pool, at=now - timedelta(hours=10, minutes=i))
    # Eight first waits (no attempt before their estimate), with known lags behind their deadlines.
    started = now - timedelta(hours=1)
    for behind in (100, 200, 300, 400, 500, 600, 700, 800):
        run = make(cast, pool, status=RunStatus.RUNNING, queue_deadline=started - timedelta(seconds=behind))
        QueueEstimate.objects.create(run=run, recorded_at=started - timedelta(minutes=5), kind=EstimateKind.AT_SUBMISSION,
                                     estimated_start=started, actual_start=started, error_s=0.0)

    # The learned correction files the 25 under "back in line": that class learned the 3 h, not the new runs'.
    cal = calibrations_cached(now=now, pools=["local"])["local"]
    again = WaitCalibration.key(estimated_wait=HOUR, requeued=True, devices=1)
    new = WaitCalibration.key(estimated_wait=HOUR, requeued=False, devices=1)
    assert abs(cal.adjust(again, HOUR) - 3 * HOUR) <= 0.25 * 3 * HOUR
    assert cal.adjust(new, HOUR) == HOUR
    # The lag of first waits samples only the eight.
    lag = lags_load(now=now, policies={"local": Policy(demote_after_s=0)})["local"]
    assert lag.lags_at(now.timestamp()) == pytest.approx([100, 200, 300, 400, 500, 600, 700, 800])
    # The queue page scores them in its at-requeue bucket, and not as first waits.
    accuracy = estimate_accuracy(pool=pool, now=now)
    assert accuracy["at_requeue"]["runs"] == 25 and accuracy["at_requeue"]["within"] == 0
    assert accuracy["runs"] + accuracy["started_at_once"] == 8 and accuracy["over_10m"]["runs"] == 0


def test_the_passes_record_a_requeue_after_its_first_placement(cast: Any, pool: NodePool) -> None:
    # Through real passes: both low runs start at once, one is preempted for an urgent run and
    # waits again; its new estimate is a requeue's, the urgent run's is a first wait.
    register(pool, "n1")
    register(pool, "n2")
    Quota.objects.create(team=cast.nlp, pool=pool, guaranteed_devices=0, borrow_limit=2)
    low1, low2 = make(cast, pool, team="nlp", priority="low"), make(cast, pool, team="nlp", priority="low")
    assert sorted(scheduling_pass().placed) == [low1.pk, low2.pk]
    start(low1), start(low2)
    urgent = make(cast, pool, priority="urgent")
    [victim_id] = scheduling_pass().preempted
    victim = Run.objects.get(pk=victim_id)
    exit_(victim, stop_kind="preempt")
    assert scheduling_pass().placed == [urgent.pk]
    rows = QueueEstimate.objects.filter(kind=EstimateKind.AT_SUBMISSION).annotate(requeued=estimate_requeued())
    assert dict(rows.values_list("run_id", "requeued")) == {urgent.pk: False, victim.pk: True}


def _calibration_rows(cast: Any, pool: NodePool, *, now: datetime) -> None:
    for i in range(30):
        run = make(cast, pool, status=RunStatus.RUNNING, nodes=1, dpn=1 + 4 * (i % 2))
        at = now - timedelta(hours=5, minutes=i)
        QueueEstimate.objects.create(run=run, recorded_at=at, kind=EstimateKind.AT_SUBMISSION,
                                     raw_estimated_start=at + timedelta(minutes=20 + i),
                                     actual_start=at + timedelta(minutes=50 + 3 * i))
    # One outcome about to leave the 14-day window.
    run = make(cast, pool, status=RunStatus.RUNNING)
    edge = now - outcomes.CALIBRATION_WINDOW + timedelta(seconds=5)
    QueueEstimate.objects.create(run=run, recorded_at=edge - timedelta(hours=1), kind=EstimateKind.AT_SUBMISSION,
                                 raw_estimated_start=edge, actual_start=edge)


def _learned(cals: dict[str, WaitCalibration]) -> dict[str, Any]:
    return {pool: {key: list(found) for key, found in cal._outcomes.items()} for pool, cal in cals.items()}


def _fresh(*, now: datetime, pools: list[str]) -> dict[str, WaitCalibration]:
    """What `calibrations_cached` learns from when it reads afresh."""
    return calibrations_from(calibration_outcomes(now=now, pools=pools), pools=pools)


def _calibration_reads(queries: CaptureQueriesContext) -> int:
    return sum("raw_estimated_start" in q["sql"] for q in queries.captured_queries)


def test_a_cached_read_is_the_fresh_read(cast: Any, pool: NodePool) -> None:
    now = timezone.now()
    _calibration_rows(cast, pool, now=now)
    first = calibrations_cached(now=now, pools=["local"])
    assert _learned(first) == _learned(_fresh(now=now, pools=["local"]))
    later = now + timedelta(seconds=8)  # the edge outcome has left the window meanwhile
    with CaptureQueriesContext(connection) as queries:
        reused = calibrations_cached(now=later, pools=["local"])
    assert _calibration_reads(queries) == 0
    assert _learned(reused) == _learned(_fresh(now=later, pools=["local"])) != _learned(first)
    # A read for an earlier moment does not trust what a later one found.
    with CaptureQueriesContext(connection) as queries:
        calibrations_cached(now=now - timedelta(seconds=1), pools=["local"])
    assert _calibration_reads(queries) == 1


def test_forecasts_reuse_the_correction_until_a_run_starts_or_it_expires(cast: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    pool = local_pool()
    make_template()
    register(pool, "n1", slots=1)
    client = cast.client(cast.alice)
    client.post("/api/v1/runs/", body(cast), format="json")
    waiting = client.post("/api/v1/runs/", body(cast), format="json").json()
    scheduling_pass()  # places the first; the second waits, and this pass reads the correction

    def forecast() -> int:
        with CaptureQueriesContext(connection) as queries:
            answer = client.post("/api/v1/queue/forecast/", body(cast), format="json")
        assert answer.status_code == 200, answer.content
        assert not answer.json()["starts_now"] and answer.json()["estimated_start"]["at"]
        return _calibration_reads(queries)

    assert forecast() == 0  # the pass's read
    assert forecast() == 0
    # A run with an estimate starts: what the correction learns from changed, so it is read again, once.
    estimate_errors_record(run_ids=[waiting["id"]], started_at=timezone.now())
    assert forecast() == 1
    assert forecast() == 0
    # And what was read is kept no longer than the time-to-live.
    monkeypatch.setattr(outcomes, "CALIBRATION_CACHE_S", 0.5)
    cache.clear()
    assert forecast() == 1
    time.sleep(0.6)
    assert forecast() == 1


def _learned_back_in_line(run: Run, *, now: datetime, wait: timedelta) -> None:
    """Twenty outcomes in every class of "back in line" estimates of a one-device run: whatever
    the estimate said, the run restarted after `wait` (all rows of one run placed long before)."""
    rows = []
    for wait_bin in range(-1, 17):
        estimated = 30.0 if wait_bin < 0 else 60.0 * 2 ** (wait_bin - 1)
        for i in range(20):
            at = now - timedelta(days=2, minutes=wait_bin * 20 + i) - wait
            rows.append(QueueEstimate(run=run, recorded_at=at, kind=EstimateKind.AT_SUBMISSION,
                                      estimated_start=at + timedelta(seconds=estimated),
                                      raw_estimated_start=at + timedelta(seconds=estimated), actual_start=at + wait))
    QueueEstimate.objects.bulk_create(rows)


def test_a_run_placed_but_never_started_is_corrected_as_back_in_line(cast: Any, pool: NodePool) -> None:
    # Learning files a run placed before its estimate as back in line (`estimate_requeued`),
    # whether or not that attempt ran; the pass applying the correction must class it the same.
    now = timezone.now()
    history = make(cast, pool, status=RunStatus.SUCCEEDED)
    placed = Attempt.objects.create(run=history, number=1, status=AttemptStatus.SUCCEEDED)
    Attempt.objects.filter(pk=placed.pk).update(created_at=now - timedelta(days=10))
    _learned_back_in_line(history, now=now, wait=timedelta(hours=10))
    register(pool, "n1")
    blocker = make(cast, pool)
    assert scheduling_pass().placed == [blocker.pk]
    start(blocker)
    # Placed once, its node lost before the job started: back in line with no service attained.
    unstarted = make(cast, pool)
    attempt = Attempt.objects.create(run=unstarted, number=1, status=AttemptStatus.LOST, ended_at=now - timedelta(minutes=5))
    Attempt.objects.filter(pk=attempt.pk).update(created_at=now - timedelta(minutes=6))
    new = make(cast, pool)
    assert scheduling_pass().placed == []

    rows = {row.run_id: row for row in QueueEstimate.objects.filter(run__in=[unstarted, new])
            .annotate(requeued=estimate_requeued())}
    assert rows[unstarted.pk].requeued and not rows[new.pk].requeued  # as learning files them
    back = rows[unstarted.pk]
    assert back.raw_estimated_start is not None and back.estimated_start is not None
    corrected = (back.estimated_start - back.recorded_at).total_seconds()
    assert abs(corrected - 10 * HOUR) <= 0.25 * 10 * HOUR
    assert back.raw_estimated_start != back.estimated_start
    # A new run's class learned nothing: its estimate is the replay's own.
    assert rows[new.pk].raw_estimated_start is not None
    assert rows[new.pk].estimated_start == rows[new.pk].raw_estimated_start


def test_a_busy_pool_does_not_push_a_quiet_pools_outcomes_out(cast: Any, pool: NodePool,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(outcomes, "CALIBRATION_ROWS", 30)
    busy = NodePool.objects.create(name="busy")
    now = timezone.now()
    # The quiet pool's 20 outcomes are days old; the busy pool has had 90 since.
    for target, count, ago in ((pool, 20, timedelta(days=3)), (busy, 90, timedelta(hours=2))):
        run = make(cast, target, status=RunStatus.SUCCEEDED)
        QueueEstimate.objects.bulk_create(
            QueueEstimate(run=run, recorded_at=now - ago - timedelta(minutes=i + 30), kind=EstimateKind.AT_SUBMISSION,
                          raw_estimated_start=now - ago - timedelta(minutes=i + 20), actual_start=now - ago - timedelta(minutes=i))
            for i in range(count))
    found = outcomes.calibration_outcomes(now=now, pools=["local", "busy"])
    assert sum(o[0] == "local" for o in found) == 20
    busy_starts = [o[4] for o in found if o[0] == "busy"]
    # The busy pool's newest 30, oldest first (as the replay feeds them).
    assert busy_starts == sorted(busy_starts) and len(busy_starts) == 30
    assert min(busy_starts) == pytest.approx((now - timedelta(hours=2, minutes=29)).timestamp())
    cals = calibrations_cached(now=now, pools=["local", "busy"])
    assert _learned(cals) == _learned(_fresh(now=now, pools=["busy", "local"]))
    assert sum(len(v) for v in _learned(cals)["local"].values()) == 20
    assert sum(len(v) for v in _learned(cals)["busy"].values()) == 30


def test_the_replay_samples_the_lag_of_first_starts_a_pass_left_waiting() -> None:
    # The replay passes at every submission: a job that starts later than it was submitted is
    # one its submission's pass left waiting, the live rule (`lags_load`, below).
    jobs = [TraceJob(id="1", team="t", submit_s=0.0, gpus=1, duration_s=1000.0, job_type="x"),
            TraceJob(id="2", team="t", submit_s=100.0, gpus=1, duration_s=100.0, job_type="x"),
            TraceJob(id="3", team="t", submit_s=5000.0, gpus=1, duration_s=100.0, job_type="x")]
    replay = Replay(jobs, nodes=1, gpus_per_node=1, policy=POLICIES["backfill"], estimates=True)
    replay.run()
    assert replay.started == {"1": 0.0, "2": 1000.0, "3": 5000.0}
    assert list(replay.lag._starts) == [(1000.0, 900.0)]  # the second only, behind its submission (FIFO)


def test_live_lag_samples_first_starts_a_pass_left_waiting_not_a_late_first_pass(cast: Any, pool: NodePool) -> None:
    register(pool, "n1")
    # Submitted five minutes before the pass that placed it (workers were busy): it started after
    # its submission, but no pass left it waiting, so its wait says nothing of the line.
    late = make(cast, pool)
    Run.objects.filter(pk=late.pk).update(created_at=timezone.now() - timedelta(minutes=5))
    assert scheduling_pass().placed == [late.pk]
    start(late)
    waited = make(cast, pool)
    assert scheduling_pass().placed == []
    exit_(late)
    assert scheduling_pass().placed == [waited.pk]
    assert not QueueEstimate.objects.filter(run=late).exists()
    row = QueueEstimate.objects.get(run=waited, kind=EstimateKind.AT_SUBMISSION)
    assert row.actual_start is not None
    waited.refresh_from_db()
    assert waited.queue_deadline is not None
    lag = lags_load(now=timezone.now(), policies={"local": Policy(demote_after_s=0)})["local"]
    started = row.actual_start.timestamp()
    assert list(lag._starts) == [(started, pytest.approx(started - waited.queue_deadline.timestamp()))]
