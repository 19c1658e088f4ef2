"""The scheduling pass: load the cluster from the database, ask the core, apply its decisions.

One pass is one transaction. It first updates the single SchedulerState row, which takes that
row's lock on PostgreSQL (and the write lock on SQLite, whose transactions start IMMEDIATE), so
passes on any number of workers run one at a time; the queued runs are then row-locked in pk
order and each placement is a conditional update (queued -> scheduled), so a run is never placed
twice and a device never handed out twice. A request for a pass carries the time it was made; a
pass that started after that time has already seen the request's data, so the request is
dropped (a burst of submits costs one or two passes, not one each).
"""

from __future__ import annotations

import logging
import re
import time
from collections import defaultdict
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from django.db import IntegrityError, transaction
from django.db.models import F, Max
from django.utils import timezone

from apps.audit.context import acting_as
from apps.audit.services import audit_record
from apps.core.errors import Conflict
from apps.core.text import hours_minutes
from apps.nodes.wakeups import claims_wake_on_commit
from apps.runs.models import Assignment, Attempt, Run, RunStatus
from apps.runs.services.lifecycle import run_preempt
from apps.runs.services.placement import master_port_for
from apps.runs.services.transitions import runs_transition_many
from apps.scheduling import core
from apps.scheduling.estimate import MAX_AHEAD, Estimate, queue_estimates
from apps.scheduling.model import UNESTIMATED, Decision, QueueEntry, WaitCode
from apps.scheduling.models import EstimateKind, QueueEstimate, SchedulerState, UtilizationSample
from apps.scheduling.outcomes import calibrations_cached
from apps.scheduling.pool_choice import pools_choose_apply
from apps.scheduling.snapshot import Snapshot, dt, lags_load, snapshot_load

log = logging.getLogger(__name__)

ACTOR = "scheduler"
# History rows: keep a pass's estimate only when it moved this much, or this long after the last.
ESTIMATE_MOVED_S = 60.0
ESTIMATE_EVERY_S = 600.0
UTILIZATION_EVERY_S = 60.0
# The forward replay covers the first `estimate.MAX_AHEAD` runs of each pool and is bounded so a
# huge queue cannot stall a pass; runs further back, or beyond the bound, are placed by the
# measured lag of recent starts (or, without enough of them or in a pool that demotes, by the
# work queued ahead).
ESTIMATE_MAX_PASSES = 400
# A stored estimate is rewritten only when it moved by more than this (saves a write per run).
ESTIMATE_WRITE_SLACK_S = 20.0
BATCH = 500
_JOB_REF = re.compile(r"\b(job|run) (\d+)\b")


@dataclass
class PassResult:
    skipped: bool = False
    placed: list[int] = field(default_factory=list)
    preempted: list[int] = field(default_factory=list)
    waiting: int = 0
    timings_ms: dict[str, float] = field(default_factory=dict)


def _ensure_state_row() -> None:
    if SchedulerState.objects.filter(pk=SchedulerState.SINGLETON).exists():
        return
    try:
        with transaction.atomic():
            SchedulerState.objects.create(pk=SchedulerState.SINGLETON)
    except IntegrityError:
        pass  # another worker created it first


def placement_pass(*, requested_at: float | None = None) -> int:
    """One scheduling pass (the Celery task "scheduling.pass"); returns how many runs it placed."""
    return len(scheduling_pass(requested_at=requested_at).placed)


