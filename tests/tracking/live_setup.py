"""Run inside the live stack with `manage.py shell -c`: makes a running run on a node with a
credential, and three finished runs to compare; prints their ids and the secret as JSON.
Kept as a module (not a management command) because only tests need it."""

from __future__ import annotations

import json
import math
import uuid

from django.db import transaction
from django.utils import timezone

from apps.jobtemplates.models import JobTemplate
from apps.nodes.auth import hash_secret
from apps.nodes.models import Node, NodePool
from apps.runs.models import Assignment, Attempt, Run, RunStatus
from apps.tenants.models import Project
from apps.tracking.services import metric_points_store


def main() -> None:
    project = Project.objects.get(team__slug="vision", slug="digits")
    template = JobTemplate.objects.order_by("slug", "-version").first() or JobTemplate.objects.create(
        slug="live-train", version=1, title="Live", kind="train", entrypoint="python -c pass")
    pool = NodePool.objects.order_by("id").first() or NodePool.objects.create(name="local")
    secret = "tyn_" + uuid.uuid4().hex
    node = Node.objects.create(pool=pool, hostname="browser-node", agent_uid=uuid.uuid4().hex, credential_hash=hash_secret(secret))
    now = timezone.now()
    with transaction.atomic():
        live = Run.objects.create(project=project, template=template, pool=pool, entrypoint="python -c pass", name="live chart",
                                  status=RunStatus.RUNNING, total_steps=1000, steps_done=150, started_at=now, progress_at=now,
                                  params={"lr": 0.1})
        attempt = Attempt.objects.create(run=live, number=1, status="running", started_at=now, lineage={"seed": 7})
        Assignment.objects.create(attempt=attempt, node=node, devices=[0], state="started")
        compare = []
        for i, lr in enumerate((0.5, 0.1, 0.02)):
            run = Run.objects.create(project=project, template=template, pool=pool, entrypoint="python -c pass", name=f"sweep lr={lr}",
                                     status=RunStatus.SUCCEEDED, params={"lr": lr, "batch_size": 64, "optimizer": "adam" if i else "sgd"},
                                     tags={"owner": "alice", "task": "digits"}, family="browser-sweep")
            Attempt.objects.create(run=run, number=1, status="succeeded", lineage={"dataset": "digits", "seed": 1 + i})
            rows = []
            for step in range(2000):
                loss = 2.0 * math.exp(-step * lr / 100) + 0.1 * i
                rows.append(("loss", step, loss, 0, 1_700_000_000.0 + step))
                if step % 100 == 99:
                    rows.append(("val_accuracy", step, 1 - loss / 2.5, 0, 1_700_000_000.0 + step))
            metric_points_store(run_id=run.pk, attempt=1, rows=rows)
            compare.append(run.pk)
    print(json.dumps({"run": live.pk, "attempt": attempt.pk, "secret": secret, "compare": compare}))


main()
