"""Attempt and run state transitions driven by agents, the sweep, users and the scheduler.

Every change is audited. Callers set the actor with apps.audit.context.acting_as (agents as
"agent:<host>", the sweep as "system"). Functions take row-locked objects where a race matters:
two agents (ranks of one gang) may report at the same moment.
"""

from __future__ import annotations

import signal as signals
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from apps.audit.services import audit_record
from apps.core.errors import Conflict
from apps.core.queueing import request_scheduling_pass
from apps.runs.models import (
    ASSIGNMENT_HOLDS_DEVICES,
    ATTEMPT_ENDED,
    Assignment,
    AssignmentState,
    Attempt,
    AttemptStatus,
    Run,
    RunStatus,
    StopKind,
)
from apps.runs.services import failures
from apps.runs.services.transitions import run_transition

LOG_TAIL_CHARS = 2000
# The agent's own stop kind (not stored on the attempt): the job ran past the run's max_runtime_s.
MAX_RUNTIME = "max_runtime"
OOM_EXIT_CODE = failures.OOM_EXIT_CODE


def _set_run(run: Run, *, status: str, action: str, reason: str = "", reason_code: str = "", **extra: Any) -> None:
    run_transition(run, to=status, action=action, reason=reason, reason_code=reason_code, **extra)


def _set_attempt(attempt: Attempt, *, status: str, reason: str = "", **extra: Any) -> None:
    before = {"status": attempt.status}
    attempt.status = status
    attempt.reason = reason
    fields = ["status", "reason"]
    for key, value in extra.items():
        setattr(attempt, key, value)
        fields.append(key)
    if status in ATTEMPT_ENDED and attempt.ended_at is None:
        attempt.ended_at = timezone.now()
        fields.append("ended_at")
    attempt.save(update_fields=fields)
    audit_record(action=f"attempt.{status}", target=attempt, team_id=attempt.run.project.team_id, before=before,
                 after={"status": status, "reason": reason[:500]})


def _lock_run(run_id: int) -> Run:
    # `of=("self",)`: lock the run row only. A join locks every joined row, here the project,
    # which would serialise every run of a project and take locks in no order we chose.
    return Run.objects.select_for_update(of=("self",)).select_related("project").get(pk=run_id)


def _locked(attempt_id: int) -> Attempt:
    """The attempt row-locked, its run locked first: every path that writes both takes the run
    before the attempt (users' cancel and preempt, agents' reports, the energy roll-up), so a
    cancel racing an agent's report waits instead of deadlocking, as it did on PostgreSQL."""
    run_id = Attempt.objects.filter(pk=attempt_id).values_list("run_id", flat=True).get()
    run = _lock_run(run_id)
    attempt = Attempt.objects.select_for_update(of=("self",)).get(pk=attempt_id)
    attempt.run = run
    return attempt


def _release_assignments(attempt: Attempt, *, state: str = AssignmentState.ABORTED) -> None:
    attempt.assignments.filter(state__in=ASSIGNMENT_HOLDS_DEVICES).update(state=state, ended_at=timezone.now())


def _request_stop(attempt: Attempt, kind: str) -> None:
    """Agents see stop_kind on their next heartbeat and SIGTERM the job (SIGKILL after grace)."""
    if attempt.stop_kind and attempt.stop_kind != StopKind.PREEMPT:
        return  # cancel / drain / abort already requested; they are at least as strong
    attempt.stop_kind = kind
    attempt.stop_requested_at = timezone.now()
    attempt.save(update_fields=["stop_kind", "stop_requested_at"])
    audit_record(action="attempt.stop_requested", target=attempt, team_id=attempt.run.project.team_id,
                 after={"kind": kind})


def _requeue(run: Run, *, reason: str, reason_code: str, count_restart: bool, suspect_nodes: list[int] | None = None) -> None:
    """Back to the queue (resumes from its latest checkpoint), or failed past max_restarts.

    A counted restart (an infrastructure failure) waits out a backoff and keeps off the nodes
    suspected of the failure while others can host it."""
    if run.cancel_requested_at is not None:
        _set_run(run, status=RunStatus.CANCELLED, action="run.cancelled", reason=f"cancelled ({reason})")
        return
    restarts = run.restarts + (1 if count_restart else 0)
    if count_restart and restarts > run.max_restarts:
        _set_run(run, status=RunStatus.FAILED, action="run.failed", reason=f"{reason}; gave up after {run.max_restarts} restarts",
                 reason_code=reason_code, restarts=restarts)
        return
    retry: dict[str, Any] = {}
    if count_restart:
        wait = failures.retry_backoff_s(restarts=restarts, base_s=settings.TRAINYARD_RETRY_BACKOFF_S,
                                        max_s=settings.TRAINYARD_RETRY_BACKOFF_MAX_S)
        retry = {"retry_at": timezone.now() + timedelta(seconds=wait),
                 "avoid_nodes": sorted({*(run.avoid_nodes or []), *(suspect_nodes or [])})}
    _set_run(run, status=RunStatus.QUEUED, action="run.requeued", reason=reason, reason_code=reason_code, restarts=restarts,
             queued_at=timezone.now(), **retry)
    request_scheduling_pass()


