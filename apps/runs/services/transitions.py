"""The run state machine: the only writer of `Run.status`.

Every move is checked against RUN_TRANSITIONS and audited; the audit event is what emits the
webhook (apps.webhooks.signals), so a status change cannot skip either. Callers hold the run's
row lock where a race matters (apps.runs.services.lifecycle, the scheduling pass).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from django.db.models.functions import Coalesce
from django.utils import timezone

from apps.audit.services import audit_record, audit_record_many
from apps.core.errors import Conflict
from apps.runs.models import FINISHED_STATUSES, Run, RunStatus

# from -> the states it may move to. DESIGN.md's machine, plus the paths the services take:
# a requeue (preemption, OOM kill, gang start aborted) goes straight back to queued, from
# scheduled as well as running; a rank can fail (or, its start report late, exit cleanly) before
# the whole gang is up, so scheduled may end; any unfinished run may be cancelled; a lost run is
# requeued or, past its max restarts, failed. Finished is final.
RUN_TRANSITIONS: dict[str, frozenset[str]] = {
    RunStatus.QUEUED: frozenset({RunStatus.SCHEDULED, RunStatus.CANCELLED}),
    RunStatus.SCHEDULED: frozenset({RunStatus.RUNNING, RunStatus.QUEUED, RunStatus.LOST, RunStatus.SUCCEEDED,
                                    RunStatus.FAILED, RunStatus.CANCELLED}),
    RunStatus.RUNNING: frozenset({RunStatus.PREEMPTED, RunStatus.LOST, RunStatus.QUEUED, RunStatus.SUCCEEDED,
                                  RunStatus.FAILED, RunStatus.CANCELLED}),
    RunStatus.PREEMPTED: frozenset({RunStatus.QUEUED, RunStatus.FAILED, RunStatus.CANCELLED}),
    RunStatus.LOST: frozenset({RunStatus.QUEUED, RunStatus.FAILED, RunStatus.CANCELLED}),
    RunStatus.SUCCEEDED: frozenset(),
    RunStatus.FAILED: frozenset(),
    RunStatus.CANCELLED: frozenset(),
}

# The states a run is born in: queued (a submit), running (a sweep's controller, which holds no
# devices and is never placed), or finished (demo history written straight to the database).
INITIAL_STATUSES = frozenset({RunStatus.QUEUED, RunStatus.RUNNING, *FINISHED_STATUSES})


class IllegalTransition(Conflict):
    """A status change the table does not allow (409)."""

    code = "illegal_transition"

    def __init__(self, run_id: int | None, from_: str, to: str) -> None:
        super().__init__(f"run {run_id} cannot go from {from_} to {to}")
        self.run_id, self.from_, self.to = run_id, from_, to


def transition_allowed(*, from_: str, to: str) -> bool:
    return to in RUN_TRANSITIONS.get(from_, frozenset())


def _check(run_id: int | None, from_: str, to: str) -> None:
    if not transition_allowed(from_=from_, to=to):
        raise IllegalTransition(run_id, from_, to)


def run_new(*, status: str = RunStatus.QUEUED, **fields: Any) -> Run:
    """An unsaved run born in `status` (one of INITIAL_STATUSES); the caller saves and audits it."""
    if status not in INITIAL_STATUSES:
        raise IllegalTransition(None, "(new)", status)
    return Run(status=status, **fields)


def run_transition(run: Run, *, to: str, action: str, reason: str = "", reason_code: str = "", actor: Any = None,
                   **extra: Any) -> None:
    """Move `run` to `to` (IllegalTransition if the table forbids it), save the changed fields and
    audit the move as `action`. `extra` names other fields to set with it (restarts, started_at...)."""
    before = {"status": run.status}
    _check(run.pk, run.status, to)
    run.status = to
    run.status_reason = reason
    run.reason_code = reason_code
    fields = ["status", "status_reason", "reason_code", "updated_at"]
    for key, value in extra.items():
        setattr(run, key, value)
        fields.append(key)
    if to in FINISHED_STATUSES and run.finished_at is None:
        run.finished_at = timezone.now()
        fields.append("finished_at")
    run.save(update_fields=fields)
    audit_record(action=action, target=run, team_id=run.project.team_id, before=before,
                 after={"status": to, "reason": reason[:500]}, actor=actor)


def runs_transition_many(*, runs: Sequence[Run], from_: str, to: str, action: str, now: datetime,
                         fields: Mapping[str, Any] | None = None, after: Mapping[int, Mapping[str, Any]] | None = None) -> None:
    """Move every run from `from_` to `to` in one conditional UPDATE and audit each (one INSERT).

    Clears the status reason and code, and sets `fields` beside them. The caller holds the rows'
    locks, so a run no longer in `from_` means another writer changed it: that raises, and the
    caller's transaction rolls back rather than act on a stale row. `after`: more to record, by run id.
    """
    _check(None, from_, to)
    if not runs:
        return
    values: dict[str, Any] = {"status_reason": "", "reason_code": "", **(fields or {})}
    finished: dict[str, Any] = {"finished_at": Coalesce("finished_at", now)} if to in FINISHED_STATUSES else {}
    updated = Run.objects.filter(pk__in=[run.pk for run in runs], status=from_).update(
        status=to, updated_at=now, **values, **finished)
    if updated != len(runs):
        raise RuntimeError(f"moved {updated} of {len(runs)} runs from {from_} to {to}: another writer changed them")
    for run in runs:
        run.status = to
        for key, value in values.items():
            setattr(run, key, value)
        if finished and run.finished_at is None:
            run.finished_at = now
    extra = after or {}
    audit_record_many(records=[
        {"action": action, "target": run, "team_id": run.project.team_id, "before": {"status": from_},
         "after": {"status": to, **extra.get(run.pk, {})}}
        for run in runs
    ])