def scheduling_pass(*, requested_at: float | None = None, estimates: bool = True) -> PassResult:
    """One pass over every pool. `requested_at` (epoch seconds) lets a stale request skip itself."""
    _ensure_state_row()
    timings: dict[str, float] = {}
    with transaction.atomic(), acting_as(label=ACTOR):
        SchedulerState.objects.filter(pk=SchedulerState.SINGLETON).update(lock_taken_at=timezone.now())
        row = SchedulerState.objects.get(pk=SchedulerState.SINGLETON)
        if requested_at is not None and row.pass_started_at is not None and row.pass_started_at.timestamp() > requested_at:
            return PassResult(skipped=True)
        started = time.perf_counter()
        now = timezone.now()
        snap = snapshot_load(now=now)
        timings["load"] = (time.perf_counter() - started) * 1000
        mark = time.perf_counter()
        deadlines_fix(snap=snap)
        timings["deadlines"] = (time.perf_counter() - mark) * 1000
        mark = time.perf_counter()
        pools_choose_apply(snap=snap)
        timings["pools"] = (time.perf_counter() - mark) * 1000
        mark = time.perf_counter()
        decision = core.schedule(snap.state, explain=True)
        timings["schedule"] = (time.perf_counter() - mark) * 1000
        mark = time.perf_counter()
        placed = apply_placements(snap=snap, decision=decision)
        preempted = apply_preemptions(snap=snap, decision=decision)
        timings["apply"] = (time.perf_counter() - mark) * 1000
        mark = time.perf_counter()
        waiting = queue_write(snap=snap, decision=decision, placed=set(placed), estimates=estimates, timings=timings)
        timings["queue"] = (time.perf_counter() - mark) * 1000
        utilization_record(snap=snap, decision=decision)
        timings["total"] = (time.perf_counter() - started) * 1000
        SchedulerState.objects.filter(pk=SchedulerState.SINGLETON).update(
            pass_started_at=now, pass_finished_at=timezone.now(), passes=F("passes") + 1, last_placed=len(placed),
            last_preempted=len(preempted), last_duration_ms=timings["total"], last_apply_ms=timings["apply"])
    if placed or preempted:
        log.info("scheduling pass: placed %d, preempting %d, %d waiting (%.0f ms)", len(placed), len(preempted), waiting,
                 timings["total"])
    return PassResult(placed=placed, preempted=preempted, waiting=waiting, timings_ms=timings)


# --- deadlines -----------------------------------------------------------------------------------

def deadlines_fix(*, snap: Snapshot) -> int:
    """Fix the virtual deadline of queued runs that have none yet (their first pass).

    From then on a run's place in line depends only on what arrives ahead of it, never on later
    predictions or fair share; a requeued run keeps its deadline, as it keeps its submission time.
    """
    due = core.deadlines_due(snap.state)
    if not due:
        return 0
    rows: list[Run] = []
    for job_id, deadline in due.items():
        run = snap.queued[job_id]
        run.queue_deadline = dt(deadline)
        rows.append(run)
    # The queued rows are locked by this pass (snapshot_load), so a plain bulk update is safe.
    Run.objects.bulk_update(rows, ["queue_deadline"], batch_size=BATCH)
    snap.state = replace(snap.state, queued=tuple(
        replace(job, deadline=due[job.id]) if job.id in due else job for job in snap.state.queued))
    return len(due)


# --- placements ----------------------------------------------------------------------------------

def apply_placements(*, snap: Snapshot, decision: Decision) -> list[int]:
    """Attempt + Assignment rows for each placement; returns the placed run ids.

    Devices are taken from `snap.free_indexes` (lowest index first), which this mutates.
    """
    if not decision.placements:
        return []
    now = snap.now
    ids = [int(p.job_id) for p in decision.placements]
    numbers = dict(
        Attempt.objects.filter(run_id__in=ids).values("run_id").annotate(m=Max("number")).values_list("run_id", "m")
    )
    # The queued rows are locked by this transaction (snapshot_load), so the set still queued
    # cannot change under us; the update below is conditional on it all the same.
    still_queued = set(Run.objects.filter(pk__in=ids, status=RunStatus.QUEUED).values_list("pk", flat=True))
    plans: list[tuple[Run, Attempt, list[tuple[str, list[int]]]]] = []
    for placement in decision.placements:
        run = snap.queued[placement.job_id]
        if run.pk not in still_queued:
            continue
        taken: list[tuple[str, list[int]]] = []
        for node_id, count in placement.allocation:
            free = snap.free_indexes[node_id]
            if len(free) < count:
                # The core and the rows disagree: refuse the whole pass rather than over-commit.
                raise RuntimeError(f"node {node_id} has {len(free)} free devices, placement wants {count}")
            taken.append((node_id, free[:count]))
            snap.free_indexes[node_id] = free[count:]
        number = int(numbers.get(run.pk) or 0) + 1
        rank0 = snap.nodes[taken[0][0]]
        attempt = Attempt(run=run, number=number, master_addr=rank0.address or "127.0.0.1",
                          master_port=master_port_for(run_id=run.pk, number=number))
        plans.append((run, attempt, taken))
    # One conditional UPDATE (queued -> scheduled) and one audit INSERT for the whole pass. It
    # raises if a run was no longer queued: only possible if the row locks did not hold (a bug),
    # and the pass is undone rather than double-place.
    runs_transition_many(
        runs=[run for run, _, _ in plans], from_=RunStatus.QUEUED, to=RunStatus.SCHEDULED, action="run.scheduled", now=now,
        fields={"queue_position": None},
        after={run.pk: {"attempt": attempt.number, "pool": run.pool.name, "nodes": [snap.nodes[n].hostname for n, _ in taken]}
               for run, attempt, taken in plans})
    # Attempt (run, number) is unique: a second placement of the same run fails here, too.
    Attempt.objects.bulk_create([attempt for _, attempt, _ in plans], batch_size=BATCH)
    Assignment.objects.bulk_create(
        [Assignment(attempt=attempt, node_id=int(node_id), node_rank=rank, devices=devices)
         for _, attempt, taken in plans for rank, (node_id, devices) in enumerate(taken)],
        batch_size=BATCH,
    )
    claims_wake_on_commit(node_ids=[int(node_id) for _, _, taken in plans for node_id, _ in taken])  # the agents' waiting claims
    placed = [run.pk for run, _, _ in plans]
    estimate_errors_record(run_ids=placed, started_at=now)
    return placed


