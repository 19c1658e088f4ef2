"""Reads for the Nodes page and GET /api/v1/nodes/: pools, nodes, devices and what runs where.

Nodes are shared hardware (no tenant owns them); the runs on them are tenant data, so a run's
details appear only to members of its team (others see "another team's run").

A run's `name` in the API stays what older clients read ("run 41" for an unnamed run); the page
names runs as every other page does, "#41" or "#41 digits-a" (its `label`).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from django.utils import timezone

from apps.core.text import run_label
from apps.nodes.closed import open_pools
from apps.nodes.models import Device, Node, NodePool
from apps.runs.models import ASSIGNMENT_HOLDS_DEVICES, Assignment
from apps.tenants.selectors import AnyUser, team_ids_for_user


def node_display_state(*, node: Node, used: int, total: int) -> str:
    if node.state == "ready" and total and used >= total:
        return "busy"
    return str(node.state)


def node_rows(*, user: AnyUser, nodes: Iterable[Node], now: datetime | None = None, labels: bool = False) -> list[dict[str, Any]]:
    """One row per node (pool, devices with pool and devices prefetched): state, devices and the
    runs on it, another team's run shown without its details. `labels` adds each run's label as
    the pages write it (the Nodes page; the API's run objects keep their fields)."""
    nodes = list(nodes)
    teams = set(team_ids_for_user(user=user))
    now = now or timezone.now()
    held = Assignment.objects.filter(state__in=ASSIGNMENT_HOLDS_DEVICES, node_id__in=[n.pk for n in nodes]).select_related(
        "attempt__run__project__team")
    by_node: dict[int, list[Assignment]] = {}
    for a in held:
        by_node.setdefault(a.node_id, []).append(a)
    rows: list[dict[str, Any]] = []
    for node in nodes:
        assignments = by_node.get(node.pk, [])
        device_runs: dict[int, dict[str, Any]] = {}
        runs = []
        for a in assignments:
            run = a.attempt.run
            mine = run.project.team_id in teams
            info = ({"id": run.pk, "name": run.name or f"run {run.pk}", "project": f"{run.project.team.slug}/{run.project.slug}",
                     "status": run.status, "attempt": a.attempt.number, "rank": a.node_rank}
                    if mine else {"id": None, "name": "another team's run", "project": None, "status": None,
                                  "attempt": None, "rank": None})
            if labels:
                info["label"] = run_label(pk=run.pk, name=run.name) if mine else "another team's run"
            runs.append(info)
            for d in a.devices:
                device_runs[int(d)] = info
        devices = [{"index": d.index, "kind": d.kind, "model": d.model, "uuid": d.uuid, "memory_bytes": d.memory_bytes,
                    "utilization": d.utilization, "power_w": d.power_w, "memory_used_bytes": d.memory_used_bytes,
                    "used": d.index in device_runs, "run": device_runs.get(d.index), "healthy": d.healthy,
                    "health_reason": d.health_reason,
                    "health_changed_at": d.health_changed_at.isoformat() if d.health_changed_at else None}
                   for d in node.devices.all()]
        used = len(device_runs)
        # An unhealthy device takes no new work: it is not free, whether or not a run still holds it.
        unhealthy = sum(1 for d in devices if not d["healthy"])
        free = sum(1 for d in devices if d["healthy"] and not d["used"])
        age = (now - node.last_heartbeat_at).total_seconds() if node.last_heartbeat_at else None
        rows.append({"id": node.pk, "hostname": node.hostname, "address": node.address, "pool": node.pool.name,
                     "state": node_display_state(node=node, used=used, total=len(devices)), "cpus": node.cpus,
                     "memory_bytes": node.memory_bytes, "agent_version": node.agent_version,
                     "heartbeat_age_s": round(age, 1) if age is not None else None,
                     "last_heartbeat_at": node.last_heartbeat_at.isoformat() if node.last_heartbeat_at else None,
                     "drain_deadline": node.drain_deadline.isoformat() if node.drain_deadline else None,
                     "drained_by_admin": node.drained_by_admin,
                     "devices_total": len(devices), "devices_used": used, "devices_free": free,
                     "devices_unhealthy": unhealthy, "devices": devices, "runs": runs})
    return rows


def _pool_row(pool: NodePool, nodes: list[dict[str, Any]], total: int, free: int) -> dict[str, Any]:
    return {"name": pool.name, "kind": pool.kind, "description": pool.description,
            "price_per_device_hour": str(pool.price_per_device_hour), "nodes": nodes, "devices_total": total,
            "devices_free": free}


def node_overview(*, user: AnyUser) -> list[dict[str, Any]]:
    """Every pool with all its nodes (the Nodes page)."""
    # A pool that runs nothing (apps.nodes.closed: MLflow's tracked) would read as an empty pool to wait for.
    found = list(open_pools().prefetch_related("nodes__devices"))
    # One node_rows for the whole fleet: its reads (the runs held, the user's teams) per pool
    # made the page's queries grow with the pools.
    nodes = [node for pool in found for node in pool.nodes.all()]
    rows = iter(node_rows(user=user, nodes=nodes, labels=True))
    pools = []
    for pool in found:
        mine = [next(rows) for _ in pool.nodes.all()]
        pools.append(_pool_row(pool, mine, sum(n["devices_total"] for n in mine), sum(n["devices_free"] for n in mine)))
    return pools


def pool_summaries() -> list[dict[str, Any]]:
    """Every pool's devices, total and free, without the per-node rows (the API pages nodes)."""
    held: dict[int, set[int]] = {}
    for node_id, devices in Assignment.objects.filter(state__in=ASSIGNMENT_HOLDS_DEVICES).values_list("node_id", "devices"):
        held.setdefault(node_id, set()).update(int(d) for d in devices or [])
    total: dict[int, int] = {}
    used: dict[int, int] = {}
    for pool_id, node_id, index, healthy in Device.objects.values_list("node__pool_id", "node_id", "index", "healthy"):
        total[pool_id] = total.get(pool_id, 0) + 1
        # Not free: held by a run, or unhealthy.
        used[pool_id] = used.get(pool_id, 0) + (index in held.get(node_id, ()) or not healthy)
    out = []
    for pool in open_pools():
        row = _pool_row(pool, [], total.get(pool.pk, 0), total.get(pool.pk, 0) - used.get(pool.pk, 0))
        del row["nodes"]
        out.append(row)
    return out
