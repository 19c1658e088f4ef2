"""Test/dev aid: submit a run with a raw entrypoint, or cancel one, without the runs API.

    manage.py debug_run submit --project vision/digits --entrypoint "python job.py" [--nodes 2]
    manage.py debug_run cancel RUN_ID
Prints the run id (submit) or its status (cancel).
"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from apps.audit.context import acting_as
from apps.core.queueing import request_scheduling_pass
from apps.jobtemplates.models import JobTemplate, TemplateKind
from apps.nodes.models import NodePool
from apps.runs.models import Run
from apps.runs.services.lifecycle import run_cancel
from apps.tenants.models import Project


class Command(BaseCommand):
    help = "Debug aid: submit a raw-entrypoint run, or cancel a run."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        s = sub.add_parser("submit")
        s.add_argument("--project", default="vision/digits")
        s.add_argument("--entrypoint", required=True)
        s.add_argument("--pool", default="local")
        s.add_argument("--nodes", type=int, default=1)
        s.add_argument("--devices-per-node", type=int, default=1)
        s.add_argument("--params", default="{}")
        s.add_argument("--grace", type=int, default=30)
        s.add_argument("--max-restarts", type=int, default=3)
        s.add_argument("--checkpoint-every-steps", type=int, default=0)
        s.add_argument("--checkpoint-keep", type=int, default=0, help="keep the last K checkpoint files (0 = all)")
        s.add_argument("--max-runtime", type=int, default=3600, help="seconds")
        c = sub.add_parser("cancel")
        c.add_argument("run_id", type=int)

    def handle(self, *args: Any, **o: Any) -> None:
        with acting_as(label="manage.py debug_run"):
            if o["action"] == "cancel":
                run = run_cancel(run=Run.objects.get(pk=o["run_id"]), user=None)
                self.stdout.write(run.status)
                return
            team, _, slug = o["project"].partition("/")
            project = Project.objects.filter(team__slug=team, slug=slug).first()
            pool = NodePool.objects.filter(name=o["pool"]).first()
            if project is None or pool is None:
                raise CommandError("unknown project or pool")
            template, _ = JobTemplate.objects.get_or_create(slug="debug-entrypoint", version=1, defaults={
                "title": "Debug entrypoint", "kind": TemplateKind.CUSTOM, "entrypoint": "(per run)"})
            run = Run.objects.create(project=project, template=template, pool=pool, entrypoint=o["entrypoint"],
                                     nodes=o["nodes"], devices_per_node=o["devices_per_node"], params=json.loads(o["params"]),
                                     grace_period_s=o["grace"],
                                     max_restarts=o["max_restarts"], max_runtime_s=o["max_runtime"], queued_at=timezone.now(),
                                     checkpoint_policy={"every_steps": o["checkpoint_every_steps"],
                                                        "keep_last": o["checkpoint_keep"]})
            request_scheduling_pass()
        self.stdout.write(str(run.pk))