def estimate_errors_record(*, run_ids: list[int], started_at: datetime) -> int:
    """On start: each open estimate of these runs learns the actual start and its error."""
    rows = list(QueueEstimate.objects.filter(run_id__in=run_ids, actual_start__isnull=True))
    for row in rows:
        row.actual_start = started_at
        row.error_s = None if row.estimated_start is None else (started_at - row.estimated_start).total_seconds()
    QueueEstimate.objects.bulk_update(rows, ["actual_start", "error_s"], batch_size=BATCH)
    return len(rows)


# --- preemptions ---------------------------------------------------------------------------------

def _victim_reason(victim: Run, for_run: Run | None, kind: core.PreemptionKind, *, ran_s: float,
                   demote_after_s: float) -> str:
    """Why a run is being preempted, in words for its owner (the other team's run is named by team only)."""
    whom = f"a {for_run.priority}-priority job of team {for_run.project.team.slug}" if for_run else "a higher-priority job"
    if kind == core.PreemptionKind.LOWER_CLASS:
        why = "it is lower priority and"
    elif kind == core.PreemptionKind.DEMOTED:
        why = (f"it has run for {hours_minutes(ran_s)} in all, more than the pool's {hours_minutes(demote_after_s)} after which "
               "runs that have run less go first, and it")
    else:
        why = "its team borrowed these devices and"
    return (f"preempted to make room for {whom}: {why} runs beyond team {victim.project.team.slug}'s guaranteed devices; "
            "it checkpoints, goes back in the queue and resumes from its latest checkpoint")


def apply_preemptions(*, snap: Snapshot, decision: Decision) -> list[int]:
    done: list[int] = []
    running = {run.id: run for run in snap.state.running}
    for pre in decision.preemptions:
        attempt = snap.running.get(pre.victim_id)
        if attempt is None:
            continue
        victim = attempt.run
        for_run = snap.queued.get(pre.for_job_id)
        core_run = running.get(pre.victim_id)
        policy = snap.state.policies.get(victim.pool.name, snap.state.default_policy)
        reason = _victim_reason(victim, for_run, pre.kind, ran_s=core_run.service(snap.state.now) if core_run else 0.0,
                                demote_after_s=policy.demote_after_s)
        try:
            run_preempt(run=victim, reason=reason, for_run_id=for_run.pk if for_run is not None else None)
        except Conflict:
            continue  # it ended meanwhile: its devices come back anyway
        Run.objects.filter(pk=victim.pk, status__in=[RunStatus.SCHEDULED, RunStatus.RUNNING]).update(
            reason_code=WaitCode.PREEMPTING.value, status_reason=f"Being {reason}.", updated_at=snap.now)
        audit_record(action="run.preempt", target=victim, team_id=victim.project.team_id,
                     after={"for_run": int(pre.for_job_id), "reason": reason,
                            "work_lost_device_s": round(pre.work_lost_device_s, 1)})
        done.append(victim.pk)
    return done


# --- queue standing and estimates ----------------------------------------------------------------

def _teams(snap: Snapshot) -> dict[str, str]:
    teams = {run_id: run.project.team.slug for run_id, run in snap.queued.items()}
    teams.update({run_id: attempt.run.project.team.slug for run_id, attempt in snap.running.items()})
    return teams


