from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.apps import AppConfig


def seed_local_pool(*, users: dict[str, Any], teams: dict[str, Any], stdout: Any) -> None:
    from apps.nodes.models import NodePool

    NodePool.objects.get_or_create(name="local", defaults={
        "description": "This machine: CPU slots (or its GPUs) run by the local agent.",
        "price_per_device_hour": Decimal("0.50")})


class NodesConfig(AppConfig):
    name = "apps.nodes"
    label = "nodes"

    def ready(self) -> None:
        from apps.core.seeding import DEMO_SEEDERS

        if seed_local_pool not in DEMO_SEEDERS:
            DEMO_SEEDERS.append(seed_local_pool)
