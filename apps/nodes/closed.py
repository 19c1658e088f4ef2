"""Pools that hold runs but run nothing, such as mlflow_api's ``tracked`` (runs an MLflow client
logged): no submission may name one, and the submit form, the queue and the nodes pages leave
them out rather than show an empty pool that work could wait in.

Apps above fill CLOSED_POOLS (pool name -> why, in words a 400 can carry) in their
AppConfig.ready and register ``closed_pool_admission_check`` in runs' ADMISSION_CHECKS.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from apps.core.errors import FieldError
from apps.nodes.models import NodePool

CLOSED_POOLS: dict[str, str] = {}


def pool_closed_reason(*, name: Any) -> str | None:
    """Why no run may be submitted to the pool ``name``; None for a pool that runs work."""
    return CLOSED_POOLS.get(name) if isinstance(name, str) else None


def open_pools() -> QuerySet[NodePool]:
    """Every pool a run may be submitted to, by name."""
    return NodePool.objects.exclude(name__in=list(CLOSED_POOLS)).order_by("name")


def closed_pool_admission_check(*, run: Any, **_: Any) -> None:
    """Refuses a run whose pool, or one of whose acceptable pools, runs nothing (a 400 naming the field)."""
    pool = getattr(run, "pool", None)
    reason = pool_closed_reason(name=getattr(pool, "name", None))
    if reason:
        raise FieldError("resources.pool", reason)
    for name in getattr(run, "pools", None) or []:
        reason = pool_closed_reason(name=name)
        if reason:
            raise FieldError("resources.pools", reason)
