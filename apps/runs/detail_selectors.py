"""Reads behind the run detail API: attempts, cost, energy and lineage of one run."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.utils import timezone

from apps.runs.models import Attempt, Run

J_PER_KWH = 3_600_000.0


def run_device_seconds(*, run: Run) -> float:
    now = timezone.now()
    total = 0.0
    for attempt in run.attempts.all():
        for assignment in attempt.assignments.all():
            start = assignment.started_at or attempt.started_at
            if start is None:
                continue
            end = assignment.ended_at or attempt.ended_at or (None if run.is_finished else now)
            if end is None or end <= start:
                continue
            total += (end - start).total_seconds() * max(1, len(assignment.devices or []))
    return total


def run_cost(*, run: Run) -> Decimal:
    """Device-seconds used × the pool's price per device-hour. Billing may replace this with
    its ledger; until then it is the list price, rounded to a tenth of a cent."""
    price = Decimal(run.pool.price_per_device_hour)
    return (Decimal(str(run_device_seconds(run=run))) * price / Decimal(3600)).quantize(Decimal("0.0001"))


def run_energy(*, run: Run) -> dict[str, Any]:
    joules = float(run.energy_j or sum(a.energy_j for a in run.attempts.all()))
    return {"joules": joules, "kwh": joules / J_PER_KWH, "estimated": bool(run.energy_estimated)}


def run_attempts(*, run: Run) -> list[dict[str, Any]]:
    rows = []
    for attempt in run.attempts.all():
        rows.append({
            "number": attempt.number,
            "status": attempt.status,
            "nodes": [a.node.hostname for a in attempt.assignments.all()],
            "started_at": attempt.started_at,
            "ended_at": attempt.ended_at,
            "exit_code": attempt.exit_code,
            "reason": attempt.reason,
        })
    return rows


def run_lineage(*, run: Run) -> dict[str, Any]:
    """What the run came from: its job's own lineage report plus what the portal knows."""
    latest: Attempt | None = max(run.attempts.all(), key=lambda a: a.number, default=None)
    lineage: dict[str, Any] = dict(latest.lineage or {}) if latest is not None else {}
    lineage["template"] = {"slug": run.template.slug, "version": run.template.version}
    checkpoint = run.init_checkpoint
    lineage["init_checkpoint"] = (
        {"id": checkpoint.pk, "run": checkpoint.run_id, "step": checkpoint.step, "sha256": checkpoint.sha256}
        if checkpoint is not None else None
    )
    snapshot = run.code_snapshot
    lineage["code_snapshot"] = {"sha256": snapshot.sha256, "git_commit": snapshot.git_commit} if snapshot is not None else None
    lineage["parent"] = run.parent_id
    return lineage
