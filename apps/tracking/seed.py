"""Demo data for tracking: a small finished learning-rate sweep in vision/digits with metric
curves, so the runs list, run page and comparison have something to show on a fresh `make run`,
and the short smoke test that came before it.

Their times are what this kind of run takes on a laptop CPU: a few seconds to start (Python,
PyTorch, the data), then about a millisecond a step. The runtime predictor fits start-up and pace
to runs of different lengths, so from these it predicts a demo user's longer runs about right."""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from apps.jobtemplates.models import JobTemplate
from apps.nodes.models import NodePool
from apps.runs.models import Attempt, Run, RunStatus
from apps.runs.services.demo import runs_seeded_record
from apps.runs.services.params import params_resolve
from apps.runs.services.transitions import run_new
from apps.tracking.services import metric_points_store

DEMO_FAMILY = "demo-lr-sweep"
SMOKE_FAMILY = "demo-smoke-test"
DEMO_TEMPLATE = "digits-classifier"
DEMO_STEPS = 600
SMOKE_STEPS = 50
START_UP_S = 5.0
SECONDS_PER_STEP = 0.001


def seed_tracking(*, users: dict[str, Any], teams: dict[str, Any], stdout: Any) -> None:
    if "tracking_metricpoint" not in connection.introspection.table_names():
        # Before the lead's migration for this app exists, seed_demo must still work for others.
        stdout.write("tracking: tables not migrated yet; demo sweep skipped")
        return
    if Run.objects.filter(family=DEMO_FAMILY).exists():
        return
    project = teams["vision"].projects.order_by("id").first()
    template = JobTemplate.objects.filter(published=True, slug=DEMO_TEMPLATE).order_by("-version").first()
    pool = NodePool.objects.filter(name="local").first() or NodePool.objects.order_by("id").first()
    if project is None or template is None or pool is None:
        stdout.write("tracking: no project, template or pool yet; demo sweep skipped")
        return
    # One after the other, 30 s apart, the last one ending as the stack is seeded: the smoke test,
    # then the sweep. Started an hour back, a fresh stack's runs said "1 hour ago" (issue 29).
    plan = [("digits smoke test", SMOKE_FAMILY, 0.1, SMOKE_STEPS)] + [
        (f"digits lr={lr}", DEMO_FAMILY, lr, DEMO_STEPS) for lr in (0.3, 0.1, 0.03)]
    took = sum(START_UP_S + steps * SECONDS_PER_STEP for *_, steps in plan) + 30 * (len(plan) - 1)
    started = timezone.now() - timedelta(seconds=math.ceil(took) + 5)
    with transaction.atomic():
        runs = []
        for i, (name, family, lr, steps) in enumerate(plan):
            finished = started + timedelta(seconds=START_UP_S + steps * SECONDS_PER_STEP)
            params = params_resolve(schema=template.param_schema or {}, params={"lr": lr, template.total_steps_param: steps})
            run = run_new(
                status=RunStatus.SUCCEEDED,
                project=project, template=template, pool=pool, entrypoint=template.entrypoint, submitted_by=users.get("alice"),
                name=name, params=params, family=family,
                tags={"owner": "alice", "task": "digits", "dataset": "sklearn-digits", "candidate": "baseline", "family": family},
                total_steps=steps, steps_done=steps, queued_at=started, started_at=started, finished_at=finished,
            )
            run.save(force_insert=True)
            Run.objects.filter(pk=run.pk).update(created_at=started)
            Attempt.objects.create(run=run, number=1, status="succeeded", started_at=started, ended_at=finished,
                                   lineage={"dataset": "sklearn-digits", "seed": 1234})
            metric_points_store(run_id=run.pk, attempt=1, rows=_curves(started.timestamp() + START_UP_S, steps, lr, i))
            runs.append(run)
            started = finished + timedelta(seconds=30)
        runs_seeded_record(runs=runs)
    stdout.write("tracking: demo smoke test and learning-rate sweep (4 runs with metrics)")


def _curves(t0: float, steps: int, lr: float, i: int) -> list[tuple[str, int, float, int, float]]:
    """Loss every step and validation accuracy every 50 (and at the last step), stamped from t0."""
    rows = []
    for step in range(steps):
        t = t0 + step * SECONDS_PER_STEP
        loss = 2.3 * math.exp(-step * lr / 40) + 0.05 * (i + 1) + 0.03 * math.sin(step / 7)
        rows.append(("loss", step, loss, 0, t))
        if step % 50 == 49:
            rows.append(("val_accuracy", step, min(0.99, 1 - loss / 2.5), 0, t))
    return rows


HISTORY_FAMILY_PREFIX = "demo-history"


def seed_history_metrics(*, users: dict[str, Any], stdout: Any) -> int:
    """Metric curves for `seed_demo --history`'s finished runs (billing writes the runs and their
    ledger, then this), so finance's top runs show each run's final metric, not a dash (issue 29).
    About 100 loss points and 10 validation accuracies a run, up to the steps it did.
    Idempotent: runs that already have metrics are left alone."""
    if "tracking_metricpoint" not in connection.introspection.table_names():
        return 0
    from apps.tracking.models import MetricSummary

    runs = Run.objects.filter(family__startswith=HISTORY_FAMILY_PREFIX, steps_done__gt=0).exclude(
        pk__in=MetricSummary.objects.values("run_id")).order_by("pk")
    made = 0
    with transaction.atomic():
        for run in runs:
            t0 = (run.started_at or timezone.now()).timestamp() + START_UP_S
            pace = ((run.finished_at - run.started_at).total_seconds() - START_UP_S) / run.steps_done if (
                run.started_at and run.finished_at) else SECONDS_PER_STEP
            lr = float((run.params or {}).get("lr") or 0.01)
            rows: list[tuple[str, int, float, int, float]] = []
            stride = max(1, run.steps_done // 100)  # about 100 points a run, whatever its length
            for n, step in enumerate(range(0, run.steps_done, stride)):
                loss = 2.3 * math.exp(-5 * step / run.steps_done) * (0.5 + lr * 10) + 0.05 + 0.02 * math.sin(run.pk + n / 7)
                rows.append(("loss", step, loss, 0, t0 + step * pace))
                if n % 10 == 9 or step + stride >= run.steps_done:
                    rows.append(("val_accuracy", step, max(0.0, min(0.99, 1 - loss / 2.5)), 0, t0 + step * pace))
            metric_points_store(run_id=run.pk, attempt=1, rows=rows)
            made += 1
    if made:
        stdout.write(f"tracking: metric curves for {made} demo history runs")
    return made
