"""Demo runs written straight to the database (`seed_demo`) still leave a trace in the audit log.

They never ran here, so no service recorded their changes; one event each says what they are,
so a demo run's History card explains itself instead of reading "Nothing recorded".
"""

from __future__ import annotations

from collections.abc import Iterable

from apps.audit.services import audit_record_many
from apps.runs.models import Run

SEEDED_REASON = "demo data: seed_demo wrote it, attempts and all, straight to the database; no job ran on this machine"


def runs_seeded_record(*, runs: Iterable[Run]) -> int:
    """One `run.seeded` event per run (actor from the audit context, e.g. seed_demo); how many."""
    events = audit_record_many(records=[
        {"action": "run.seeded", "target": run, "team_id": run.project.team_id,
         "after": {"status": run.status, "reason": SEEDED_REASON}}
        for run in runs
    ])
    return len(events)