def message_for(*, message: str, team: str, teams: dict[str, str]) -> str:
    """The core's message for a run of `team`: other teams' run ids become their team's name."""
    def swap(match: re.Match[str]) -> str:
        other = teams.get(match.group(2))
        if other is None or other == team:
            return f"{match.group(1)} #{match.group(2)}"
        return f"{match.group(1)} (team {other})"

    return _JOB_REF.sub(swap, message)


def _moved(old: datetime | None, new: datetime | None, slack: float) -> bool:
    if old is None or new is None:
        return old is not new
    return abs((old - new).total_seconds()) > slack


def queue_write(*, snap: Snapshot, decision: Decision, placed: set[int], estimates: bool = True,
                timings: dict[str, float] | None = None) -> int:
    """Position, reason and estimated start on every waiting run; estimate history rows."""
    waiting: list[QueueEntry] = [e for e in decision.queue if int(e.job_id) not in placed and e.job_id in snap.queued]
    if not waiting:
        return 0
    # Runs held for money or hardware the pool lacks get no estimated start: their reason says what is missing.
    est = _queue_estimates(snap, [e for e in waiting if e.code not in UNESTIMATED], timings) if estimates else {}
    teams = _teams(snap)
    now = snap.now
    last_rows = dict(
        QueueEstimate.objects.filter(run_id__in=[int(e.job_id) for e in waiting]).values("run_id")
        .annotate(m=Max("recorded_at")).values_list("run_id", "m")
    )
    position: dict[str, int] = defaultdict(int)
    changed: list[Run] = []
    history: list[QueueEstimate] = []
    promised: list[Run] = []
    jobs = {job.id: job for job in snap.state.queued}
    for entry in waiting:
        run = snap.queued[entry.job_id]
        position[entry.pool] += 1
        e = est.get(entry.job_id)
        start, low, high = (dt(e.start), dt(e.low), dt(e.high)) if e is not None else (None, None, None)
        message = message_for(message=entry.message, team=teams.get(entry.job_id, ""), teams=teams)
        first = run.queue_position is None
        moved = _queue_fields(run, position[entry.pool], entry.code.value, message, (start, low, high), now)
        if moved is not None:
            changed.append(run)
        # A run the pass is making room for starts as its victims leave: no promise, as in the replay.
        if first and e is not None and entry.code != WaitCode.PREEMPTING and _promise(
                run, jobs.get(entry.job_id), snap.state.policies.get(entry.pool), e.raw_start):
            promised.append(run)
        kind = _estimate_kind(run, first=first, last=last_rows.get(run.pk), moved=bool(moved), now=now)
        if kind is not None and estimates:
            history.append(QueueEstimate(run=run, recorded_at=now, kind=kind, position=position[entry.pool],
                                         reason_code=entry.code.value, estimated_start=start, estimated_start_low=low,
                                         estimated_start_high=high,
                                         raw_estimated_start=dt(e.raw_start) if e is not None else None))
    for run in changed:
        # One small UPDATE per changed run: faster than bulk_update's CASE expressions at this size,
        # and conditional, so a run that left the queue meanwhile is not touched.
        Run.objects.filter(pk=run.pk, status=RunStatus.QUEUED).update(
            queue_position=run.queue_position, reason_code=run.reason_code, status_reason=run.status_reason,
            estimated_start=run.estimated_start, estimated_start_low=run.estimated_start_low,
            estimated_start_high=run.estimated_start_high, updated_at=now)
    QueueEstimate.objects.bulk_create(history, batch_size=BATCH)
    for run in promised:
        Run.objects.filter(pk=run.pk, status=RunStatus.QUEUED).update(queue_deadline=run.queue_deadline)
    return len(waiting)


def _promise(run: Run, job: core.QueuedJob | None, policy: core.Policy | None, raw_start: float | None) -> bool:
    """`Policy.promise_estimates`, as the replay keeps it: a new run's first estimated start (the
    replay's raw figure) becomes its deadline where earlier. Whether the run's deadline moved."""
    if policy is None or not policy.promise_estimates or job is None or job.placed_before or raw_start is None:
        return False
    if job.deadline is None or raw_start >= job.deadline:
        return False
    run.queue_deadline = dt(raw_start)
    return True


