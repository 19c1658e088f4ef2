"""A scheduling pass reads every waiting project's budgets together: the same few queries for
two projects or twelve, and each project blocked by its own budget or its team's, not another's."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from apps.billing.models import Budget, EntryKind, UsageEntry
from apps.billing.selectors import budget_spent, budgets_for_project, period_for
from apps.nodes.models import NodePool
from apps.scheduling.snapshot import budget_blocks
from apps.tenants.models import Project
from apps.tenants.services import project_create
from tests.billing.helpers import make_attempt, make_pool, make_run


def _spend(project: Project, pool: NodePool, cost: str) -> None:
    run = make_run(project, pool, status="succeeded")
    now = timezone.now()
    attempt = make_attempt(run, started_at=now, ended_at=now)
    UsageEntry.objects.create(kind=EntryKind.ACCRUAL, attempt=attempt, run=run, project=project, team=project.team, pool=pool,
                              template=run.template,
                              period_start=now, period_end=now, devices=1, device_seconds=Decimal(60), cost=Decimal(cost),
                              price_per_device_hour=Decimal(1))


def _projects(cast: Any, pool: NodePool, count: int) -> list[Project]:
    """`count` vision projects: even ones with their own $1 budget, spent $1 (used up) every
    fourth, $0.50 else; odd ones under no budget of their own."""
    made = []
    for i in range(count):
        project = project_create(team=cast.vision, slug=f"b{Project.objects.count()}", name=f"B {i}")
        if i % 2 == 0:
            Budget.objects.create(team=cast.vision, project=project, amount=Decimal("1.00"))
            _spend(project, pool, "1.00" if i % 4 == 0 else "0.50")
        made.append(project)
    return made


def _blocks(projects: list[Project]) -> tuple[dict[int, str], int]:
    with CaptureQueriesContext(connection) as ctx:
        blocks = budget_blocks(projects, timezone.now())
    return blocks, len(ctx.captured_queries)


def test_budget_blocks_reads_all_projects_together(cast: Any) -> None:
    pool = make_pool("local")
    few = _projects(cast, pool, 2)
    _, few_queries = _blocks(few)
    many = few + _projects(cast, pool, 10)
    blocks, many_queries = _blocks(many)
    assert many_queries == few_queries <= 3, f"{few_queries} queries for 2 projects, {many_queries} for 12 (a round per project?)"
    # The same answer as reading each project's budgets alone.
    period = period_for(at=timezone.now())
    alone = {p.pk for p in many if any(budget_spent(budget=b, period=period) >= b.amount for b in budgets_for_project(project=p))}
    # Used up: the first of the two, and the 1st, 5th and 9th of the ten.
    assert set(blocks) == alone == {many[0].pk, many[2].pk, many[6].pk, many[10].pk}
    assert "is used up (spent $1.00 of $1.00)" in blocks[many[0].pk]


def test_team_budget_blocks_every_project_of_the_team_only(cast: Any) -> None:
    pool = make_pool("local")
    other = project_create(team=cast.vision, slug="other", name="Other")
    Budget.objects.create(team=cast.vision, project=None, amount=Decimal("2.00"))
    Budget.objects.create(team=cast.vision, project=cast.digits, amount=Decimal("100.00"))  # its own is far from used up
    _spend(cast.digits, pool, "1.50")
    _spend(other, pool, "0.50")
    _spend(cast.tinylm, pool, "50.00")  # another team, no budget: never blocked
    blocks, _ = _blocks([cast.digits, other, cast.tinylm])
    assert set(blocks) == {cast.digits.pk, other.pk}
    assert "spent $2.00 of $2.00" in blocks[other.pk] and "spent $2.00 of $2.00" in blocks[cast.digits.pk]
