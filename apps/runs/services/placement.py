"""Placement of queued runs onto free devices.

The scheduler itself (priorities, quotas, fair share, backfill, preemption) is
apps.scheduling, a layer above this app; apps.core.queueing.request_scheduling_pass queues its
Celery task "scheduling.pass" by name. `first_fit` is the original minimal placement, a pure
function kept for tests and as the simplest reference.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from apps.nodes.models import Node, NodeState
from apps.runs.models import Priority

PRIORITY_ORDER: dict[str, int] = {Priority.URGENT: 0, Priority.NORMAL: 1, Priority.LOW: 2}
MASTER_PORT_BASE = 29500
MASTER_PORT_SPAN = 20000


@dataclass(frozen=True)
class NodeFree:
    node_id: int
    pool_id: int
    free: tuple[int, ...]


@dataclass(frozen=True)
class RunNeed:
    run_id: int
    pool_id: int
    nodes: int
    devices_per_node: int


@dataclass(frozen=True)
class Placement:
    run_id: int
    # (node_id, device indexes) in rank order: rank 0 first.
    nodes: list[tuple[int, tuple[int, ...]]] = field(default_factory=list)


def first_fit(*, runs: list[RunNeed], nodes: list[NodeFree]) -> list[Placement]:
    """Place runs in the given order; a gang gets all its nodes at once or nothing."""
    free = {n.node_id: list(n.free) for n in nodes}
    pools = {n.node_id: n.pool_id for n in nodes}
    out: list[Placement] = []
    for need in runs:
        fits = [nid for nid in free if pools[nid] == need.pool_id and len(free[nid]) >= need.devices_per_node]
        if len(fits) < need.nodes:
            continue
        chosen = fits[: need.nodes]
        placement = Placement(run_id=need.run_id)
        for nid in chosen:
            devices = tuple(free[nid][: need.devices_per_node])
            free[nid] = free[nid][need.devices_per_node:]
            placement.nodes.append((nid, devices))
        out.append(placement)
    return out


def _ready_nodes() -> list[Node]:
    fresh = timezone.now() - timedelta(seconds=settings.TRAINYARD_NODE_TIMEOUT_S)
    return list(Node.objects.filter(state=NodeState.READY, last_heartbeat_at__gte=fresh).order_by("pk"))


def master_port_for(*, run_id: int, number: int) -> int:
    return MASTER_PORT_BASE + (run_id * 31 + number * 7) % MASTER_PORT_SPAN