def _queue_estimates(snap: Snapshot, waiting: list[QueueEntry], timings: dict[str, float] | None) -> dict[str, Estimate]:
    """Estimated starts of the waiting runs; none when the estimator fails (the rest is still written)."""
    est: dict[str, Estimate] = {}
    if not waiting:
        return est
    mark = time.perf_counter()
    try:
        lags = lags_load(now=snap.now, policies=dict(snap.state.policies))
        # Read once a pass at most: the forecasts of the submit form reuse it (`outcomes.calibrations_cached`).
        calibration = calibrations_cached(now=snap.now, pools=snap.state.policies)
        est = queue_estimates(snap.state, jobs=[e.job_id for e in waiting], lags=lags, max_passes=ESTIMATE_MAX_PASSES,
                              max_ahead=MAX_AHEAD, calibration=calibration)
    except (ValueError, KeyError, ZeroDivisionError):
        log.exception("queue estimates failed; positions and reasons are still written")
    if timings is not None:
        timings["estimates"] = (time.perf_counter() - mark) * 1000
    return est


def _queue_fields(run: Run, position: int, code: str, message: str,
                  starts: tuple[datetime | None, datetime | None, datetime | None], now: datetime) -> bool | None:
    """Set the run's place in line, reason and estimates when they changed enough to write.

    None: unchanged, nothing to write. Otherwise whether the estimated start moved enough to
    be worth a history row."""
    start, low, high = starts
    if not (run.queue_position != position or run.reason_code != code or run.status_reason != message
            or _moved(run.estimated_start, start, ESTIMATE_WRITE_SLACK_S)
            or _moved(run.estimated_start_low, low, ESTIMATE_WRITE_SLACK_S)
            or _moved(run.estimated_start_high, high, ESTIMATE_WRITE_SLACK_S)):
        return None
    moved = _moved(run.estimated_start, start, ESTIMATE_MOVED_S)
    run.queue_position, run.reason_code, run.status_reason = position, code, message
    run.estimated_start, run.estimated_start_low, run.estimated_start_high = start, low, high
    run.updated_at = now
    return moved


def _estimate_kind(run: Run, *, first: bool, last: datetime | None, moved: bool, now: datetime) -> EstimateKind | None:
    """Which estimate history row the run gets in this pass, if any."""
    if first or last is None or (run.queued_at is not None and last < run.queued_at):
        return EstimateKind.AT_SUBMISSION
    if moved or (now - last).total_seconds() >= ESTIMATE_EVERY_S:
        return EstimateKind.PASS
    return None


# --- utilization ---------------------------------------------------------------------------------

def utilization_record(*, snap: Snapshot, decision: Decision, force: bool = False) -> list[UtilizationSample]:
    """One sample per pool, at most once a minute (after this pass's placements)."""
    now = snap.now
    last = dict(UtilizationSample.objects.values("pool_id").annotate(m=Max("at")).values_list("pool_id", "m"))
    frag = {f.pool: f for f in decision.fragmentation}
    used: dict[str, int] = defaultdict(int)
    free: dict[str, int] = defaultdict(int)
    for node in snap.state.nodes:
        if node.state == core.NodeState.LOST:
            continue
        left = len(snap.free_indexes.get(node.id, []))
        used[node.pool] += node.total_devices - left
        if node.state == core.NodeState.READY:
            free[node.pool] += left
    waiting: dict[str, list[Run]] = defaultdict(list)
    placed = {p.job_id for p in decision.placements}
    for run_id, run in snap.queued.items():
        if run_id not in placed:
            waiting[run.pool.name].append(run)
    samples: list[UtilizationSample] = []
    for name, pool in snap.pools.items():
        seen = last.get(pool.pk)
        if not force and seen is not None and (now - seen) < timedelta(seconds=UTILIZATION_EVERY_S):
            continue
        total = snap.devices_total.get(name, 0)
        if total == 0 and not waiting.get(name):
            continue
        f = frag.get(name)
        samples.append(UtilizationSample(
            pool=pool, at=now, total_devices=total, used_devices=used[name], free_devices=free[name],
            stranded_devices=f.stranded_devices if f else 0, largest_free_block=f.largest_free_block if f else 0,
            queued_runs=len(waiting.get(name, [])), queued_devices=sum(r.nodes * r.devices_per_node for r in waiting.get(name, []))))
    UtilizationSample.objects.bulk_create(samples)
    return samples
