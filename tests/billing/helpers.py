"""Small factories for billing tests: pools, templates, runs with attempts on real rows."""

from __future__ import annotations

import itertools
from datetime import datetime
from decimal import Decimal
from typing import Any

from apps.billing.models import PoolPrice
from apps.jobtemplates.models import JobTemplate, TemplateKind
from apps.nodes.models import Node, NodePool
from apps.runs.models import Assignment, Attempt, AttemptStatus, Run, RunStatus
from apps.tenants.models import Project

_seq = itertools.count(1)


def make_pool(name: str | None = None, prices: list[tuple[datetime, str]] | None = None, list_price: str = "0.50") -> NodePool:
    pool = NodePool.objects.create(name=name or f"pool-{next(_seq)}", price_per_device_hour=Decimal(list_price))
    for when, price in prices or []:
        PoolPrice.objects.create(pool=pool, effective_from=when, price_per_device_hour=Decimal(price))
    return pool


def make_template(slug: str = "digits") -> JobTemplate:
    found = JobTemplate.objects.filter(slug=slug, version=1).first()
    if found:
        return found
    return JobTemplate.objects.create(
        slug=slug, version=1, title=slug, kind=TemplateKind.TRAIN, entrypoint="python -m recipes.digits_classifier",
        resources={"pool": "local", "nodes": 1, "devices_per_node": 1, "max_runtime_s": 3600, "max_devices_per_node": 8,
                   "max_nodes": 4},
        published=True,
    )


def make_node(pool: NodePool) -> Node:
    n = next(_seq)
    return Node.objects.create(pool=pool, hostname=f"host-{n}", agent_uid=f"uid-{n}")


def make_run(project: Project, pool: NodePool, *, status: str = RunStatus.RUNNING, devices_per_node: int = 1, nodes: int = 1,
             max_runtime_s: int = 3600, family: str = "", **extra: Any) -> Run:
    return Run.objects.create(project=project, template=make_template(), pool=pool, nodes=nodes, devices_per_node=devices_per_node,
                              max_runtime_s=max_runtime_s, entrypoint="python -m x", status=status, family=family, **extra)


def make_attempt(run: Run, *, started_at: datetime, ended_at: datetime | None = None, devices: list[int] | None = None,
                 status: str | None = None, number: int | None = None, node: Node | None = None, energy_j: float = 0.0) -> Attempt:
    number = number or (run.attempts.count() + 1)
    attempt = Attempt.objects.create(
        run=run, number=number, started_at=started_at, ended_at=ended_at, energy_j=energy_j,
        status=status or (AttemptStatus.SUCCEEDED if ended_at else AttemptStatus.RUNNING),
    )
    Assignment.objects.create(attempt=attempt, node=node or make_node(run.pool), node_rank=0,
                              devices=devices if devices is not None else [0])
    return attempt
