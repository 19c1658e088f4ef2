"""Issue 28: the estimator's learned correction (`WaitCalibration`), the same in the trace replay
and in the portal's passes and forecast."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from apps.jobtemplates.models import JobTemplate
from apps.nodes.models import NodePool
from apps.runs.models import Run
from apps.scheduling.estimate import WaitCalibration, _best_point, queue_estimates
from apps.scheduling.model import ClusterState, Node, PriorityClass, QueuedJob, RunningJob
from apps.scheduling.models import EstimateKind, QueueEstimate
from apps.scheduling.outcomes import calibrations_cached

HOUR = 3600.0


def test_best_point_is_where_most_outcomes_would_call_it_right() -> None:
    # Five waits near 4 h, two near 10 min: 4 h-ish is right for five, the mean for none.
    point, hits = _best_point([600.0, 700.0, 4 * HOUR, 4.2 * HOUR, 3.9 * HOUR, 4.5 * HOUR, 4.1 * HOUR])
    assert hits == 5
    assert all(abs(point - w) <= 0.25 * w for w in (4 * HOUR, 4.2 * HOUR, 3.9 * HOUR, 4.5 * HOUR, 4.1 * HOUR))


def test_a_class_whose_estimates_run_early_is_corrected() -> None:
    cal = WaitCalibration(min_samples=20)
    key = WaitCalibration.key(estimated_wait=HOUR, requeued=True, devices=8)
    assert cal.adjust(key, HOUR) == HOUR  # nothing learned yet: the replay's figure stands
    for i in range(30):
        cal.observe(key, HOUR, 4 * HOUR + 60.0 * (i % 5))
    corrected = cal.adjust(key, HOUR)
    assert abs(corrected - 4 * HOUR) <= HOUR
    # Another class (new runs, one device) learned nothing and keeps its estimate.
    other = WaitCalibration.key(estimated_wait=HOUR, requeued=False, devices=1)
    assert cal.adjust(other, HOUR) == HOUR


def test_a_class_whose_estimates_were_right_keeps_them() -> None:
    cal = WaitCalibration(min_samples=10)
    key = WaitCalibration.key(estimated_wait=2 * HOUR, requeued=False, devices=1)
    # Estimates that were each right, though the waits spread widely: no single wait beats them.
    for i in range(40):
        wait = HOUR * (1 + i % 8)
        cal.observe(key, wait, wait)
    assert cal.adjust(key, 2 * HOUR) == 2 * HOUR


def test_a_correction_only_a_little_better_than_the_replay_is_not_adopted() -> None:
    key = WaitCalibration.key(estimated_wait=HOUR, requeued=False, devices=1)

    def trained(late: int) -> WaitCalibration:
        # 20 estimates right at an hour, `late` runs that waited 3 h after the same estimate.
        cal = WaitCalibration(min_samples=10)
        for i in range(20 + late):
            cal.observe(key, HOUR, HOUR if i % 2 == 0 and i < 40 else 3 * HOUR)
        return cal

    # 3 h is right for 22 outcomes, the replay for 20: not 1.25 times as often, so it stands.
    assert trained(22).adjust(key, HOUR) == HOUR
    # Right for 30 against 20: adopted.
    assert abs(trained(30).adjust(key, HOUR) - 3 * HOUR) <= 0.25 * 3 * HOUR


def _job(job_id: str, *, submitted: float, attained: float = 0.0) -> QueuedJob:
    return QueuedJob(id=job_id, team="a", pool="p", priority_class=PriorityClass.NORMAL, submitted_at=submitted,
                     nodes=1, devices_per_node=1, predicted_runtime=HOUR, attained_s=attained)


def test_queue_estimates_applies_the_correction_and_keeps_the_replays_figure() -> None:
    now = 10 * HOUR
    running = RunningJob(id="r", team="a", pool="p", priority_class=PriorityClass.NORMAL, allocation=(("n", 1),),
                         started_at=now - 60, predicted_end=now + HOUR)
    state = ClusterState(now=now, nodes=(Node(id="n", pool="p", total_devices=1, free_devices=0),), running=(running,),
                         queued=(_job("w", submitted=now),))
    plain = queue_estimates(state)["w"]
    assert plain.start == pytest.approx(now + HOUR) and plain.raw_start is None
    cal = WaitCalibration(min_samples=5)
    key = WaitCalibration.key(estimated_wait=HOUR, requeued=False, devices=1)
    for _ in range(10):
        cal.observe(key, HOUR, 3 * HOUR)
    est = queue_estimates(state, calibration={"p": cal})["w"]
    assert est.raw_start == pytest.approx(now + HOUR)
    assert est.start is not None and abs(est.start - (now + 3 * HOUR)) <= 0.25 * 3 * HOUR
    assert est.low is not None and est.high is not None and est.low <= est.start <= est.high


@pytest.mark.django_db
def test_the_portal_learns_from_the_recorded_raw_estimates(cast: Any) -> None:
    pool = NodePool.objects.create(name="local")
    template, _ = JobTemplate.objects.get_or_create(slug="t", version=1, defaults={
        "title": "t", "kind": "custom", "entrypoint": "x"})
    now = timezone.now()
    for i in range(25):
        run = Run.objects.create(project=cast.digits, template=template, pool=pool, entrypoint="python x.py", nodes=1,
                                 devices_per_node=1, submitted_by=cast.alice, max_runtime_s=3600)
        at = now - timedelta(hours=10, minutes=i)
        QueueEstimate.objects.create(run=run, recorded_at=at, kind=EstimateKind.AT_SUBMISSION,
                                     estimated_start=at + timedelta(hours=1), raw_estimated_start=at + timedelta(hours=1),
                                     actual_start=at + timedelta(hours=3))
    cal = calibrations_cached(now=now, pools=["local"])["local"]
    key = WaitCalibration.key(estimated_wait=HOUR, requeued=False, devices=1)
    assert abs(cal.adjust(key, HOUR) - 3 * HOUR) <= 0.25 * 3 * HOUR
