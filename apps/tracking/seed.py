"""Demo data for tracking: a small finished learning-rate sweep in vision/digits with metric
curves, so the runs list, run page and comparison have something to show on a fresh `make run`."""

from __future__ import annotations

import math
import time
from typing import Any

from django.db import connection, transaction

from apps.jobtemplates.models import JobTemplate
from apps.nodes.models import NodePool
from apps.runs.models import Attempt, Run, RunStatus
from apps.tracking.services import metric_points_store

DEMO_FAMILY = "demo-lr-sweep"


def seed_tracking(*, users: dict[str, Any], teams: dict[str, Any], stdout: Any) -> None:
    if "tracking_metricpoint" not in connection.introspection.table_names():
        # Before the lead's migration for this app exists, seed_demo must still work for others.
        stdout.write("tracking: tables not migrated yet; demo sweep skipped")
        return
    if Run.objects.filter(family=DEMO_FAMILY).exists():
        return
    project = teams["vision"].projects.order_by("id").first()
    template = JobTemplate.objects.filter(published=True).order_by("slug", "-version").first()
    pool = NodePool.objects.order_by("id").first()
    if project is None or template is None or pool is None:
        stdout.write("tracking: no project, template or pool yet; demo sweep skipped")
        return
    now = time.time()
    with transaction.atomic():
        for i, lr in enumerate((0.3, 0.1, 0.03)):
            run = Run.objects.create(
                project=project, template=template, pool=pool, entrypoint=template.entrypoint, submitted_by=users.get("alice"),
                name=f"digits lr={lr}", params={"lr": lr, "epochs": 3, "batch_size": 64}, family=DEMO_FAMILY,
                tags={"owner": "alice", "task": "digits", "dataset": "sklearn-digits", "family": DEMO_FAMILY},
                status=RunStatus.SUCCEEDED, total_steps=600, steps_done=600,
            )
            Attempt.objects.create(run=run, number=1, status="succeeded", lineage={"dataset": "sklearn-digits", "seed": 1234})
            rows = []
            for step in range(600):
                t = now - 3600 + step * 2
                loss = 2.3 * math.exp(-step * lr / 40) + 0.05 * (i + 1) + 0.03 * math.sin(step / 7)
                rows.append(("loss", step, loss, 0, t))
                if step % 50 == 49:
                    rows.append(("val_accuracy", step, min(0.99, 1 - loss / 2.5), 0, t))
            metric_points_store(run_id=run.pk, attempt=1, rows=rows)
    stdout.write("tracking: demo learning-rate sweep (3 runs with metrics)")
