"""What agents report about an attempt, written to the run's rows: log chunks, energy samples,
progress and lineage. The agent protocol views (apps.fleet) parse, bound and fence the input
(the attempt is one the reporting node holds) and call these; replays are idempotent through
unique constraints (bulk_create ignore_conflicts = ON CONFLICT DO NOTHING).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, NamedTuple

from django.db import transaction
from django.db.models import Max, Q
from django.utils import timezone

from apps.runs.models import Attempt, EnergySample, LogChunk, Run


class LogLine(NamedTuple):
    """One chunk of a rank's output, already bounded by the caller."""

    rank: int
    seq: int
    stream: str
    text: str


class EnergyReading(NamedTuple):
    """One device's cumulative energy at a moment, already bounded by the caller."""

    device_index: int
    at: datetime
    energy_j: float
    power_w: float | None
    utilization: float | None
    estimated: bool


def attempt_logs_record(*, attempt: Attempt, lines: list[LogLine]) -> int:
    """Store the attempt's log chunks (a replayed chunk is kept once); how many were sent."""
    rows = [LogChunk(run_id=attempt.run_id, attempt=attempt, rank=line.rank, seq=line.seq, stream=line.stream,
                     text=line.text.replace("\x00", "")) for line in lines]
    LogChunk.objects.bulk_create(rows, ignore_conflicts=True)
    return len(rows)


def attempt_energy_record(*, attempt: Attempt, node_id: int, readings: list[EnergyReading]) -> int:
    """Store energy samples from the node and roll the attempt's and run's energy up; how many were sent."""
    rows = [EnergySample(attempt=attempt, node_id=node_id, device_index=r.device_index, at=r.at, energy_j=r.energy_j,
                         power_w=r.power_w, utilization=r.utilization, estimated=r.estimated) for r in readings]
    with transaction.atomic():
        EnergySample.objects.bulk_create(rows, ignore_conflicts=True)
        _energy_rollup(attempt)
    return len(rows)


def _energy_rollup(attempt: Attempt) -> None:
    """Samples carry cumulative energy per device: the attempt's energy is the sum of the maxima."""
    per_device = EnergySample.objects.filter(attempt=attempt).values("node_id", "device_index").annotate(m=Max("energy_j"))
    total = sum(row["m"] or 0.0 for row in per_device)
    others = sum(Attempt.objects.filter(run_id=attempt.run_id).exclude(pk=attempt.pk).values_list("energy_j", flat=True))
    estimated = EnergySample.objects.filter(attempt__run_id=attempt.run_id, estimated=True).exists()
    # The run before the attempt, the order every writer of both takes (runs.services.lifecycle):
    # the other order deadlocked with a user's cancel on PostgreSQL.
    Run.objects.filter(pk=attempt.run_id).update(energy_j=others + total, energy_estimated=estimated)
    Attempt.objects.filter(pk=attempt.pk).update(energy_j=total)


def attempt_progress_record(*, attempt: Attempt, total_steps: int | None = None, steps_done: int | None = None,
                            lineage: dict[str, Any] | None = None) -> None:
    """The run's step progress (and where its rate is measured from) and the attempt's lineage."""
    updates: dict[str, Any] = {}
    if total_steps is not None:
        updates["total_steps"] = total_steps
    if steps_done is not None:
        updates["steps_done"] = steps_done
        updates["progress_at"] = timezone.now()
    with transaction.atomic():
        if updates:
            # .update() skips auto_now: bump updated_at by hand so ?updated_after= polls see progress.
            Run.objects.filter(pk=attempt.run_id).update(**updates, updated_at=timezone.now())
        if "progress_at" in updates:
            # The attempt's first report marks where its rate is measured from (runs.selectors.run_live_rate).
            began = attempt.started_at or attempt.created_at
            Run.objects.filter(Q(progress_from_at__isnull=True) | Q(progress_from_at__lt=began), pk=attempt.run_id).update(
                progress_from_at=updates["progress_at"], progress_from_step=updates["steps_done"])
        if lineage is not None:
            locked = Attempt.objects.select_for_update().get(pk=attempt.pk)
            locked.lineage = {**locked.lineage, **lineage}
            locked.save(update_fields=["lineage"])