@transaction.atomic
def attempt_request_stop(*, attempt_id: int, kind: str) -> Attempt:
    """Ask the agents holding the attempt to SIGTERM it (drain deadline, scheduler preemption)."""
    attempt = _locked(attempt_id)
    if attempt.status not in ATTEMPT_ENDED:
        _request_stop(attempt, kind)
    return attempt


def current_attempt(*, run: Run) -> Attempt | None:
    return Attempt.objects.filter(run=run).order_by("-number").first()


# --- agent reports --------------------------------------------------------------------------

@transaction.atomic
def assignment_started(*, attempt_id: int, node_id: int, node_rank: int, resumed_from_step: int | None = None) -> Attempt:
    """One rank's process is up. resumed_from_step: rank 0's newest usable checkpoint (attempt N>1)."""
    attempt = _locked(attempt_id)
    now = timezone.now()
    Assignment.objects.filter(attempt=attempt, node_id=node_id, node_rank=node_rank,
                              state__in=[AssignmentState.PENDING, AssignmentState.CLAIMED]).update(
        state=AssignmentState.STARTED, started_at=now)
    if node_rank == 0 and attempt.number > 1 and resumed_from_step is not None and attempt.resumed_from_step is None:
        attempt.resumed_from_step = resumed_from_step
        attempt.save(update_fields=["resumed_from_step"])
    if attempt.status != AttemptStatus.STARTING:
        return attempt
    if attempt.assignments.exclude(state=AssignmentState.STARTED).exists():
        return attempt  # gang: running only once every rank has started
    _set_attempt(attempt, status=AttemptStatus.RUNNING, started_at=now)
    run = attempt.run
    if run.status == RunStatus.SCHEDULED:
        _set_run(run, status=RunStatus.RUNNING, action="run.running", started_at=run.started_at or now)
    return attempt


@transaction.atomic
def assignment_exited(*, attempt_id: int, node_id: int, node_rank: int, exit_code: int | None, signal: int | None,
                      stop_kind: str | None, log_tail: str = "", ranks: list[dict[str, Any]] | None = None,
                      failed_rank: int | None = None, reason: str = "") -> Attempt:
    """One node's processes ended. The gang has one outcome: the first failure stops every other
    rank, and the attempt ends once (on a communication error, once every node has reported,
    since a peer's crash may be the cause)."""
    attempt = _locked(attempt_id)
    Assignment.objects.filter(attempt=attempt, node_id=node_id, node_rank=node_rank).exclude(
        state=AssignmentState.EXITED).update(state=AssignmentState.EXITED, exit_code=exit_code, signal=signal,
                                             ranks=ranks or [], ended_at=timezone.now())
    if attempt.status in ATTEMPT_ENDED:
        return attempt
    run = attempt.run
    kind = attempt.stop_kind or stop_kind or ""
    clean = exit_code == 0 and not signal
    if kind == StopKind.CANCEL:
        _finish_attempt(attempt, AttemptStatus.CANCELLED, "cancelled by user", exit_code, signal)
        if not run.is_finished:
            _set_run(run, status=RunStatus.CANCELLED, action="run.cancelled", reason="cancelled by user")
        return attempt
    if kind in (StopKind.PREEMPT, StopKind.DRAIN):
        # Never succeeded/failed by the job's own exit: it was told to checkpoint and stop.
        if kind == StopKind.PREEMPT:
            why = f"preempted by the scheduler ({attempt.reason})" if attempt.reason else "preempted by the scheduler"
        elif attempt.stop_kind == StopKind.DRAIN:
            why = "node drained by an administrator; its drain deadline passed"
        else:
            why = "the node's agent shut down (drain timeout passed)"
        _finish_attempt(attempt, AttemptStatus.PREEMPTED, why, exit_code, signal)
        if not run.is_finished:
            _requeue(run, reason=why, reason_code="preempted", count_restart=False)
        return attempt
    if kind == MAX_RUNTIME:
        # `reason`: the words of whoever enforced the limit (Slurm's time limit), else the agent's.
        reason = reason or f"exceeded max runtime of {run.max_runtime_s} s"
        _finish_attempt(attempt, AttemptStatus.FAILED, reason, exit_code, signal)
        _request_stop(attempt, StopKind.ABORT)
        _set_run(run, status=RunStatus.FAILED, action="run.failed", reason=reason, reason_code="max_runtime")
        return attempt
    if kind == StopKind.ABORT:
        # The gang is stopping after a rank's failure: the signals we sent are not failures of their own.
        if not clean and signal not in (signals.SIGTERM, signals.SIGKILL):
            _record_failure(attempt, node_id, node_rank, failed_rank, exit_code, signal, log_tail)
        if not attempt.assignments.filter(state__in=ASSIGNMENT_HOLDS_DEVICES).exists():
            _gang_failed(attempt)
        return attempt
    if not clean:
        failure = _record_failure(attempt, node_id, node_rank, failed_rank, exit_code, signal, log_tail)
        _request_stop(attempt, StopKind.ABORT)  # the other ranks have nothing left to do
        if failure.symptom and attempt.assignments.filter(state__in=ASSIGNMENT_HOLDS_DEVICES).exists():
            return attempt  # a communication error: a peer's own failure may be the cause
        _gang_failed(attempt)
        return attempt
    if attempt.assignments.exclude(state=AssignmentState.EXITED).exists():
        return attempt
    _finish_attempt(attempt, AttemptStatus.SUCCEEDED, "", exit_code, signal)
    _set_run(run, status=RunStatus.SUCCEEDED, action="run.succeeded")
    request_scheduling_pass()
    return attempt


