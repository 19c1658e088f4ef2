"""Placement of queued runs onto free devices: a minimal first-fit.

The scheduler issue replaces `placement_pass` (and may replace `first_fit`) behind the same
names; `request_scheduling_pass` and the Celery task "scheduling.pass" stay. `first_fit` is a
pure function over plain dataclasses so it is tested without a database.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from apps.audit.context import acting_as
from apps.audit.services import audit_record
from apps.nodes.models import Node, NodeState
from apps.runs.models import ASSIGNMENT_HOLDS_DEVICES, Assignment, Attempt, Priority, Run, RunStatus

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


def node_free_devices(*, node: Node) -> list[int]:
    used: set[int] = set()
    for devices in Assignment.objects.filter(node=node, state__in=ASSIGNMENT_HOLDS_DEVICES).values_list("devices", flat=True):
        used.update(int(d) for d in devices)
    return [d for d in node.devices.order_by("index").values_list("index", flat=True) if d not in used]


def _ready_nodes() -> list[Node]:
    fresh = timezone.now() - timedelta(seconds=settings.TRAINYARD_NODE_TIMEOUT_S)
    return list(Node.objects.filter(state=NodeState.READY, last_heartbeat_at__gte=fresh).order_by("pk"))


def master_port_for(*, run_id: int, number: int) -> int:
    return MASTER_PORT_BASE + (run_id * 31 + number * 7) % MASTER_PORT_SPAN


def placement_pass() -> int:
    """Turn queued runs into Attempt + Assignment rows on ready nodes; returns runs placed."""
    with transaction.atomic(), acting_as(label="system"):
        queued = list(Run.objects.select_for_update().filter(status=RunStatus.QUEUED).order_by("pk"))
        if not queued:
            return 0
        queued.sort(key=lambda r: (PRIORITY_ORDER.get(r.priority, 1), r.queued_at or r.created_at, r.pk))
        nodes = _ready_nodes()
        free = [NodeFree(node_id=n.pk, pool_id=n.pool_id, free=tuple(node_free_devices(node=n))) for n in nodes]
        by_id = {n.pk: n for n in nodes}
        runs = {r.pk: r for r in queued}
        needs = [RunNeed(run_id=r.pk, pool_id=r.pool_id, nodes=r.nodes, devices_per_node=r.devices_per_node) for r in queued]
        placements = first_fit(runs=needs, nodes=free)
        for placement in placements:
            _apply(runs[placement.run_id], placement, by_id)
        return len(placements)


def _apply(run: Run, placement: Placement, nodes: dict[int, Node]) -> None:
    number = (Attempt.objects.filter(run=run).aggregate(m=Max("number"))["m"] or 0) + 1
    rank0 = nodes[placement.nodes[0][0]]
    attempt = Attempt.objects.create(run=run, number=number, master_addr=rank0.address or "127.0.0.1",
                                     master_port=master_port_for(run_id=run.pk, number=number))
    for rank, (node_id, devices) in enumerate(placement.nodes):
        Assignment.objects.create(attempt=attempt, node_id=node_id, node_rank=rank, devices=list(devices))
    before = {"status": run.status}
    run.status = RunStatus.SCHEDULED
    run.reason_code = ""
    run.status_reason = ""
    run.save(update_fields=["status", "reason_code", "status_reason", "updated_at"])
    audit_record(action="run.scheduled", target=run, team_id=run.project.team_id if run.project_id else None, before=before,
                 after={"status": run.status, "attempt": number, "nodes": [nodes[n].hostname for n, _ in placement.nodes]})


def request_scheduling_pass() -> None:
    """Ask for a scheduling pass once the current transaction commits (coalesced by the task)."""
    from apps.runs.tasks import scheduling_pass

    transaction.on_commit(lambda: scheduling_pass.delay())
