"""Issue 29, item 2: a queued run's estimate is computed from the live ETA of the run holding its
devices (the "about N seconds left" of that run's page), its range holds that point, and the
queue's accuracy line scores only the runs that waited."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from apps.jobtemplates.models import JobTemplate
from apps.nodes.models import NodePool
from apps.runs.models import Attempt, Run, RunStatus
from apps.runs.services.lifecycle import assignment_started
from apps.scheduling.forecast import start_forecast
from apps.scheduling.models import EstimateKind, QueueEstimate
from apps.scheduling.selectors import WAITED_MIN_S, estimate_accuracy
from apps.scheduling.services import scheduling_pass
from apps.tracking.selectors import run_progress
from tests.agents.server import register

# Passes run every 10 s: an estimate written by one is that far from the clock at most.
PASS_S = 10.0


@pytest.fixture
def pool(db: Any) -> NodePool:
    return NodePool.objects.create(name="local")


def _template() -> JobTemplate:
    template, _ = JobTemplate.objects.get_or_create(slug="t", version=1, defaults={
        "title": "t", "kind": "custom", "entrypoint": "x", "total_steps_param": "steps"})
    return template


def _run(cast: Any, pool: NodePool, **fields: Any) -> Run:
    fields.setdefault("queued_at", timezone.now())
    return Run.objects.create(project=cast.digits, template=_template(), pool=pool, entrypoint="python x.py", nodes=1,
                              devices_per_node=1, submitted_by=cast.alice, max_runtime_s=3600,
                              params={"steps": 1000}, **fields)


def _start(run: Run) -> Attempt:
    attempt = Attempt.objects.filter(run=run).order_by("-number").first()
    assert attempt is not None
    for a in attempt.assignments.all():
        assignment_started(attempt_id=attempt.pk, node_id=a.node_id, node_rank=a.node_rank)
    return attempt


def test_a_waiting_runs_estimate_is_the_live_eta_of_the_run_ahead(cast: Any, pool: NodePool) -> None:
    register(pool, "n1")
    now = timezone.now()
    # History: such runs take about 300 s, so a rate measured over 5 s would not yet outweigh it
    # for the scheduler alone; the run page shows the live ETA all the same.
    for seconds in (290, 300, 310):
        _run(cast, pool, status=RunStatus.SUCCEEDED, started_at=now - timedelta(seconds=seconds + 60),
             finished_at=now - timedelta(seconds=60))
    ahead = _run(cast, pool)
    assert scheduling_pass().placed == [ahead.pk]
    attempt = _start(ahead)
    began = timezone.now() - timedelta(seconds=20)
    Attempt.objects.filter(pk=attempt.pk).update(started_at=began)
    # 50 steps in the last 5 s: 10 steps/s, 600 steps to go, so about 60 s left.
    reported = timezone.now()
    Run.objects.filter(pk=ahead.pk).update(started_at=began, total_steps=1000, steps_done=400, progress_at=reported,
                                           progress_from_at=reported - timedelta(seconds=5), progress_from_step=350)
    ahead.refresh_from_db()
    eta_s = run_progress(run=ahead)["eta_s"]
    assert eta_s == pytest.approx(60.0)
    ends_at = reported + timedelta(seconds=eta_s)

    waiting = _run(cast, pool)
    scheduling_pass()
    waiting.refresh_from_db()
    assert waiting.status == RunStatus.QUEUED and waiting.queue_position == 1
    assert waiting.estimated_start is not None and waiting.estimated_start_low is not None
    assert waiting.estimated_start_high is not None
    assert abs((waiting.estimated_start - ends_at).total_seconds()) <= PASS_S, (waiting.estimated_start, ends_at)
    # The range holds the ETA, and the history's 300 s lies outside it.
    assert waiting.estimated_start_low <= ends_at + timedelta(seconds=PASS_S)
    assert ends_at - timedelta(seconds=PASS_S) <= waiting.estimated_start_high
    assert waiting.estimated_start_high < began + timedelta(seconds=280)
    [row] = QueueEstimate.objects.filter(run=waiting)
    assert row.kind == EstimateKind.AT_SUBMISSION and row.estimated_start == waiting.estimated_start

    # The forecast reads the same snapshot: a run asked about now waits behind both.
    forecast = start_forecast(project=cast.digits, template=_template(), pool=pool, nodes=1, devices_per_node=1,
                              priority="normal", preemptible=True, max_runtime_s=3600, params={"steps": 1000})
    assert not forecast.starts_now and forecast.start is not None
    assert forecast.start > waiting.estimated_start + timedelta(seconds=200)


def test_the_accuracy_line_scores_only_runs_that_waited(cast: Any, pool: NodePool) -> None:
    now = timezone.now()

    def estimate(*, waited_s: float, error_s: float) -> None:
        run = _run(cast, pool, status=RunStatus.RUNNING, started_at=now - timedelta(minutes=1))
        actual = now - timedelta(minutes=1)
        QueueEstimate.objects.create(run=run, kind=EstimateKind.AT_SUBMISSION,
                                     recorded_at=actual - timedelta(seconds=waited_s),
                                     estimated_start=actual - timedelta(seconds=error_s), actual_start=actual,
                                     error_s=error_s)

    # Three placed by the next pass (exact by construction), one that waited 30 min and started
    # 20 min off its estimate: the line says 0 of 1, not 3 of 4.
    for _ in range(3):
        estimate(waited_s=5.0, error_s=0.0)
    estimate(waited_s=WAITED_MIN_S + 1, error_s=1.0)
    assert estimate_accuracy(pool=pool)["runs"] == 1
    estimate(waited_s=1800.0, error_s=1200.0)
    accuracy = estimate_accuracy(pool=pool)
    assert (accuracy["runs"], accuracy["within"], accuracy["started_at_once"]) == (2, 1, 3)
    assert accuracy["summary"].startswith("50% of the 2 runs that waited")
    assert "Not counted: 3 runs that started within 20 seconds" in accuracy["summary"]

    client = Client()
    client.force_login(cast.alice)
    page = client.get("/queue/").content.decode()
    assert "50% of the 2 runs that waited" in page and "Not counted: 3 runs" in page
    api = cast.client(cast.alice).get("/api/v1/queue/").json()
    [local] = [p for p in api["pools"] if p["pool"] == "local"]
    assert local["accuracy"]["runs"] == 2 and local["accuracy"]["started_at_once"] == 3
