"""Demo data: a dated price for the local pool, monthly budgets, and quotas (idempotent)."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from apps.billing.models import Budget, PoolPrice, Quota
from apps.billing.services import budget_create, quota_set
from apps.nodes.models import NodePool
from apps.tenants.models import Project

DEMO_PRICE = Decimal("0.50")
DEMO_PRICE_FROM = datetime(2024, 1, 1, tzinfo=UTC)
DEMO_BUDGETS = {("vision", "digits"): Decimal("100.00"), ("nlp", "tiny-lm"): Decimal("50.00")}
# The local pool of a fresh stack is one agent with its default single CPU slot: guarantees that
# add up to more than that over-commit the pool (issue 29). Vision (alice's team, the walkthrough's)
# is guaranteed that device; every team may borrow up to four idle ones as the pool grows.
DEMO_POOL_DEVICES = 1
DEMO_QUOTAS = {"vision": {"guaranteed_devices": 1, "borrow_limit": 3}}
DEMO_QUOTA = {"guaranteed_devices": 0, "borrow_limit": 4}


def seed_billing(*, users: dict[str, Any], teams: dict[str, Any], stdout: Any) -> None:
    pool = NodePool.objects.filter(name="local").first()
    if pool is not None:
        if not PoolPrice.objects.filter(pool=pool).exists():
            price = pool.price_per_device_hour or DEMO_PRICE
            PoolPrice.objects.create(pool=pool, price_per_device_hour=price, effective_from=DEMO_PRICE_FROM)
            NodePool.objects.filter(pk=pool.pk, price_per_device_hour=0).update(price_per_device_hour=price)
        for team in teams.values():
            if not Quota.objects.filter(team=team, pool=pool).exists():
                quota_set(team=team, pool=pool, **DEMO_QUOTAS.get(team.slug, DEMO_QUOTA))
    for (team_slug, project_slug), amount in DEMO_BUDGETS.items():
        project = Project.objects.filter(team__slug=team_slug, slug=project_slug).select_related("team").first()
        if project is not None and not Budget.objects.filter(project=project).exists():
            budget_create(team=project.team, project=project, amount=amount)
    stdout.write("Billing: local pool price, budgets for vision/digits and nlp/tiny-lm, quotas.")
