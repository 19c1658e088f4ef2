"""Run inside the live stack with `manage.py shell -c`: runs for the runs list to follow (one
running, one queued, in their own family) and two finished runs to compare, one of them without
a name, each with a val_accuracy logged once and enough metrics for a wide summary table; prints
their ids as JSON. A module (not a management command) because only tests need it."""

from __future__ import annotations

import json

from django.db import transaction

from apps.jobtemplates.models import JobTemplate
from apps.nodes.models import NodePool
from apps.runs.models import Run, RunStatus
from apps.tenants.models import Project
from apps.tracking.services import metric_points_store

FAMILY = "browser-refresh"
WIDE_KEYS = ("loss", "grad_norm", "learning_rate", "train_accuracy", "throughput", "val_loss")


def main() -> None:
    project = Project.objects.get(team__slug="vision", slug="digits")
    template = JobTemplate.objects.order_by("slug", "-version").first()
    pool = NodePool.objects.order_by("id").first()
    assert template is not None and pool is not None, "the demo data has a template and a pool"
    common = {"project": project, "template": template, "pool": pool, "entrypoint": "python -c pass"}
    with transaction.atomic():
        running = Run.objects.create(**common, name="refresh running", status=RunStatus.RUNNING, total_steps=100, steps_done=10,
                                     family=FAMILY, tags={"family": FAMILY})
        queued = Run.objects.create(**common, name="refresh queued", status=RunStatus.QUEUED, family=FAMILY, tags={"family": FAMILY})
        compare = []
        for i, name in enumerate(("a run with a rather long descriptive name", "")):
            run = Run.objects.create(**common, name=name, status=RunStatus.SUCCEEDED, params={"lr": 0.1 * (i + 1), "batch_size": 64})
            rows = [(key, step, 1.0 / (step + 1) + k + i, 0, 1_700_000_000.0 + step)
                    for k, key in enumerate(WIDE_KEYS) for step in range(100)]
            rows.append(("val_accuracy", 99, 0.8 + 0.05 * i, 0, 1_700_000_099.0))
            metric_points_store(run_id=run.pk, attempt=1, rows=rows)
            compare.append(run.pk)
    print(json.dumps({"running": running.pk, "queued": queued.pk, "family": FAMILY, "compare": compare}))


main()