def _record_failure(attempt: Attempt, node_id: int, node_rank: int, failed_rank: int | None, exit_code: int | None,
                    signal: int | None, log_tail: str) -> failures.Failure:
    failure = failures.classify_exit(rank=failed_rank if failed_rank is not None else node_rank, exit_code=exit_code,
                                     signal=signal, log_tail=log_tail)
    text = failure.words + (":\n" + log_tail[-LOG_TAIL_CHARS:] if log_tail else "")
    Assignment.objects.filter(attempt=attempt, node_id=node_id, node_rank=node_rank).update(
        failure_code=failure.code, failure=text)
    return failure


def _gang_failed(attempt: Attempt) -> None:
    """End the attempt on its most telling failure: the user's fails the run; the infrastructure's
    requeues it (it resumes from its checkpoint, up to max_restarts)."""
    rows = list(attempt.assignments.exclude(failure_code="").values_list("failure_code", "failure", "exit_code", "signal",
                                                                         "node_id"))
    found = [(failures.failure_of(code, text), text, code_, sig, node) for code, text, code_, sig, node in rows]
    cause = failures.gang_cause([f for f, *_ in found])
    run = attempt.run
    suspect: list[int] = []
    if cause is None:
        reason, exit_code, sig = "the gang stopped after a failure it did not report", None, None
        cause = failures.Failure(failures.INFRA, "comm_error", reason)
    else:
        _, reason, exit_code, sig, node = next(item for item in found if item[0] == cause)
        # A communication error cannot tell which side failed: no node is blamed for it.
        suspect = [node] if cause.requeue and not cause.symptom else []
    _finish_attempt(attempt, AttemptStatus.FAILED, reason, exit_code, sig)
    if run.is_finished:
        return
    if cause.requeue:
        _requeue(run, reason=reason, reason_code=cause.code, count_restart=True, suspect_nodes=suspect)
    else:
        _set_run(run, status=RunStatus.FAILED, action="run.failed", reason=reason, reason_code=cause.code)


def _finish_attempt(attempt: Attempt, status: str, reason: str, exit_code: int | None, signal: int | None) -> None:
    _set_attempt(attempt, status=status, reason=reason, exit_code=exit_code, signal=signal)
    _release_assignments(attempt)


@transaction.atomic
def attempt_rendezvous(*, attempt_id: int, node_rank: int, master_port: int | None) -> tuple[str, int | None]:
    """Rank 0's agent reports the port it bound; the other nodes' agents ask for it until it is known.
    Returns (master_addr, master_port or None while rank 0 has not reported)."""
    attempt = _locked(attempt_id)
    if node_rank == 0 and master_port is not None and attempt.status not in ATTEMPT_ENDED:
        if attempt.rendezvous_at is None or attempt.master_port != master_port:
            attempt.master_port = master_port
            attempt.rendezvous_at = timezone.now()
            attempt.save(update_fields=["master_port", "rendezvous_at"])
    return attempt.master_addr, attempt.master_port if attempt.rendezvous_at is not None else None


