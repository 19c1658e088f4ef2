"""Puts a few days of usage into a live stack's database (run inside its `manage.py shell`):
finished attempts for both demo teams, one failed, then real accrual through the service."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from apps.billing.services import accrual_run
from apps.jobtemplates.models import JobTemplate
from apps.nodes.models import Node, NodePool
from apps.runs.models import Assignment, Attempt, AttemptStatus, Run, RunStatus
from apps.tenants.models import Project


def main() -> None:
    now = timezone.now()
    pool = NodePool.objects.get(name="local")
    template = JobTemplate.objects.filter(published=True).order_by("slug").first()
    assert template is not None
    node, _ = Node.objects.get_or_create(agent_uid="billing-live", defaults={"pool": pool, "hostname": "billing-live"})
    month_start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    plan = [("vision", "digits", 4, RunStatus.SUCCEEDED, "lr-sweep"), ("vision", "digits", 2, RunStatus.FAILED, "lr-sweep"),
            ("nlp", "tiny-lm", 3, RunStatus.SUCCEEDED, "tiny-base"), ("vision", "digits", 6, RunStatus.SUCCEEDED, "lr-sweep")]
    for index, (team, slug, hours, status, family) in enumerate(plan):
        project = Project.objects.get(team__slug=team, slug=slug)
        start = max(month_start, now - timedelta(days=3 - index * 0.5, hours=hours))
        run = Run.objects.create(project=project, template=template, pool=pool, entrypoint=template.entrypoint, status=status,
                                 family=family, name=f"demo {family} {index}", steps_done=1000 * (index + 1), devices_per_node=2)
        attempt = Attempt.objects.create(run=run, number=1, started_at=start, ended_at=start + timedelta(hours=hours),
                                         status=AttemptStatus.SUCCEEDED if status == RunStatus.SUCCEEDED else AttemptStatus.FAILED,
                                         energy_j=hours * 2 * 250 * 3600)
        Assignment.objects.create(attempt=attempt, node=node, devices=[0, 1])
    accrual_run(now=now)
