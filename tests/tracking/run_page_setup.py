"""Run inside the live stack with `manage.py shell -c`: finished runs of the kinds the run page
must word right (tests/tracking/test_browser.py): one written like the demo history (energy
recorded, no samples, no steps), a CPU run whose samples carry no watts or utilization, a
cancelled one, a sweep with two trials, a long run that kept 3 of its 303 checkpoints, and three
runs to compare of which only one logged the alphabetically first metric. Prints their ids as JSON."""

from __future__ import annotations

import json
from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from apps.jobtemplates.models import JobTemplate
from apps.nodes.models import Node, NodePool
from apps.runs.models import Assignment, Attempt, Checkpoint, EnergySample, Run, RunStatus
from apps.tenants.models import Project
from apps.tracking.services import metric_points_store


def main() -> None:
    project = Project.objects.get(team__slug="vision", slug="digits")
    template = JobTemplate.objects.exclude(kind="sweep").order_by("slug", "-version").first() or JobTemplate.objects.create(
        slug="page-train", version=1, title="Page", kind="train", entrypoint="python -c pass")
    sweep_template = JobTemplate.objects.filter(kind="sweep").first() or JobTemplate.objects.create(
        slug="page-sweep", version=1, title="Sweep", kind="sweep", entrypoint="trainyard:sweep-controller")
    pool = NodePool.objects.order_by("id").first() or NodePool.objects.create(name="local")
    node = Node.objects.create(pool=pool, hostname="page-node", agent_uid="page-node")
    end = timezone.now() - timedelta(hours=1)
    ids: dict[str, object] = {}

    def finished(name: str, *, status: str = RunStatus.SUCCEEDED, energy_j: float = 0.0, **fields: object) -> tuple[Run, Attempt]:
        run = Run.objects.create(project=project, template=template, pool=pool, entrypoint="python -c pass", name=name, status=status,
                                 started_at=end - timedelta(minutes=30), finished_at=end, **fields)
        attempt = Attempt.objects.create(run=run, number=1, status="succeeded" if status == RunStatus.SUCCEEDED else status,
                                         started_at=end - timedelta(minutes=30), ended_at=end, energy_j=energy_j)
        Assignment.objects.create(attempt=attempt, node=node, devices=[0], state="exited", started_at=attempt.started_at)
        return run, attempt

    with transaction.atomic():
        ids["history"] = finished("page history", energy_j=527917.3)[0].pk
        cpu, attempt = finished("page cpu", energy_j=477.0, energy_estimated=True, total_steps=300, steps_done=300)
        Run.objects.filter(pk=cpu.pk).update(energy_j=477.0)
        for i in range(5):
            EnergySample.objects.create(attempt=attempt, node=node, device_index=-1, at=attempt.started_at + timedelta(minutes=6 * i),
                                        power_w=None, utilization=None, energy_j=477.0 * (i + 1) / 5, estimated=True)
        ids["cpu"] = cpu.pk
        ids["cancelled"] = finished("page cancelled", status=RunStatus.CANCELLED, total_steps=1000, steps_done=200)[0].pk
        parent = Run.objects.create(project=project, template=sweep_template, pool=pool, entrypoint="trainyard:sweep-controller",
                                    name="page sweep", status=RunStatus.SUCCEEDED, nodes=1, devices_per_node=0, total_steps=2,
                                    steps_done=2, status_reason="2 of 2 runs succeeded", params={"space": {"lr": [0.1, 0.01]}})
        ids["sweep"] = parent.pk
        ids["trials"] = [finished(f"page sweep #{i + 1}", parent=parent, params={"lr": lr})[0].pk for i, lr in enumerate((0.1, 0.01))]
        long, attempt = finished("page checkpoints", total_steps=3030, steps_done=3030)
        Checkpoint.objects.bulk_create([
            Checkpoint(run=long, attempt=attempt, step=step, file_name=f"step-{step}.pt", size=1 << 20, sha256=f"{step:064x}",
                       metrics={"loss": 1.0 / step}, deleted_at=None if step > 3000 else end)
            for step in range(10, 3040, 10)])
        ids["checkpoints"] = long.pk
        partial = []
        for i, keys in enumerate((("acc", "loss"), ("loss",), ("loss",))):
            run = finished(f"page partial {i}", params={"lr": 0.1 / (i + 1)})[0]
            metric_points_store(run_id=run.pk, attempt=1, rows=[(key, 99, 0.5 + i / 10, 0, 1_700_000_099.0) for key in keys])
            partial.append(run.pk)
        ids["partial"] = partial
    print(json.dumps(ids))


main()
