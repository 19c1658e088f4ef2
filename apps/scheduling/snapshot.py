"""Database rows -> the core's `ClusterState`, plus the maps the pass needs to apply decisions.

Ids in the core are strings: a run's pk for jobs, a node's pk for nodes, a pool's name and a
team's slug. Runtimes come from `predict.RuntimePredictor` fed with recently finished runs; a
running run that reports progress is predicted from its live rate instead.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Max, Q, QuerySet
from django.utils import timezone

from apps.billing.models import Quota
from apps.billing.selectors import budget_name, budgets_for_projects, budgets_spent, period_for
from apps.core.text import hours_minutes
from apps.nodes.models import Device, Node, NodePool
from apps.nodes.models import NodeState as DbNodeState
from apps.runs.models import (
    ASSIGNMENT_HOLDS_DEVICES,
    ATTEMPT_ENDED,
    Assignment,
    Attempt,
    Checkpoint,
    Priority,
    Run,
    RunStatus,
    StopKind,
)
from apps.runs.selectors import run_live_eta_s, run_live_measure
from apps.scheduling import model as core
from apps.scheduling.estimate import QueueLag
from apps.scheduling.models import EstimateKind, QueueEstimate
from apps.scheduling.outcomes import estimate_requeued
from apps.scheduling.policies import decay_usage, line_in_rank_order
from apps.scheduling.pool_policy import policy_from_json
from apps.scheduling.predict import FinishedRun, Progress, RuntimePrediction, RuntimePredictor, RuntimeQuery

CLASS_OF: dict[str, core.PriorityClass] = {
    Priority.URGENT: core.PriorityClass.URGENT,
    Priority.NORMAL: core.PriorityClass.NORMAL,
    Priority.LOW: core.PriorityClass.LOW,
}
HISTORY_DAYS = 30
HISTORY_RUNS = 2000
# Usage older than this many half-lives weighs under 7% and is not worth loading.
USAGE_HALF_LIVES = 4


def ts(value: datetime) -> float:
    return value.timestamp()


def dt(seconds: float | None) -> datetime | None:
    """The inverse of `ts`: epoch seconds (the core's clock) as an aware UTC datetime."""
    return None if seconds is None else datetime.fromtimestamp(seconds, tz=UTC)


def params_key(params: dict[str, Any], steps_param: str) -> str:
    # The total-steps parameter is what moves runtime most; other params are too varied to key on.
    value = params.get(steps_param) if steps_param else None
    return f"{steps_param}={value}" if value is not None else ""


def total_steps(params: dict[str, Any], steps_param: str) -> float | None:
    """The steps a run asked for (its template's steps parameter), or None if not a number."""
    value = params.get(steps_param) if steps_param else None
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        return None
    return float(value)


# The first seconds of a job run slow (imports, data loading, warm-up): a 40,000-step digits run
# went at 300-500 steps/s for its first 3 s and 1,250 after. Measured that early, the live rate
# made it look 2-3x its length, and every estimate behind it with it. Where history predicts the
# run, its rate counts once measured over a tenth of that prediction (at most a minute).
RATE_SPAN_SHARE = 0.1
RATE_SPAN_MAX_S = 60.0


def rate_span_needed(history: RuntimePrediction) -> float:
    """How long a running job's progress must be measured before its rate replaces `history`."""
    if not history.basis.startswith("history"):
        return 0.0  # only a template maximum or nothing to go on: any measured rate is better
    return min(RATE_SPAN_MAX_S, RATE_SPAN_SHARE * history.runtime_s)


def _settled_rate(predictor: RuntimePredictor, run: Run, *, started: datetime, elapsed: float,
                  resumed_from_step: int | None) -> float | None:
    """The run's live rate once measured long enough to trust over its history (`rate_span_needed`)."""
    # An infinite span: counted from the start (no anchor), which meets any requirement.
    rate, span = run_live_measure(run=run, started_at=started, resumed_from_step=resumed_from_step)
    if rate is None or span >= RATE_SPAN_MAX_S:
        return rate  # no rate yet at all, or measured a minute or more (most running jobs)
    # Young: ask the history (one more prediction, only for runs in their first minute of reports).
    return rate if span >= rate_span_needed(predictor.predict(run_query(run, elapsed_s=elapsed))) else None


def run_query(run: Run, *, elapsed_s: float = 0.0, progress: Progress | None = None) -> RuntimeQuery:
    """The predictor's question about one stored run: its team, template, size and steps."""
    params, steps_param = run.params or {}, run.template.total_steps_param or ""
    return RuntimeQuery(
        team=run.project.team.slug, job_type=run.template.slug, devices=int(run.nodes or 0) * int(run.devices_per_node or 0),
        params_key=params_key(params, steps_param), steps=total_steps(params, steps_param),
        template_max_runtime_s=float(run.max_runtime_s), elapsed_s=elapsed_s, progress=progress, pool=run.pool.name)


def predictor_load(*, now: datetime) -> RuntimePredictor:
    """A predictor fed with the runs that succeeded recently (oldest first)."""
    predictor = RuntimePredictor()
    rows = (
        Run.objects.filter(status=RunStatus.SUCCEEDED, finished_at__gte=now - timedelta(days=HISTORY_DAYS),
                           started_at__isnull=False, tracked_only=False)
        .order_by("-finished_at")
        .values_list("project__team__slug", "template__slug", "nodes", "devices_per_node", "started_at", "finished_at",
                     "params", "template__total_steps_param", "pool__name")[:HISTORY_RUNS]
    )
    for team, slug, nodes, dpn, started, finished, params, steps_param, pool in reversed(list(rows)):
        predictor.observe(FinishedRun(team=team, job_type=slug, devices=nodes * dpn,
                                      runtime_s=max(0.0, ts(finished) - ts(started)), finished_at=ts(finished),
                                      params_key=params_key(params or {}, steps_param or ""),
                                      steps=total_steps(params or {}, steps_param or ""), pool=pool or ""))
    return predictor


def predict_queued(predictor: RuntimePredictor, run: Run) -> RuntimePrediction:
    """Predicted runtime still ahead of a queued run: a resumed run only has what is left."""
    pred = predictor.predict(run_query(run))
    if run.total_steps and run.steps_done:
        left = max(0.05, 1.0 - min(1.0, run.steps_done / run.total_steps))
        return dataclasses.replace(pred, runtime_s=pred.runtime_s * left, low_s=pred.low_s * left, high_s=pred.high_s * left,
                                   mean_s=None if pred.mean_s is None else pred.mean_s * left)
    return pred


# Bases that are only guesses: admission then keeps to the run's max runtime.
UNINFORMED_BASES = ("template maximum", "no history")


def runtime_estimator() -> Callable[[Run], float | None]:
    """For apps.runs.services.runtime (billing's admission): the predicted runtime still ahead
    of a run, from the history of finished runs like it; None without such history."""
    predictor = predictor_load(now=timezone.now())

    def estimate(run: Run) -> float | None:
        pred = predict_queued(predictor, run)
        return None if pred.basis in UNINFORMED_BASES else pred.runtime_s

    return estimate


@dataclass
class Snapshot:
    now: datetime
    state: core.ClusterState
    queued: dict[str, Run]
    nodes: dict[str, Node]
    pools: dict[str, NodePool]
    # Free device indexes per node id, lowest first: placements take from the front.
    free_indexes: dict[str, list[int]]
    # Running (or stopping) run id -> the attempt holding devices.
    running: dict[str, Attempt]
    predictions: dict[str, RuntimePrediction] = field(default_factory=dict)
    devices_total: dict[str, int] = field(default_factory=dict)
    # The predictor the snapshot was made with (the start forecast predicts a would-be run with it).
    predictor: RuntimePredictor = field(default_factory=RuntimePredictor)


def _node_state(node: Node, fresh_after: datetime) -> core.NodeState:
    if node.state == DbNodeState.DRAINING:
        return core.NodeState.DRAINING
    if node.state == DbNodeState.READY and node.last_heartbeat_at is not None and node.last_heartbeat_at >= fresh_after:
        return core.NodeState.READY
    # Silent, lost or offline: it holds its runs until the sweep requeues them, and takes nothing.
    return core.NodeState.LOST


def retry_words(run: Run, now: datetime) -> str:
    """Why a requeued run waits out its backoff, in plain words."""
    assert run.retry_at is not None
    wait = max(1, round((run.retry_at - now).total_seconds()))
    avoid = f"; it will avoid the node{'s' if len(run.avoid_nodes) > 1 else ''} it failed on while others can host it" \
        if run.avoid_nodes else ""
    return (f"Requeued after an infrastructure failure (restart {run.restarts} of {run.max_restarts}); it is retried in "
            f"{hours_minutes(wait)}, at {run.retry_at:%H:%M:%S} UTC{avoid}.")


def budget_blocks(projects: Iterable[Any], now: datetime) -> dict[int, str]:
    """Project id -> plain words, for projects whose budget (own or team's) is used up."""
    period = period_for(at=now)
    blocked: dict[int, str] = {}
    budgets = budgets_for_projects(projects=projects)
    spent_of = budgets_spent(budgets={b.pk: b for found in budgets.values() for b in found}.values(), period=period)
    for project_id, found in budgets.items():
        for budget in found:
            spent = spent_of[budget.pk]
            if spent >= budget.amount:
                blocked[project_id] = (
                    f"Budget '{budget_name(budget=budget, period=period)}' is used up (spent ${spent:.2f} of "
                    f"${budget.amount:.2f}); the run waits until the budget is raised or the next period starts."
                )
                break
    return blocked


def _usage(now: datetime, half_lives: dict[str, float]) -> tuple[core.TeamUsage, ...]:
    """Decayed device-seconds per (team, pool) from attempts that ran recently."""
    horizon = max(half_lives.values(), default=core.Policy().fair_share_half_life_s) * USAGE_HALF_LIVES
    cutoff = now - timedelta(seconds=horizon)
    rows = (
        Attempt.objects.filter(started_at__isnull=False)
        .filter(Q(ended_at__isnull=True) | Q(ended_at__gte=cutoff))
        .values_list("run__project__team__slug", "run__pool__name", "run__nodes", "run__devices_per_node", "started_at",
                     "ended_at")
    )
    total: dict[tuple[str, str], float] = defaultdict(float)
    now_s = ts(now)
    default_half_life = core.Policy().fair_share_half_life_s
    for team, pool, nodes, dpn, started, ended in rows:
        if started is None:
            continue
        end = ts(ended) if ended is not None else now_s
        seconds = max(0.0, end - ts(started)) * nodes * dpn
        total[(team, pool)] += decay_usage(seconds, now_s - end, half_lives.get(pool, default_half_life))
    return tuple(core.TeamUsage(team=t, pool=p, device_seconds=s) for (t, p), s in sorted(total.items()) if s > 0)


def queued_runs(*, lock: bool) -> QuerySet[Run]:
    """Queued runs that need devices (sweep parents hold none) in agent pools, row-locked in pk order if asked."""
    qs = (
        Run.objects.filter(status=RunStatus.QUEUED, devices_per_node__gt=0, nodes__gt=0, tracked_only=False)
        .exclude(pool__backend="slurm")  # Slurm places those (apps.slurm)
        .select_related("project__team", "pool", "template")
        .order_by("pk")
    )
    return qs.select_for_update(of=("self",)) if lock else qs


@dataclass(slots=True)
class AttemptHistory:
    """What the ended and earlier attempts of the runs in a snapshot say about them."""

    # Run id -> seconds it ran in its ended attempts (preempted, lost, ...): its attained service,
    # which demotes it past the pool's threshold (`Policy.demote_after_s`). A running run's current
    # attempt is not included; the core adds it from its start. Seconds, not device-seconds: a
    # run's width is fixed across its attempts, so where a pool counts service in device-seconds
    # (`Policy.service_per_device`) the core multiplies by it (`policies.service`).
    attained: dict[int, float] = field(default_factory=dict)
    # Run id, for each run with an ended attempt -> how often it was preempted
    # (`Policy.max_preemptions`), and when its latest attempt ended and how many seconds it ran
    # (the starvation guard's inputs, `Policy.starve_factor`).
    preemptions: dict[int, tuple[int, float, float]] = field(default_factory=dict)
    # The queued runs an attempt of which was placed before the snapshot's moment, whether or not
    # it ran (a start that failed, a node lost before the start): back in line, as
    # `outcomes.estimate_requeued` files the estimate rows a pass at that moment records for them.
    placed_before: set[int] = field(default_factory=set)


def attempt_history(*, running_ids: Iterable[int], queued_ids: Iterable[int], now: datetime) -> AttemptHistory:
    """The attempt history of the running and the queued runs, from one read of their attempts."""
    queued = set(queued_ids)
    ids = list(dict.fromkeys([*running_ids, *queued]))
    history = AttemptHistory()
    if not ids:
        return history
    ended = Q(status__in=ATTEMPT_ENDED, started_at__isnull=False, ended_at__isnull=False)
    rows = (
        # The ended attempts and those placed before `now`: beyond what each needs, only the running
        # runs' current attempts come back, where naming the queued runs apart would send their ids twice.
        Attempt.objects.filter(run_id__in=ids).filter(ended | Q(created_at__lt=now))
        .order_by("run_id", "ended_at", "pk")
        .values_list("run_id", "status", "started_at", "ended_at", "stop_kind", "created_at")
    )
    for run_id, status, started, ended_at, stop_kind, created in rows:
        if run_id in queued and created < now:
            history.placed_before.add(run_id)
        if status not in ATTEMPT_ENDED or started is None or ended_at is None:
            continue
        seconds = max(0.0, (ended_at - started).total_seconds())
        history.attained[run_id] = history.attained.get(run_id, 0.0) + seconds
        count = history.preemptions.get(run_id, (0, 0.0, 0.0))[0] + (stop_kind == StopKind.PREEMPT)
        history.preemptions[run_id] = (count, ts(ended_at), seconds)
    return history


def _with_history(
    running: list[core.RunningJob], queued: list[core.QueuedJob], *, now: datetime,
) -> tuple[list[core.RunningJob], list[core.QueuedJob]]:
    """The jobs with their attained service and preemption counts, and the queued ones with their
    last requeue and whether they were placed before (the learned correction's "back in line")."""
    history = attempt_history(running_ids=[int(j.id) for j in running], queued_ids=[int(j.id) for j in queued], now=now)
    # (A run has attained service exactly where it has a preemption record: both count its ended attempts.)
    running = [
        dataclasses.replace(r, attained_s=history.attained[int(r.id)], preemptions=history.preemptions[int(r.id)][0])
        if int(r.id) in history.preemptions else r
        for r in running
    ]
    out: list[core.QueuedJob] = []
    for job in queued:
        run_id = int(job.id)
        if run_id in history.preemptions:
            count, requeued_at, last_run_s = history.preemptions[run_id]
            job = dataclasses.replace(job, attained_s=history.attained[run_id], preemptions=count,
                                      requeued_at=requeued_at, last_run_s=last_run_s)
        if run_id in history.placed_before:
            job = dataclasses.replace(job, placed_before=True)
        out.append(job)
    return running, out


def snapshot_load(*, now: datetime, lock: bool = True) -> Snapshot:
    pools = {p.name: p for p in NodePool.objects.all()}
    policies = {name: policy_from_json(p.policy) for name, p in pools.items()}
    fleet = _fleet_load(now)
    predictor = predictor_load(now=now)
    running, running_jobs = _running_load(now=now, predictor=predictor, alloc=fleet.alloc)
    queued = {str(r.pk): r for r in queued_runs(lock=lock)}
    predictions, jobs = _queued_jobs(queued, now=now, predictor=predictor)
    running_jobs, jobs = _with_history(running_jobs, jobs, now=now)
    quotas = tuple(
        core.TeamQuota(team=q.team.slug, pool=q.pool.name, guaranteed_devices=q.guaranteed_devices, borrow_limit=q.borrow_limit)
        for q in Quota.objects.select_related("team", "pool").order_by("pk")
    )
    usage = _usage(now, {name: p.fair_share_half_life_s for name, p in policies.items()})
    state = core.ClusterState(now=ts(now), nodes=tuple(fleet.nodes), running=tuple(running_jobs), queued=tuple(jobs),
                              quotas=quotas, usage=usage, policies=policies)
    return Snapshot(now=now, state=state, queued=queued, nodes=fleet.rows, pools=pools, free_indexes=fleet.free_indexes,
                    running=running, predictions=predictions, devices_total=dict(fleet.devices_total), predictor=predictor)


@dataclass(slots=True)
class _Fleet:
    """The nodes as the core sees them, and the devices each attempt holds."""

    rows: dict[str, Node]
    nodes: list[core.Node]
    # Free device indexes per node id, lowest first.
    free_indexes: dict[str, list[int]]
    # Devices per pool on nodes that are not lost.
    devices_total: dict[str, int]
    # Attempt id -> (node rank, node id, devices) of each node it holds devices on.
    alloc: dict[int, list[tuple[int, str, int]]]


def _fleet_load(now: datetime) -> _Fleet:
    fresh_after = now - timedelta(seconds=settings.TRAINYARD_NODE_TIMEOUT_S)
    node_rows = {str(n.pk): n for n in Node.objects.select_related("pool").order_by("pk")}
    indexes: dict[str, list[int]] = defaultdict(list)
    # An unhealthy device (a fatal GPU fault) is no capacity: nothing is placed on it.
    for device_node, index in Device.objects.filter(healthy=True).order_by("node_id", "index").values_list("node_id", "index"):
        indexes[str(device_node)].append(int(index))

    # Devices held now, per node and per attempt (allocation in rank order).
    used: dict[str, set[int]] = defaultdict(set)
    alloc: dict[int, list[tuple[int, str, int]]] = defaultdict(list)
    for attempt_id, held_node, devices, rank in Assignment.objects.filter(state__in=ASSIGNMENT_HOLDS_DEVICES).values_list(
        "attempt_id", "node_id", "devices", "node_rank"
    ):
        held = {int(d) for d in (devices or [])}
        used[str(held_node)].update(held)
        alloc[attempt_id].append((rank, str(held_node), max(1, len(held))))

    nodes: list[core.Node] = []
    free_indexes: dict[str, list[int]] = {}
    devices_total: dict[str, int] = defaultdict(int)
    for node_id, node in node_rows.items():
        node_state = _node_state(node, fresh_after)
        total = len(indexes[node_id])
        free = [i for i in indexes[node_id] if i not in used[node_id]]
        free_indexes[node_id] = free
        if node_state != core.NodeState.LOST:
            devices_total[node.pool.name] += total
        nodes.append(core.Node(id=node_id, pool=node.pool.name, total_devices=total, free_devices=len(free), state=node_state,
                               memory_bytes=int(node.memory_bytes or 0), cpus=float(node.cpus or 0)))
    return _Fleet(rows=node_rows, nodes=nodes, free_indexes=free_indexes, devices_total=devices_total, alloc=alloc)


def _running_load(
    *, now: datetime, predictor: RuntimePredictor, alloc: dict[int, list[tuple[int, str, int]]]
) -> tuple[dict[str, Attempt], list[core.RunningJob]]:
    """The attempts holding devices as the core's running jobs (their history comes with `_with_history`)."""
    now_s = ts(now)
    running: dict[str, Attempt] = {}
    running_jobs: list[core.RunningJob] = []
    attempts = (
        Attempt.objects.filter(pk__in=list(alloc))
        .exclude(status__in=ATTEMPT_ENDED)
        .select_related("run__project__team", "run__pool", "run__template")
        .order_by("pk")
    )
    attempt_list = list(attempts)
    last_ckpt = dict(
        Checkpoint.objects.filter(run_id__in=[a.run_id for a in attempt_list]).values("run_id").annotate(m=Max("created_at"))
        .values_list("run_id", "m")
    )
    for attempt in attempt_list:
        run = attempt.run
        started = attempt.started_at or attempt.created_at
        elapsed = max(0.0, now_s - ts(started))
        progress = None
        rate = _settled_rate(predictor, run, started=started, elapsed=elapsed, resumed_from_step=attempt.resumed_from_step)
        if run.total_steps and rate is not None:
            progress = Progress(steps_done=float(run.steps_done), total_steps=float(run.total_steps), steps_per_s=rate)
        pred = predictor.predict(run_query(run, elapsed_s=elapsed, progress=progress))
        ckpt = last_ckpt.get(run.pk)
        stopping = bool(attempt.stop_kind)
        end = now_s + min(float(run.grace_period_s), 60.0) if stopping else ts(started) + pred.runtime_s
        expected = _live_end(run, attempt, started=started, now_s=now_s)
        running[str(run.pk)] = attempt
        running_jobs.append(core.RunningJob(
            id=str(run.pk), team=run.project.team.slug, pool=run.pool.name,
            priority_class=CLASS_OF.get(run.priority, core.PriorityClass.NORMAL),
            allocation=tuple((node_id, count) for _, node_id, count in sorted(alloc[attempt.pk])),
            started_at=ts(started), predicted_end=max(end, now_s), preemptible=run.preemptible,
            last_checkpoint_at=ts(ckpt) if ckpt is not None else None, progress=run.progress, stopping=stopping,
            stopping_for=str(attempt.stopping_for_id) if stopping and attempt.stopping_for_id is not None else None,
            expected_end=None if stopping else expected,
            memory_per_device=run.memory_bytes_per_device, cpus_per_device=run.cpus_per_device))
    return running, running_jobs


def _live_end(run: Run, attempt: Attempt, *, started: datetime, now_s: float) -> float | None:
    """When the wait estimates behind a running run take it to end, once it reports a rate: at
    its live ETA, the figure its page shows ("about N seconds left"), never past its limit nor
    before now. None without a rate: then its predicted end (the history's median), as
    `RunningJob.expected_end` says."""
    eta = run_live_eta_s(run=run, started_at=started, resumed_from_step=attempt.resumed_from_step)
    if eta is None:
        return None
    return max(min(now_s + eta, ts(started) + float(run.max_runtime_s)), now_s)


def _queued_jobs(
    queued: dict[str, Run], *, now: datetime, predictor: RuntimePredictor
) -> tuple[dict[str, RuntimePrediction], list[core.QueuedJob]]:
    """The queued runs as the core's queued jobs (held for budget or backoff), and their predictions."""
    blocks = budget_blocks({r.project_id: r.project for r in queued.values()}.values(), now)
    predictions: dict[str, RuntimePrediction] = {}
    jobs: list[core.QueuedJob] = []
    for run_id, run in queued.items():
        pred = predictions[run_id] = predict_queued(predictor, run)
        block = blocks.get(run.project_id)
        blocked = "budget" if block else None
        if not block and run.retry_at is not None and run.retry_at > now:
            blocked, block = core.RETRY_BACKOFF, retry_words(run, now)
        jobs.append(core.QueuedJob(
            id=run_id, team=run.project.team.slug, pool=run.pool.name,
            priority_class=CLASS_OF.get(run.priority, core.PriorityClass.NORMAL),
            # The original submission time: a preempted or requeued run keeps its place in line.
            submitted_at=ts(run.created_at), nodes=run.nodes, devices_per_node=run.devices_per_node,
            predicted_runtime=pred.runtime_s, expected_runtime=pred.expected_s, preemptible=run.preemptible,
            blocked_reason=blocked, blocked_message=block or "",
            deadline=ts(run.queue_deadline) if run.queue_deadline is not None else None,
            avoid_nodes=frozenset(str(n) for n in run.avoid_nodes or []),
            memory_per_device=run.memory_bytes_per_device, cpus_per_device=run.cpus_per_device))
    return predictions, jobs


def lags_load(*, now: datetime, policies: dict[str, core.Policy]) -> dict[str, QueueLag]:
    """Per pool, how far behind their rank times the runs that waited have lately started.

    A sample is a run's first wait: placed within the lag's window, after at least one pass
    left it waiting (it has an at-submission estimate), and not a requeue (`outcomes.estimate_requeued`:
    its rank time is its original one, so its lag would say nothing about today's line), as
    the trace replay samples only first starts. The rank time is the run's fixed deadline, or
    its submission time in a FIFO pool, as in the core's order.

    "A pass left it waiting" is the replay's rule too: the replay passes at every submission, so
    its test, a first start later than the submission, means just that. A run placed by its first
    pass is no sample even when that pass came late (busy workers): its wait was the portal's,
    not the line's, and the replay, whose passes take no time, never has one.

    Only pools whose line moves in rank order get one (`policies.line_in_rank_order`): the
    estimator ignores a demoting pool's lag, so its samples are not read at all.
    """
    lags = {pool: QueueLag() for pool, policy in policies.items() if line_in_rank_order(policy)}
    if not lags:
        return lags
    window = timedelta(seconds=max(lag.window_s for lag in lags.values()))
    rows = (
        QueueEstimate.objects.filter(kind=EstimateKind.AT_SUBMISSION, actual_start__gte=now - window,
                                     actual_start__lte=now, run__pool__name__in=sorted(lags))
        .exclude(estimate_requeued())
        .order_by("actual_start", "pk")
        .values_list("run__pool__name", "actual_start", "run__queue_deadline", "run__created_at")
    )
    for pool, started, deadline, created in rows:  # the query names only the pools in `lags`
        rank = created if deadline is None or policies[pool].ordering == core.Ordering.FIFO else deadline
        if started is None or rank is None:
            continue
        lags[pool].observe(ts(started), ts(rank))
    return lags