@transaction.atomic
def assignment_failed_to_start(*, attempt_id: int, node_id: int, node_rank: int, message: str) -> Attempt:
    attempt = _locked(attempt_id)
    Assignment.objects.filter(attempt=attempt, node_id=node_id, node_rank=node_rank).update(
        state=AssignmentState.FAILED_TO_START, ended_at=timezone.now())
    if attempt.status in ATTEMPT_ENDED:
        return attempt
    reason = f"rank {node_rank} failed to start: {message}"[:LOG_TAIL_CHARS]
    _finish_attempt(attempt, AttemptStatus.FAILED, reason, None, None)
    _request_stop(attempt, StopKind.ABORT)
    if not attempt.run.is_finished:
        _set_run(attempt.run, status=RunStatus.FAILED, action="run.failed", reason=reason, reason_code="failed_to_start")
    return attempt


@transaction.atomic
def attempt_lost(*, attempt_id: int, reason: str, reason_code: str = "node_lost", suspect_node: int | None = None) -> Attempt:
    """The node running (part of) the attempt went silent or restarted, or a device of it failed:
    requeue the run (keeping off `suspect_node` while other nodes can host it)."""
    attempt = _locked(attempt_id)
    if attempt.status in ATTEMPT_ENDED:
        return attempt
    _finish_attempt(attempt, AttemptStatus.LOST, reason, None, None)
    _request_stop(attempt, StopKind.ABORT)  # surviving ranks elsewhere must stop too
    run = attempt.run
    if not run.is_finished:
        _set_run(run, status=RunStatus.LOST, action="run.lost", reason=reason, reason_code=reason_code)
        _requeue(run, reason=reason, reason_code=reason_code, count_restart=True,
                 suspect_nodes=[suspect_node] if suspect_node is not None else None)
    return attempt


@transaction.atomic
def attempt_abort(*, attempt_id: int, reason: str) -> Attempt:
    """Gang start failed: stop every rank that did start and requeue, holding no device."""
    attempt = _locked(attempt_id)
    if attempt.status in ATTEMPT_ENDED:
        return attempt
    _request_stop(attempt, StopKind.ABORT)
    _finish_attempt(attempt, AttemptStatus.ABORTED, reason, None, None)
    if not attempt.run.is_finished:
        _requeue(attempt.run, reason=reason, reason_code="gang_start", count_restart=True)
    return attempt


# --- users and the scheduler ----------------------------------------------------------------

@transaction.atomic
def run_cancel(*, run: Run, user: Any) -> Run:
    """Cancel a run: at once if nothing runs it, else via SIGTERM on the agents (409 if finished)."""
    run = _lock_run(run.pk)
    if run.is_finished:
        raise Conflict(f"run {run.pk} is already {run.status}", code="run_finished")
    audit_record(action="run.cancel_requested", target=run, team_id=run.project.team_id, actor=user)
    run.cancel_requested_at = run.cancel_requested_at or timezone.now()
    run.save(update_fields=["cancel_requested_at", "updated_at"])
    attempt = current_attempt(run=run)
    live = attempt is not None and attempt.status not in ATTEMPT_ENDED
    if live and attempt is not None and attempt.assignments.filter(state__in=[AssignmentState.CLAIMED, AssignmentState.STARTED]).exists():
        _request_stop(attempt, StopKind.CANCEL)
        return run
    if live and attempt is not None:
        _finish_attempt(attempt, AttemptStatus.CANCELLED, "cancelled before it started", None, None)
    _set_run(run, status=RunStatus.CANCELLED, action="run.cancelled", reason="cancelled by user")
    return run


@transaction.atomic
def run_preempt(*, run: Run, reason: str, for_run_id: int | None = None) -> Run:
    """Ask the agents to checkpoint and stop the run; it is requeued when they report the exit.
    `for_run_id`: the waiting run it makes room for (`Attempt.stopping_for`)."""
    run = _lock_run(run.pk)
    attempt = current_attempt(run=run)
    if run.is_finished or attempt is None or attempt.status in ATTEMPT_ENDED:
        raise Conflict(f"run {run.pk} is not running", code="not_running")
    attempt = _locked(attempt.pk)
    if not attempt.stop_kind:
        attempt.reason = reason[:500]  # becomes part of the run's status reason when the exit is reported
        attempt.stopping_for_id = for_run_id
        attempt.save(update_fields=["reason", "stopping_for"])
    _request_stop(attempt, StopKind.PREEMPT)
    return run
