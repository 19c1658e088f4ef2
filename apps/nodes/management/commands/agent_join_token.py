from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from apps.audit.context import acting_as
from apps.nodes.models import NodePool
from apps.nodes.services import join_token_create


class Command(BaseCommand):
    help = "Create a join token for a node pool and print only the token (for `make run` and scripts)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--pool", required=True)
        parser.add_argument("--name", default="")
        parser.add_argument("--ttl-hours", type=float, default=24.0)

    def handle(self, *args: Any, **options: Any) -> None:
        pool = NodePool.objects.filter(name=options["pool"]).first()
        if pool is None:
            raise CommandError(f"no node pool named {options['pool']!r} (run seed_demo, or create it in the admin)")
        with acting_as(label="manage.py agent_join_token"):
            _, secret = join_token_create(pool=pool, name=options["name"], ttl_hours=options["ttl_hours"] or None)
        self.stdout.write(secret)
