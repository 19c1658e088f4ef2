"""Demo data for tracking: a small finished learning-rate sweep in vision/digits with metric
curves, so the runs list, run page and comparison have something to show on a fresh `make run`."""

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
from apps.tracking.services import metric_points_store

DEMO_FAMILY = "demo-lr-sweep"
DEMO_TEMPLATE = "digits-classifier"
DEMO_STEPS = 600
SECONDS_PER_STEP = 0.02


def seed_tracking(*, users: dict[str, Any], teams: dict[str, Any], stdout: Any) -> None:
    if "tracking_metricpoint" not in connection.introspection.table_names():
        # Before the lead's migration for this app exists, seed_demo must still work for others.
        stdout.write("tracking: tables not migrated yet; demo sweep skipped")
        return
    if Run.objects.filter(family=DEMO_FAMILY).exists():
        return
    project = teams["vision"].projects.order_by("id").first()
    template = JobTemplate.objects.filter(published=True, slug=DEMO_TEMPLATE).order_by("-version").first()
    pool = NodePool.objects.order_by("id").first()
    if project is None or template is None or pool is None:
        stdout.write("tracking: no project, template or pool yet; demo sweep skipped")
        return
    now = timezone.now()
    with transaction.atomic():
        runs = []
        for i, lr in enumerate((0.3, 0.1, 0.03)):
            # One after the other an hour ago, at a pace this machine's CPU keeps: the runs feed the
            # runtime predictor like any finished run, and their times agree with their metrics.
            started = now - timedelta(hours=1) + i * timedelta(seconds=DEMO_STEPS * SECONDS_PER_STEP + 30)
            finished = started + timedelta(seconds=DEMO_STEPS * SECONDS_PER_STEP)
            params = params_resolve(schema=template.param_schema or {}, params={"lr": lr, template.total_steps_param: DEMO_STEPS})
            run = Run.objects.create(
                project=project, template=template, pool=pool, entrypoint=template.entrypoint, submitted_by=users.get("alice"),
                name=f"digits lr={lr}", params=params, family=DEMO_FAMILY,
                tags={"owner": "alice", "task": "digits", "dataset": "sklearn-digits", "candidate": "baseline",
                      "family": DEMO_FAMILY},
                status=RunStatus.SUCCEEDED, total_steps=DEMO_STEPS, steps_done=DEMO_STEPS, queued_at=started,
                started_at=started, finished_at=finished,
            )
            Run.objects.filter(pk=run.pk).update(created_at=started)
            Attempt.objects.create(run=run, number=1, status="succeeded", started_at=started, ended_at=finished,
                                   lineage={"dataset": "sklearn-digits", "seed": 1234})
            rows = []
            for step in range(DEMO_STEPS):
                t = started.timestamp() + step * SECONDS_PER_STEP
                loss = 2.3 * math.exp(-step * lr / 40) + 0.05 * (i + 1) + 0.03 * math.sin(step / 7)
                rows.append(("loss", step, loss, 0, t))
                if step % 50 == 49:
                    rows.append(("val_accuracy", step, min(0.99, 1 - loss / 2.5), 0, t))
            metric_points_store(run_id=run.pk, attempt=1, rows=rows)
            runs.append(run)
        runs_seeded_record(runs=runs)
    stdout.write("tracking: demo learning-rate sweep (3 runs with metrics)")
