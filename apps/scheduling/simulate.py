"""Replay a job trace through the scheduler core and report what users would have felt.

    python -m apps.scheduling.simulate TRACE.csv --nodes 40 --gpus-per-node 8 --policy trainyard

The trace has columns job_id, team, submit_s, gpus, duration_s, job_type. Every team becomes
a tenant with an equal guaranteed share of the cluster (shares sum to its size) and may borrow
the rest when idle; a job with more GPUs than a node spans ceil(gpus / per-node) whole nodes.

The replay is event-driven: at every submission or completion time (events at the same second
are handled together) it runs the same `schedule()` the portal runs. Runtime predictions see
only jobs that had finished by then, and a job's virtual deadline is fixed at its submission
from the prediction and fair share of that moment (`core.deadlines_due`), as in the portal.
At each submission the portal's own estimator (`estimate.queue_estimates`) records when the new
job is expected to start: a replay of the front of the line with median runtimes, or, for a
job with `estimate_max_ahead` others ahead of it, the work ahead of it (the trainyard policy
demotes, so the recent lag of starts behind rank times, `QueueLag`, serves FIFO only). Only
the replay's pass budget is smaller than the portal's, so that 13,000 estimates fit in the
replay's time. The report compares each estimate
with when the job did start.

Policies: `fifo` (strict submission order, no backfill, first-fit), `backfill` (FIFO plus EASY
backfill with predicted runtimes), `trainyard` (the full policy: guarantees and borrowing, fair
share, wait-ratio ordering with predictions, EASY backfill, best-fit packing, and least attained
service: a job that has run an hour is demoted, and new jobs may preempt demoted ones beyond
their team's guarantee). Jobs are checkpointed training, as in the Tiresias and Gavel
simulations this trace comes from: under a policy that preempts, a stopped job loses its work
since its last periodic checkpoint and pays a restart when it resumes (`Preemptible`, set with
`--checkpoint-every`, `--grace` and `--restart`); the report counts the preemptions and the
device-hours lost. The baselines never preempt. A job's wait, and its estimate's error, are
measured to its first start. `--report PAGE.html` draws the replay (`replay_report`).
"""

from __future__ import annotations

import argparse
import bisect
import csv
import heapq
import json
import math
import random
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from apps.scheduling.breakdown import format_breakdown, slowdown, slowdown_breakdown
from apps.scheduling.core import UNLIMITED, deadlines_due, schedule
from apps.scheduling.estimate import CLOSE_S, MAX_AHEAD, CalibrationKey, QueueLag, WaitCalibration, close_margin, queue_estimates
from apps.scheduling.model import (
    ClusterState,
    Node,
    Ordering,
    Packing,
    Policy,
    PriorityClass,
    QueuedJob,
    RunningJob,
    TeamQuota,
    TeamUsage,
)
from apps.scheduling.policies import accrue_usage, demotion_threshold, limits_by_team, min_attempt, seconds_to_demotion, service
from apps.scheduling.predict import FinishedRun, RuntimePredictor, RuntimeQuery

POOL = "trace"

POLICIES: dict[str, Policy] = {
    "fifo": Policy(
        ordering=Ordering.FIFO,
        backfill=False,
        preemption=False,
        packing=Packing.FIRST_FIT,
        guarantee_first=False,
        fair_share_weight=0.0,
    ),
    "backfill": Policy(
        ordering=Ordering.FIFO,
        backfill=True,
        preemption=False,
        packing=Packing.FIRST_FIT,
        guarantee_first=False,
        fair_share_weight=0.0,
    ),
    "trainyard": Policy(),
}


@dataclass(frozen=True, slots=True)
class TraceJob:
    id: str
    team: str
    submit_s: float
    gpus: int
    duration_s: float
    job_type: str


@dataclass(frozen=True, slots=True)
class JobOutcome:
    """A finished job: `start` is its first start (what the at-submission estimate is judged
    against), `end` its last end, and `attempts` every (start, end) it held devices: more than
    one where it was preempted and resumed."""

    job: TraceJob
    start: float
    end: float
    estimated_start: float | None
    attempts: tuple[tuple[float, float], ...] = ()
    # The "pool's median wait" baseline: the median of the waits observed before the
    # submission (starts known by then, no peeking), for judging the estimate against.
    median_wait: float = 0.0

    @property
    def preempted(self) -> int:
        return max(0, len(self.attempts) - 1)

    @property
    def wait(self) -> float:
        return self.start - self.job.submit_s

    @property
    def jct(self) -> float:
        return self.end - self.job.submit_s


@dataclass(frozen=True, slots=True)
class Summary:
    policy: str
    jobs: int
    nodes: int
    gpus_per_node: int
    avg_jct_s: float
    p95_jct_s: float
    avg_wait_s: float
    p95_wait_s: float
    utilization: float
    jain_slowdown: float
    mean_slowdown: float
    estimate_within: float
    estimate_median_abs_error_s: float
    estimate_median_abs_error_waited_s: float
    started_immediately: float
    # Preemptions of the replay (stops of running jobs), the share of jobs stopped at least
    # once, and the device-hours they lost: work since their last checkpoint, and restarts.
    preemptions: int
    preempted_jobs: float
    lost_device_h: float
    scheduling_passes: int
    wall_s: float
    # CPU seconds of this process: the same figure on a busy and on an idle machine.
    cpu_s: float
    # Each team's mean slowdown (JCT / runtime), what Jain's index is taken over: comparing two
    # policies team by team says who gained and who lost, which the one index hides.
    team_slowdown: dict[str, float]
    # The tail (issue 28): p99 JCT, the most times one job was preempted, how many 5+ times.
    p99_jct_s: float = 0.0
    max_preemptions_per_job: int = 0
    jobs_preempted_5_plus: int = 0
    # Estimates of the runs that really waited (`waited_estimates`): keys "10m" and "1h" (waits
    # over 10 minutes, over an hour); values: jobs, and the share within max(10 min, 25% of the
    # wait) of the estimate and of two baselines, "starts now" and the pool's median wait.
    waited: dict[str, dict[str, float]] = field(default_factory=dict)
    # The same for the new estimate each preempted run gets when it goes back in line, judged
    # against its restart (wait = restart - requeue).
    requeued: dict[str, dict[str, float]] = field(default_factory=dict)
    # Busy devices over capacity, integrated over the time some run was waiting.
    busy_while_waiting: float = 0.0


@dataclass(slots=True)
class Requeue:
    """A preempted run's return to the line: when, the estimate made then, the pool's median
    wait then (the baseline), and when it started again (None while it waits)."""

    job_id: str
    at: float
    median_wait: float
    estimate: float | None = None
    start: float | None = None


def load_trace(path: str | Path, limit: int | None = None) -> list[TraceJob]:
    jobs: list[TraceJob] = []
    with open(path, newline="") as handle:
        for row in csv.DictReader(handle):
            jobs.append(
                TraceJob(
                    id=row["job_id"],
                    team=row["team"],
                    submit_s=float(row["submit_s"]),
                    gpus=int(row["gpus"]),
                    duration_s=float(row["duration_s"]),
                    job_type=row["job_type"],
                )
            )
            if limit is not None and len(jobs) >= limit:
                break
    return jobs


def perturb(jobs: Sequence[TraceJob], *, seed: int, shift_days: float = 2.0, jitter_s: float = 3600.0) -> list[TraceJob]:
    """Another sample of the same kind of workload, for checking that a policy is not tuned to
    one file: every team's submissions move together by up to `shift_days` either way (each by
    up to `jitter_s` more), and durations are dealt out again among a team's jobs of the same
    type and width. The job mix, each team's load and the burstiness stay; which team's burst
    meets which, and which of a team's jobs is the long one, change. Ids follow the new order.
    """
    rng = random.Random(seed)
    teams = sorted({j.team for j in jobs})
    shift = {team: rng.uniform(-shift_days, shift_days) * 86400.0 for team in teams}
    durations: dict[tuple[str, str, int], list[float]] = defaultdict(list)
    for job in jobs:
        durations[(job.team, job.job_type, job.gpus)].append(job.duration_s)
    for key in sorted(durations):
        rng.shuffle(durations[key])
    moved = []
    for job in sorted(jobs, key=lambda j: (j.submit_s, j.id)):
        submit = max(0.0, round(job.submit_s + shift[job.team] + rng.uniform(-jitter_s, jitter_s)))
        moved.append(replace(job, submit_s=submit, duration_s=durations[(job.team, job.job_type, job.gpus)].pop()))
    moved.sort(key=lambda j: (j.submit_s, j.team, j.gpus, j.duration_s))
    return [replace(job, id=str(i)) for i, job in enumerate(moved, start=1)]


def scale_load(jobs: Sequence[TraceJob], factor: float) -> list[TraceJob]:
    """The same jobs arriving `factor` times as fast (0.7: spread over 1/0.7 as long), so the
    cluster sees `factor` times the load."""
    if not factor > 0:
        raise ValueError(f"load factor must be more than 0 (got {factor:g})")
    return [replace(j, submit_s=round(j.submit_s / factor)) for j in jobs]


@dataclass(frozen=True, slots=True)
class Variant:
    """One replay of `--variants`: the trace perturbed with `seed` (None: as it is), its load
    scaled by `load`, on `nodes` nodes (None: `--nodes`)."""

    name: str
    seed: int | None = None
    load: float = 1.0
    nodes: int | None = None

    def jobs(self, jobs: Sequence[TraceJob]) -> list[TraceJob]:
        out = list(jobs) if self.seed is None else perturb(jobs, seed=self.seed)
        return out if self.load == 1.0 else scale_load(out, self.load)


# The development trace and samples of the same kind (issue 28: other seeds, 0.7x-1.3x load,
# 30-60 nodes): a goal met on one of them only is not met.
VARIANTS = (
    Variant("trace"),
    Variant("seed 1", seed=1),
    Variant("seed 2", seed=2),
    Variant("load 0.7x", load=0.7),
    Variant("load 1.3x", load=1.3),
    Variant("30 nodes", nodes=30),
    Variant("60 nodes", nodes=60),
)


def equal_quotas(teams: Sequence[str], capacity: int, share: float = 1.0) -> tuple[TeamQuota, ...]:
    """Equal guarantees summing to `share` of the cluster (all of it by default); anyone may
    borrow the rest while it is idle."""
    names = sorted(set(teams))
    if not names:
        return ()
    base, extra = divmod(int(capacity * share), len(names))
    return tuple(
        TeamQuota(team=t, pool=POOL, guaranteed_devices=base + (1 if i < extra else 0), borrow_limit=None)
        for i, t in enumerate(names)
    )


def gang_shape(gpus: int, gpus_per_node: int) -> tuple[int, int]:
    """(nodes, devices per node): more GPUs than a node holds means ceil(gpus / per node) whole nodes."""
    if gpus > gpus_per_node:
        return math.ceil(gpus / gpus_per_node), gpus_per_node
    return 1, max(1, gpus)


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def jain(values: Sequence[float]) -> float:
    """Jain's fairness index: 1 when all equal, 1/n when one value holds everything."""
    if not values:
        return 1.0
    square_sum = sum(v * v for v in values)
    return (sum(values) ** 2) / (len(values) * square_sum) if square_sum > 0 else 1.0


@dataclass(frozen=True, slots=True)
class Preemptible:
    """How trace jobs behave when the policy preempts them (checkpointed training, as in the
    Tiresias and Gavel simulations the trace comes from): each saves a checkpoint every
    `checkpoint_every_s` of its attempt, a stopped one has `grace_s` to exit and loses its work
    since its last periodic checkpoint (none is assumed to be written at the signal), and every
    resume spends `restart_s` loading before it makes progress again. Policies that never
    preempt never touch it."""

    checkpoint_every_s: float = 1800.0
    grace_s: float = 30.0
    restart_s: float = 120.0

    def __post_init__(self) -> None:
        if not self.checkpoint_every_s > 0:
            raise ValueError(f"checkpoint interval must be more than 0 seconds (got {self.checkpoint_every_s:g})")
        if not (self.grace_s >= 0 and self.restart_s >= 0):
            raise ValueError(f"grace and restart must be 0 seconds or more (got {self.grace_s:g} and {self.restart_s:g})")


class Replay:
    """The simulated cluster: the trace's clock, nodes, queue and running jobs."""

    def __init__(
        self,
        jobs: Sequence[TraceJob],
        *,
        nodes: int,
        gpus_per_node: int,
        policy: Policy,
        estimates: bool,
        preemptible: Preemptible = Preemptible(),
        guarantee_share: float = 1.0,
    ) -> None:
        self.jobs = sorted(jobs, key=lambda j: (j.submit_s, int(j.id) if j.id.isdigit() else 0, j.id))
        self.by_id = {j.id: j for j in self.jobs}
        self.gpn = gpus_per_node
        self.node_ids = [f"node-{i:04d}" for i in range(nodes)]
        self.free = {n: gpus_per_node for n in self.node_ids}
        self.nodes_seen: dict[tuple[str, int], Node] = {}
        self.policy = policy
        self.estimates = estimates
        self.resume = preemptible
        self.quotas = equal_quotas([j.team for j in self.jobs], nodes * gpus_per_node, guarantee_share)
        self.limits = limits_by_team(self.quotas, POOL, nodes * gpus_per_node)
        self._init_jobs()
        self._init_estimator()
        self._init_preemption()
        self._init_wait_figures()

    def _init_jobs(self) -> None:
        """Runtime predictions, the queue, running jobs and their ends, and team usage."""
        self.predictor = RuntimePredictor()
        self.queued: dict[str, QueuedJob] = {}
        # Queued ids per job type (insertion-ordered dicts used as sets), to refresh predictions.
        self.queued_by_type: dict[str, dict[str, None]] = defaultdict(dict)
        self.running: dict[str, RunningJob] = {}
        self.started: dict[str, float] = {}
        self.estimated: dict[str, float | None] = {}
        self.outcomes: list[JobOutcome] = []
        self.usage: dict[str, float] = defaultdict(float)
        self.held: dict[str, int] = defaultdict(int)
        # (time, job id) of every attempt's end, natural or stopped; `ends` says which is current.
        self.completions: list[tuple[float, str]] = []
        self.ends: dict[str, float] = {}
        # Running jobs by predicted end, to re-predict only those that outlive their prediction.
        self.overdue: list[tuple[float, str]] = []
        # (team, job type, GPUs) -> (point runtime, expected runtime).
        self.prediction_cache: dict[tuple[str, str, int], tuple[float, float]] = {}
        self.passes = 0

    def _init_estimator(self) -> None:
        """The at-submission estimates: their bounds, the lag of the line, the learned correction."""
        # The at-submission replay: bounded work per submission, coarser steps far ahead, and
        # steps of at least 10 minutes, the margin an estimate is judged by (issue 28: 24 passes
        # of 10 minutes or more reach 93% of the trace's long waits, 12 passes by end 19%).
        self.estimate_passes = 24
        self.estimate_step_ratio = 0.05
        self.estimate_min_step_s = CLOSE_S
        # A job with this many others ahead of it is placed without a replay (`simulate_starts`).
        self.estimate_max_ahead = MAX_AHEAD
        # Starts of jobs that waited, behind their rank times (deadline, or submission under FIFO).
        self.lag = QueueLag()
        # The estimator's learned correction, fed each estimated run's wait when it starts:
        # job id -> (its estimate's class, the estimated wait, when it joined the line).
        self.calibration = WaitCalibration()
        self.calibrating: dict[str, tuple[CalibrationKey, float, float]] = {}

    def _init_preemption(self) -> None:
        """Preempted jobs' progress, service, requeues and deadlines, and the victims ready."""
        # Preemption: progress saved (seconds of the job's own duration), seconds run over ended
        # attempts, each job's fixed deadline, and the figures.
        self.saved: dict[str, float] = defaultdict(float)
        self.attained: dict[str, float] = defaultdict(float)
        # When each stopped job went back in line, after an attempt of how long (the guard's inputs).
        self.requeued: dict[str, tuple[float, float]] = {}
        self.deadlines: dict[str, float] = {}
        self.preemptions = 0
        self.lost_device_s = 0.0
        # (time, job id, attempt start) when a running job becomes one a waiting normal job may
        # preempt (demoted, past its minimum attempt).
        self.victim_ready: list[tuple[float, str, float]] = []
        # Waiting jobs that have not been demoted: only they can preempt a demoted run.
        self.fresh_waiting: set[str] = set()
        # Jobs the last pass stopped runs for, and when those runs will have stopped.
        self.making_room: dict[str, float] = {}
        self.attempts: dict[str, list[tuple[float, float]]] = defaultdict(list)

    def _init_wait_figures(self) -> None:
        """The figures of waits: seen so far, at submission and requeue, and busy while waiting."""
        # Every wait seen so far (first starts and restarts), sorted: the "pool's median wait"
        # baseline reads it at a submission or requeue. The pool's median wait at each
        # submission, each return to the line (`Requeue`), and the returns of the current event.
        self.waits_seen: list[float] = []
        self.median_at_submit: dict[str, float] = {}
        self.requeues: list[Requeue] = []
        self.open_requeues: dict[str, Requeue] = {}
        self.requeued_now: list[Requeue] = []
        # Device-seconds busy, and of capacity, over the time some job was waiting.
        self.busy_waiting_s = 0.0
        self.capacity_waiting_s = 0.0

    def shape(self, job: TraceJob) -> tuple[int, int]:
        return gang_shape(job.gpus, self.gpn)

    def prediction(self, job: TraceJob) -> tuple[float, float]:
        """(point runtime the scheduler orders and backfills by, expected runtime for estimates)."""
        key = (job.team, job.job_type, job.gpus)
        value = self.prediction_cache.get(key)
        if value is None:
            pred = self.predictor.predict(RuntimeQuery(team=job.team, job_type=job.job_type, devices=job.gpus))
            value = self.prediction_cache[key] = (pred.runtime_s, pred.expected_s)
        return value

    def remaining(self, job: TraceJob) -> tuple[float, float]:
        """`prediction` of what is left of a job that has made `saved` progress: its history
        conditioned on having run that long (heavy tails: a job that ran long will run long)."""
        done = self.saved.get(job.id, 0.0)
        if done <= 0:
            return self.prediction(job)
        pred = self.predictor.predict(RuntimeQuery(team=job.team, job_type=job.job_type, devices=job.gpus, elapsed_s=done))
        return max(60.0, pred.runtime_s - done), max(60.0, pred.expected_s - done)

    def state(self, now: float) -> ClusterState:
        return ClusterState(
            now=now,
            nodes=tuple(self._node(n, self.free[n]) for n in self.node_ids),
            running=tuple(self.running.values()),
            queued=tuple(self.queued.values()),
            quotas=self.quotas,
            usage=tuple(TeamUsage(team=t, pool=POOL, device_seconds=u) for t, u in sorted(self.usage.items())),
            policies={POOL: self.policy},
        )

    def _node(self, node_id: str, free: int) -> Node:
        # Nodes are immutable and take few states: one object each, not one per pass.
        node = self.nodes_seen.get((node_id, free))
        if node is None:
            node = self.nodes_seen[node_id, free] = Node(id=node_id, pool=POOL, total_devices=self.gpn, free_devices=free)
        return node

    def median_wait(self) -> float:
        seen = self.waits_seen
        return seen[len(seen) // 2] if seen else 0.0

    def _queue(self, job: TraceJob) -> None:
        count, per_node = self.shape(job)
        if job.id not in self.median_at_submit:
            self.median_at_submit[job.id] = self.median_wait()
        predicted, expected = self.remaining(job)
        self.queued[job.id] = QueuedJob(
            id=job.id,
            team=job.team,
            pool=POOL,
            priority_class=PriorityClass.NORMAL,
            submitted_at=job.submit_s,
            nodes=count,
            devices_per_node=per_node,
            predicted_runtime=predicted,
            preemptible=self.policy.preemption,
            expected_runtime=expected,
            deadline=self.deadlines.get(job.id),
            attained_s=self.attained.get(job.id, 0.0),
            preemptions=len(self.attempts.get(job.id, ())),
            requeued_at=self.requeued[job.id][0] if job.id in self.requeued else None,
            last_run_s=self.requeued[job.id][1] if job.id in self.requeued else 0.0,
            placed_before=job.id in self.requeued,
        )
        self.queued_by_type[job.job_type][job.id] = None
        if service(self.attained.get(job.id, 0.0), job.gpus, self.policy) < demotion_threshold(self.policy):
            self.fresh_waiting.add(job.id)

    def _next_wake(self, after: float) -> float:
        """When a demoted run next becomes a possible victim, while a normal job waits to use one
        (passes otherwise run only on submissions and ends, as the portal's do on events)."""
        heap = self.victim_ready
        while heap and (heap[0][1] not in self.running or self.running[heap[0][1]].started_at != heap[0][2]):
            heapq.heappop(heap)
        if not heap or not self.fresh_waiting:
            return math.inf
        return max(heap[0][0], after)

    def run(self) -> None:
        submit_at = 0
        last = self.jobs[0].submit_s if self.jobs else 0.0
        half_life = self.policy.fair_share_half_life_s
        while submit_at < len(self.jobs) or self.completions:
            next_submit = self.jobs[submit_at].submit_s if submit_at < len(self.jobs) else math.inf
            while self.completions and self.ends.get(self.completions[0][1]) != self.completions[0][0]:
                heapq.heappop(self.completions)  # the end of an attempt that was stopped sooner
            next_end = self.completions[0][0] if self.completions else math.inf
            now = min(next_submit, next_end, self._next_wake(last))
            if now == math.inf:
                break
            for team in set(self.usage) | set(self.held):
                self.usage[team] = accrue_usage(self.usage[team], self.held.get(team, 0), now - last, half_life)
            if self.queued:
                self.busy_waiting_s += (now - last) * sum(self.held.values())
                self.capacity_waiting_s += (now - last) * len(self.node_ids) * self.gpn
            last = now
            while self.victim_ready and self.victim_ready[0][0] <= now:
                heapq.heappop(self.victim_ready)
            stale = self._finish_due(now)
            new: list[str] = []
            while submit_at < len(self.jobs) and self.jobs[submit_at].submit_s <= now:
                job = self.jobs[submit_at]
                submit_at += 1
                self._queue(job)
                new.append(job.id)
            self._refresh_predictions(now, stale)
            state = self._fix_deadlines(self.state(now)) if new else None
            if not self._head_blocks_all():
                decision = schedule(state or self.state(now), explain=False)
                self.passes += 1
                for placement in decision.placements:
                    self._start(placement.job_id, placement.allocation, now)
                self.making_room.clear()
                for preemption in decision.preemptions:
                    self._stop(preemption.victim_id, now, preemption.for_job_id)
                    # Expected once the victims' grace is over (whether one ends sooner by itself is
                    # the trace's secret: estimates never read a job's own duration).
                    self.making_room[preemption.for_job_id] = now + self.resume.grace_s
            if self.estimates:
                self._estimate(new, now)
            self.requeued_now.clear()

    def _fix_deadlines(self, state: ClusterState) -> ClusterState:
        """Fix the virtual deadline of jobs just submitted, as the portal does on its first pass."""
        due = deadlines_due(state)
        if not due:
            return state
        for job_id, deadline in due.items():
            self.deadlines[job_id] = deadline
            self.queued[job_id] = replace(self.queued[job_id], deadline=deadline)
        return replace(state, queued=tuple(self.queued.values()))

    def _head_blocks_all(self) -> bool:
        """Whether the pass is sure to place nothing: FIFO without backfill, head does not fit.

        Under strict FIFO the first job in line that could ever run stops everyone behind it
        when it does not fit now, so the pass is a no-op; the core would only find that out
        after keying the whole queue, which on this trace holds thousands of jobs at every
        event. Exact: anything the core would skip (no such hardware, over quota) runs the pass.
        """
        policy = self.policy
        if policy.ordering != Ordering.FIFO or policy.backfill or policy.preemption or not self.queued:
            return False
        # `queued` is in submission order (jobs join at submission and keep their slot when
        # re-predicted), so the head is among the jobs submitted first: ties go to the core's
        # order, by id, so check every job sharing the first submission time.
        first = next(iter(self.queued.values()))
        free = sorted(self.free.values(), reverse=True)
        for job in self.queued.values():
            if job.submitted_at != first.submitted_at:
                break
            if job.priority_class != first.priority_class or job.blocked_reason is not None:
                return False
            if job.nodes > len(free) or job.devices_per_node > self.gpn:
                return False
            if self.held.get(job.team, 0) + job.devices > self.limits.get(job.team, UNLIMITED):
                return False
            if free[job.nodes - 1] >= job.devices_per_node:
                return False
        return True

    def _finish_due(self, now: float) -> set[str]:
        """End every attempt due by `now` (finished, or stopped after preemption); returns the job
        types whose predictions moved."""
        finished_types: set[str] = set()
        while self.completions and self.completions[0][0] <= now:
            end, job_id = heapq.heappop(self.completions)
            if self.ends.get(job_id) != end:
                continue
            del self.ends[job_id]
            run = self.running.pop(job_id)
            job = self.by_id[job_id]
            for node_id, count in run.allocation:
                self.free[node_id] += count
            self.held[job.team] -= run.devices
            if run.stopping:
                self._requeue(job, run, end)
                continue
            self.predictor.observe(
                FinishedRun(team=job.team, job_type=job.job_type, devices=job.gpus, runtime_s=job.duration_s, finished_at=end)
            )
            finished_types.add(job.job_type)
            self.attempts[job_id].append((run.started_at, end))
            self.outcomes.append(
                JobOutcome(job, self.started[job_id], end, self.estimated.get(job_id), tuple(self.attempts.pop(job_id)),
                           median_wait=self.median_at_submit.pop(job_id, 0.0))
            )
        if finished_types:
            # A finished run can change predictions at every level that shares its job type.
            self.prediction_cache = {k: v for k, v in self.prediction_cache.items() if k[1] not in finished_types}
        return finished_types

    def _refresh_predictions(self, now: float, stale_types: set[str]) -> None:
        for job_type in sorted(stale_types):
            for job_id in self.queued_by_type.get(job_type, ()):
                if self.saved.get(job_id, 0.0) > 0:
                    continue  # a resumed job keeps the prediction made when it stopped
                queued = self.queued[job_id]
                predicted, expected = self.prediction(self.by_id[job_id])
                if predicted != queued.predicted_runtime or expected != queued.expected_runtime:
                    self.queued[job_id] = replace(queued, predicted_runtime=predicted, expected_runtime=expected)
        # A run past its predicted end gets a new one conditioned on how long it has run: with
        # heavy tails, a run that outlived its peers is probably a long one.
        while self.overdue and self.overdue[0][0] <= now:
            _, job_id = heapq.heappop(self.overdue)
            run = self.running.get(job_id)
            if run is None or run.stopping or run.predicted_end > now:
                continue
            job = self.by_id[job_id]
            done = self.saved.get(job_id, 0.0) + now - run.started_at
            query = RuntimeQuery(team=job.team, job_type=job.job_type, devices=job.gpus, elapsed_s=done)
            predicted_end = max(now + self.predictor.predict(query).runtime_s - done, now + 60.0)
            self.running[job_id] = replace(run, predicted_end=predicted_end)
            heapq.heappush(self.overdue, (predicted_end, job_id))

    def _start(self, job_id: str, allocation: tuple[tuple[str, int], ...], now: float) -> None:
        queued = self.queued.pop(job_id)
        self.fresh_waiting.discard(job_id)
        first = job_id not in self.started
        back = self.open_requeues.pop(job_id, None)
        if back is not None:
            back.start = now
        bisect.insort(self.waits_seen, now - (queued.submitted_at if back is None else back.at))
        calibrating = self.calibrating.pop(job_id, None)
        if calibrating is not None:
            key, estimated_wait, since = calibrating
            self.calibration.observe(key, estimated_wait, now - since)
        # A first start later than its submission: the pass at its submission left it waiting (a
        # pass skipped by `_head_blocks_all` would have too), the portal's rule (`snapshot.lags_load`).
        if first and self.estimates and now > queued.submitted_at:
            rank = queued.deadline if queued.deadline is not None and self.policy.ordering != Ordering.FIFO else None
            self.lag.observe(now, queued.submitted_at if rank is None else rank)
        job = self.by_id[job_id]
        del self.queued_by_type[job.job_type][job_id]
        for node_id, count in allocation:
            self.free[node_id] -= count
        # No live ETA in a trace: estimates take it to end at its predicted (median) end.
        predicted_end = now + queued.predicted_runtime
        self.running[job_id] = RunningJob(
            id=job_id,
            team=job.team,
            pool=POOL,
            priority_class=PriorityClass.NORMAL,
            allocation=allocation,
            started_at=now,
            predicted_end=predicted_end,
            preemptible=self.policy.preemption,
            attained_s=queued.attained_s,
            checkpoint_every_s=self.resume.checkpoint_every_s if self.policy.preemption else None,
            preemptions=queued.preemptions,
        )
        self.held[job.team] += queued.devices
        if first:
            self.started[job_id] = now
        # A resumed job loads its checkpoint first, then does what it had left.
        restart = 0.0 if first else self.resume.restart_s
        end = now + restart + job.duration_s - self.saved.get(job_id, 0.0)
        self.ends[job_id] = end
        heapq.heappush(self.completions, (end, job_id))
        heapq.heappush(self.overdue, (predicted_end, job_id))
        self._watch_victim(queued, now)

    def _watch_victim(self, queued: QueuedJob, now: float) -> None:
        """Wake a pass when the run just started becomes a possible victim: demoted, and past its
        minimum attempt (`policies.min_attempt`)."""
        policy = self.policy
        threshold = demotion_threshold(policy)
        if not policy.preemption or 0 < policy.max_preemptions <= queued.preemptions or threshold == math.inf:
            return
        to_demotion = seconds_to_demotion(queued.attained_s, queued.devices, policy)
        ready = now + max(to_demotion, min_attempt(queued.preemptions, policy), 0.0)
        heapq.heappush(self.victim_ready, (ready, queued.id, now))

    def _stop(self, job_id: str, now: float, for_job_id: str) -> None:
        """A preempted job: it exits within its grace (or ends by itself first) and requeues."""
        run = self.running[job_id]
        stop_at = now + self.resume.grace_s
        if self.ends[job_id] <= stop_at:
            return  # it finishes before it would have stopped
        self.preemptions += 1
        self.running[job_id] = replace(run, stopping=True, stopping_for=for_job_id, predicted_end=stop_at)
        self.ends[job_id] = stop_at
        heapq.heappush(self.completions, (stop_at, job_id))

    def _requeue(self, job: TraceJob, run: RunningJob, stopped_at: float) -> None:
        self.attempts[job.id].append((run.started_at, stopped_at))
        ran = stopped_at - run.started_at
        restart = 0.0 if run.attained_s == 0 else self.resume.restart_s  # only a resume restarts
        every = self.resume.checkpoint_every_s
        kept = every * math.floor(ran / every)
        progress = max(0.0, kept - restart)
        self.saved[job.id] += progress
        self.attained[job.id] += ran
        self.requeued[job.id] = (stopped_at, ran)
        self.lost_device_s += (ran - progress) * run.devices
        self._queue(job)
        back = Requeue(job_id=job.id, at=stopped_at, median_wait=self.median_wait())
        self.requeues.append(back)
        self.open_requeues[job.id] = back
        self.requeued_now.append(back)

    def _estimate(self, new: list[str], now: float) -> None:
        """Estimate the start of each job submitted now, and the restart of each run that went
        back in line now (`Requeue.estimate`), after this event's pass, as the portal would."""
        waiting = []
        for back in self.requeued_now:
            if back.start is not None:
                back.estimate = back.start
            elif back.job_id in self.making_room:
                back.estimate = self.making_room[back.job_id]
            else:
                waiting.append(back.job_id)
        for job_id in new:
            if job_id in self.started:
                self.estimated[job_id] = now
            elif job_id in self.making_room:
                # The pass is stopping runs for it: it starts once they have, as a replay of this
                # state would find (stopping runs end when their grace is over), at a fraction of
                # the cost.
                self.estimated[job_id] = self.making_room[job_id]
            else:
                waiting.append(job_id)
        if not waiting:
            return
        result = queue_estimates(
            self.state(now),
            jobs=waiting,
            lags=self.lag,
            ranges=False,
            max_passes=self.estimate_passes,
            step_ratio=self.estimate_step_ratio,
            min_step_s=self.estimate_min_step_s,
            max_ahead=self.estimate_max_ahead,
            calibration=self.calibration,
        )
        for job_id in waiting:
            raw = result[job_id].raw_start
            queued = self.queued.get(job_id)
            if raw is not None and queued is not None:
                key = WaitCalibration.job_key(queued, estimated_wait=raw - now)
                self.calibrating[job_id] = (key, raw - now, now)
        for back in self.requeued_now:
            if back.estimate is None:
                back.estimate = result[back.job_id].start
        for job_id in new:
            if job_id in result:
                self.estimated[job_id] = result[job_id].start
                if self.policy.promise_estimates:
                    self._promise(job_id, result[job_id].raw_start)

    def _promise(self, job_id: str, start: float | None) -> None:
        """`Policy.promise_estimates`: the first estimated start becomes the deadline where earlier."""
        queued = self.queued.get(job_id)
        if start is not None and queued is not None and queued.deadline is not None and start < queued.deadline:
            self.queued[job_id] = replace(queued, deadline=start)
            self.deadlines[job_id] = start


def summarize(replay: Replay, policy_name: str, wall_s: float, cpu_s: float = 0.0) -> Summary:
    outcomes = replay.outcomes
    jcts = [o.jct for o in outcomes]
    waits = [o.wait for o in outcomes]
    slowdown_by_team: dict[str, list[float]] = defaultdict(list)
    for o in outcomes:
        slowdown_by_team[o.job.team].append(slowdown(o))
    team_slowdown = {team: statistics.fmean(v) for team, v in sorted(slowdown_by_team.items())}
    team_means = list(team_slowdown.values())
    busy = sum(o.job.gpus * o.job.duration_s for o in outcomes)
    span = (max(o.end for o in outcomes) - min(o.job.submit_s for o in outcomes)) if outcomes else 0.0
    capacity = len(replay.node_ids) * replay.gpn
    within, median_error, median_waited_error = _estimate_figures(outcomes)
    n = len(outcomes)
    return Summary(
        policy=policy_name,
        jobs=n,
        nodes=len(replay.node_ids),
        gpus_per_node=replay.gpn,
        avg_jct_s=_mean(jcts),
        p95_jct_s=percentile(jcts, 0.95),
        avg_wait_s=_mean(waits),
        p95_wait_s=percentile(waits, 0.95),
        utilization=busy / (capacity * span) if span > 0 else 0.0,
        jain_slowdown=jain(team_means),
        mean_slowdown=statistics.fmean(s for v in slowdown_by_team.values() for s in v) if n else 0.0,
        estimate_within=_fraction(within, n),
        estimate_median_abs_error_s=median_error,
        estimate_median_abs_error_waited_s=median_waited_error,
        started_immediately=_fraction(sum(1 for w in waits if w <= 0), n),
        preemptions=replay.preemptions,
        preempted_jobs=_fraction(sum(1 for o in outcomes if o.preempted), n),
        lost_device_h=replay.lost_device_s / 3600.0,
        scheduling_passes=replay.passes,
        wall_s=wall_s,
        cpu_s=cpu_s,
        team_slowdown=team_slowdown,
        p99_jct_s=percentile(jcts, 0.99),
        max_preemptions_per_job=max((o.preempted for o in outcomes), default=0),
        jobs_preempted_5_plus=sum(1 for o in outcomes if o.preempted >= 5),
        waited=waited_estimates([(o.job.submit_s, o.start, o.estimated_start, o.median_wait) for o in outcomes]),
        requeued=waited_estimates([(r.at, r.start, r.estimate, r.median_wait) for r in replay.requeues
                                   if r.start is not None], all_waits=True),
        busy_while_waiting=_fraction_s(replay.busy_waiting_s, replay.capacity_waiting_s),
    )


# Runs that really waited: over 10 minutes, over an hour (`waited_estimates`).
WAITED_BUCKETS = (("10m", 600.0), ("1h", 3600.0))


def waited_estimates(
    waits: Sequence[tuple[float, float, float | None, float]], *, all_waits: bool = False,
) -> dict[str, dict[str, float]]:
    """For the waits (since, start, estimated start, pool's median wait at `since`) longer than
    10 minutes and than an hour (and all of them with `all_waits`, key "all"): how many, and the
    share put within max(10 min, 25% of the wait) of the start by the estimate, by "starts now",
    and by the pool's median wait."""

    def close(guess: float | None, since: float, start: float) -> bool:
        return guess is not None and abs(guess - start) <= close_margin(start - since)

    out: dict[str, dict[str, float]] = {}
    for name, floor in ((("all", -1.0),) if all_waits else ()) + WAITED_BUCKETS:
        chosen = [w for w in waits if w[1] - w[0] > floor]
        n = len(chosen)
        out[name] = {
            "jobs": n,
            "estimate": _fraction(sum(close(guess, since, start) for since, start, guess, _ in chosen), n),
            "starts_now": _fraction(sum(close(since, since, start) for since, start, _, _ in chosen), n),
            "pool_median": _fraction(sum(close(since + median, since, start) for since, start, _, median in chosen), n),
        }
    return out


def _fraction_s(part: float, whole: float) -> float:
    return part / whole if whole > 0 else 0.0


def _mean(values: Sequence[float]) -> float:
    return statistics.fmean(values) if values else 0.0


def _fraction(count: int, n: int) -> float:
    return count / n if n else 0.0


def _estimate_figures(outcomes: Sequence[JobOutcome]) -> tuple[int, float, float]:
    """How many estimated starts were close (within 10 minutes or a quarter of the wait), and the
    median error of the estimates, over all jobs and over the jobs that waited."""
    errors: list[float] = []
    waited_errors: list[float] = []
    within = 0
    for o in outcomes:
        if o.estimated_start is None:
            error = math.inf
        else:
            error = abs(o.estimated_start - o.start)
        errors.append(error)
        if o.wait > 0:
            waited_errors.append(error)
        if error <= close_margin(o.wait):
            within += 1
    return (
        within,
        percentile([e for e in errors if e != math.inf] or [0.0], 0.5),
        percentile([e for e in waited_errors if e != math.inf] or [0.0], 0.5),
    )


def replay(
    jobs: Sequence[TraceJob],
    *,
    nodes: int,
    gpus_per_node: int = 8,
    policy: str = "trainyard",
    estimates: bool = True,
    preemptible: Preemptible = Preemptible(),
    guarantee_share: float = 1.0,
) -> tuple[Summary, Replay]:
    """Replay `jobs` under `policy`: its summary, and the replay (outcomes, requeues) for a report."""
    started, cpu_started = time.perf_counter(), time.process_time()
    sim = Replay(jobs, nodes=nodes, gpus_per_node=gpus_per_node, policy=POLICIES[policy], estimates=estimates,
                 preemptible=preemptible, guarantee_share=guarantee_share)
    sim.run()
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    return summarize(sim, policy, wall, cpu), sim


def replay_trace(jobs: Sequence[TraceJob], **options: Any) -> tuple[Summary, list[JobOutcome]]:
    """`replay` (the same keyword options) for callers that need the outcomes only."""
    summary, sim = replay(jobs, **options)
    return summary, sim.outcomes


def teams_compared(policy: Summary, baseline: Summary) -> tuple[list[str], list[tuple[str, float, float]]]:
    """Teams with a lower mean slowdown under `policy` than under `baseline`, and those worse off
    as (team, baseline slowdown, policy slowdown), worst first."""
    better: list[str] = []
    worse: list[tuple[str, float, float]] = []
    for team, mine in policy.team_slowdown.items():
        theirs = baseline.team_slowdown.get(team)
        if theirs is None:
            continue
        if mine < theirs:
            better.append(team)
        elif mine > theirs:
            worse.append((team, theirs, mine))
    worse.sort(key=lambda row: row[1] / row[2])
    return better, worse


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:10.2f} h"


def format_table(summaries: Sequence[Summary]) -> str:
    rows: list[tuple[str, Callable[[Summary], str]]] = [
        ("jobs", lambda s: f"{s.jobs:12d}"),
        ("avg JCT", lambda s: _hours(s.avg_jct_s)),
        ("p95 JCT", lambda s: _hours(s.p95_jct_s)),
        ("p99 JCT", lambda s: _hours(s.p99_jct_s)),
        ("avg wait", lambda s: _hours(s.avg_wait_s)),
        ("p95 wait", lambda s: _hours(s.p95_wait_s)),
        ("utilization", lambda s: f"{s.utilization:12.3f}"),
        ("busy while jobs wait", lambda s: f"{s.busy_while_waiting:12.3f}"),
        ("Jain (slowdown)", lambda s: f"{s.jain_slowdown:12.3f}"),
        ("mean slowdown", lambda s: f"{s.mean_slowdown:12.2f}"),
        ("started at once", lambda s: f"{s.started_immediately:12.3f}"),
        ("estimate within", lambda s: f"{s.estimate_within:12.3f}"),
        ("est. median err", lambda s: _hours(s.estimate_median_abs_error_s)),
        ("est. median err (waited)", lambda s: _hours(s.estimate_median_abs_error_waited_s)),
        *_waited_rows("waited", "at submission"),
        ("preemptions", lambda s: f"{s.preemptions:12d}"),
        ("jobs preempted", lambda s: f"{s.preempted_jobs:12.3f}"),
        ("max preempted (one job)", lambda s: f"{s.max_preemptions_per_job:12d}"),
        ("jobs preempted 5+ times", lambda s: f"{s.jobs_preempted_5_plus:12d}"),
        *_waited_rows("requeued", "at requeue"),
        ("work lost", lambda s: f"{s.lost_device_h:8.0f} GPU-h"),
        ("replay wall time", lambda s: f"{s.wall_s:10.1f} s"),
        ("replay CPU time", lambda s: f"{s.cpu_s:10.1f} s"),
    ]
    header = f"{'':26}" + "".join(f"{s.policy:>14}" for s in summaries)
    lines = [header]
    for label, fmt in rows:
        lines.append(f"{label:26}" + "".join(f"{fmt(s):>14}" for s in summaries))
    return "\n".join(lines)


def _waited_rows(attr: str, when: str) -> list[tuple[str, Callable[[Summary], str]]]:
    """Rows for `Summary.waited` or `.requeued`: per bucket, the runs and the three shares."""

    def cell(bucket: str, key: str) -> Callable[[Summary], str]:
        def fmt(s: Summary) -> str:
            value = getattr(s, attr).get(bucket, {}).get(key, 0.0)
            return f"{int(value):12d}" if key == "jobs" else f"{value:12.3f}"

        return fmt

    rows: list[tuple[str, Callable[[Summary], str]]] = []
    buckets = [name for name, _ in WAITED_BUCKETS]
    for bucket in (["all", *buckets] if attr == "requeued" else buckets):
        label = "waits" if bucket == "all" else f"waits > {bucket}"
        rows.append((f"{when}, {label}", cell(bucket, "jobs")))
        for key, name in (("estimate", "estimate"), ("starts_now", "'starts now'"), ("pool_median", "pool median")):
            rows.append((f"  {name} within", cell(bucket, key)))
    return rows


def _variant_replay(task: tuple[Variant, str, str, int, int, Preemptible, int | None, bool, float]) -> Summary:
    variant, policy, trace, nodes, gpus_per_node, resume, limit, estimates, share = task
    jobs = variant.jobs(load_trace(trace, limit))
    # The goals judge the trainyard estimator; the baselines' replays skip the estimates (and
    # trainyard's too with `estimates` off: `--no-estimates`, for the policy's figures alone).
    return replay_trace(jobs, nodes=variant.nodes or nodes, gpus_per_node=gpus_per_node, policy=policy,
                        estimates=estimates and policy == "trainyard", preemptible=resume, guarantee_share=share)[0]


def run_variants(trace: str, *, nodes: int, gpus_per_node: int = 8, resume: Preemptible = Preemptible(),
                 limit: int | None = None, workers: int = 1, variants: Sequence[Variant] = VARIANTS,
                 policies: Sequence[str] = tuple(POLICIES), estimates: bool = True,
                 guarantee_share: float = 1.0) -> dict[str, dict[str, Summary]]:
    """Every policy on every variant: {variant name: {policy: summary}}."""
    tasks = [(v, p, trace, nodes, gpus_per_node, resume, limit, estimates, guarantee_share)
             for v in variants for p in policies]
    if workers > 1:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            summaries = list(pool.map(_variant_replay, tasks))
    else:
        summaries = [_variant_replay(t) for t in tasks]
    out: dict[str, dict[str, Summary]] = defaultdict(dict)
    for (variant, policy, *_), summary in zip(tasks, summaries, strict=True):
        out[variant.name][policy] = summary
    return dict(out)


@dataclass(frozen=True, slots=True)
class GoalCell:
    """One goal on one sample: whether it held, and the figure it was judged by."""

    held: bool
    text: str


def goal_cells(fifo: Summary, backfill: Summary, ty: Summary) -> dict[str, GoalCell]:
    """Issue 28's goals for one replay of the three policies: whether each held, and its figure."""
    over_10m = ty.waited.get("10m", {})
    est, now, median = (over_10m.get(k, 0.0) for k in ("estimate", "starts_now", "pool_median"))
    jct_fifo, jct_bf = ty.avg_jct_s / fifo.avg_jct_s, ty.avg_jct_s / backfill.avg_jct_s
    p99_bf = ty.p99_jct_s / backfill.p99_jct_s
    return {
        "jct <= 0.6 fifo": GoalCell(jct_fifo <= 0.6, f"{jct_fifo:.2f}×"),
        "jct <= 0.9 backfill": GoalCell(jct_bf <= 0.9, f"{jct_bf:.2f}×"),
        "jain >= 0.85": GoalCell(ty.jain_slowdown >= 0.85, f"{ty.jain_slowdown:.3f}"),
        "p99 <= backfill": GoalCell(p99_bf <= 1.0, f"{p99_bf:.2f}×"),
        "preempted <= 10": GoalCell(ty.max_preemptions_per_job <= 10, f"{ty.max_preemptions_per_job}"),
        "est > 10m >= 0.7": GoalCell(est >= 0.7, f"{est:.1%}"),
        "est beats baselines": GoalCell(est > max(now, median), f"{est:.0%} vs {max(now, median):.0%}"),
        "busy >= backfill": GoalCell(ty.busy_while_waiting >= backfill.busy_while_waiting,
                                     f"{ty.busy_while_waiting:.3f} vs {backfill.busy_while_waiting:.3f}"),
    }


def goals(fifo: Summary, backfill: Summary, ty: Summary) -> dict[str, bool]:
    """Issue 28's goals for one replay of the three policies."""
    return {name: cell.held for name, cell in goal_cells(fifo, backfill, ty).items()}


def format_variants(results: dict[str, dict[str, Summary]]) -> str:
    """One line per variant: trainyard against the baselines, and which goals held."""
    head = (f"{'variant':11}{'nodes':>6}{'JCT/fifo':>9}{'JCT/bf':>8}{'Jain':>7}{'p99/bf':>8}{'maxpre':>7}"
            f"{'est>10m':>8}{'now':>6}{'median':>7}{'est>1h':>7}{'requeue':>8}{'busy':>6}{'bf busy':>8}  goals missed")
    lines = [head]
    for name, by_policy in results.items():
        fifo, bf, ty = by_policy["fifo"], by_policy["backfill"], by_policy["trainyard"]
        w10, w1h = ty.waited.get("10m", {}), ty.waited.get("1h", {})
        missed = [goal for goal, ok in goals(fifo, bf, ty).items() if not ok]
        lines.append(
            f"{name:11}{ty.nodes:6d}{ty.avg_jct_s / fifo.avg_jct_s:9.3f}{ty.avg_jct_s / bf.avg_jct_s:8.3f}"
            f"{ty.jain_slowdown:7.3f}{ty.p99_jct_s / bf.p99_jct_s:8.3f}{ty.max_preemptions_per_job:7d}"
            f"{w10.get('estimate', 0.0):8.3f}{w10.get('starts_now', 0.0):6.3f}{w10.get('pool_median', 0.0):7.3f}"
            f"{w1h.get('estimate', 0.0):7.3f}{ty.requeued.get('10m', {}).get('estimate', 0.0):8.3f}"
            f"{ty.busy_while_waiting:6.3f}{bf.busy_while_waiting:8.3f}  {', '.join(missed) or '-'}"
        )
    return "\n".join(lines)


def policy_with(policy: Policy, overrides: Sequence[str]) -> Policy:
    """`policy` with each FIELD=VALUE of `overrides` set, the value read as the field's type."""
    changes: dict[str, Any] = {}  # each value of its field's type, read below
    for item in overrides:
        name, _, text = item.partition("=")
        if name not in Policy.__dataclass_fields__ or not text:
            raise ValueError(f"--set {item!r}: expected FIELD=VALUE with a field of Policy")
        current = getattr(policy, name)
        if isinstance(current, bool):
            changes[name] = text.lower() in ("1", "true", "yes", "on")
        else:
            changes[name] = type(current)(text)
    return replace(policy, **changes)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("trace")
    parser.add_argument("--nodes", type=int, required=True)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--policy", choices=[*POLICIES, "all"], default="trainyard")
    parser.add_argument("--json", dest="json_out")
    parser.add_argument("--limit", type=int)
    parser.add_argument("--no-estimates", action="store_true",
                        help="skip the at-submission estimates (and so their promises: Policy.promise_estimates)")
    parser.add_argument("--perturb", type=int, metavar="SEED", help="replay another sample of the same kind (see `perturb`)")
    parser.add_argument("--variants", action="store_true",
                        help="every policy on the trace and on VARIANTS (other seeds, 0.7x and 1.3x load, 30 and 60 "
                             "nodes); one line each; only trainyard's replays estimate")
    parser.add_argument("--sample", choices=[v.name for v in VARIANTS],
                        help="replay one of --variants' samples alone (its seed, load and nodes)")
    parser.add_argument("--breakdown", type=int, default=0, metavar="TEAMS",
                        help="print (and write with --json) where the slowdown of the TEAMS worst-off teams goes: "
                             "by the jobs' width and length, first start or after it")
    parser.add_argument("--report", metavar="HTML",
                        help="write the replay as charts to this HTML page (self-contained): JCT distribution, each "
                             "team's slowdown, stops per run, estimates against waits; with --variants, the goals")
    parser.add_argument("--workers", type=int, default=1, help="replays at once with --variants")
    parser.add_argument("--reuse", metavar="JSON",
                        help="with --variants and one --policy: the other policies' figures from this earlier --json")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="FIELD=VALUE",
                        help="replay trainyard with this `Policy` field changed (repeatable), e.g. starve_factor=3")
    defaults = Preemptible()
    parser.add_argument("--checkpoint-every", type=float, default=defaults.checkpoint_every_s, metavar="S",
                        help="seconds between a job's checkpoints (work since the last one is lost when it is stopped)")
    parser.add_argument("--grace", type=float, default=defaults.grace_s, metavar="S",
                        help="seconds a stopped job takes to exit")
    parser.add_argument("--restart", type=float, default=defaults.restart_s, metavar="S",
                        help="seconds a resumed job spends loading before it makes progress")
    parser.add_argument("--guarantee-share", type=float, default=1.0, metavar="F",
                        help="share of the cluster the teams' equal guarantees add up to (0 to 1; 0: no "
                             "guarantees, every run may be preempted)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if not 0.0 <= args.guarantee_share <= 1.0:
        parser.error(f"--guarantee-share must be between 0 and 1 (got {args.guarantee_share:g})")
    if args.report and not Path(args.report).resolve().parent.is_dir():
        parser.error(f"--report {args.report}: folder {Path(args.report).resolve().parent} does not exist")
    try:
        resume = Preemptible(checkpoint_every_s=args.checkpoint_every, grace_s=args.grace, restart_s=args.restart)
        POLICIES["trainyard"] = policy_with(POLICIES["trainyard"], args.overrides)
    except ValueError as exc:
        parser.error(str(exc))
    if args.variants:
        if args.sample or args.breakdown:
            parser.error("--sample and --breakdown replay one sample: leave out --variants")
        return _main_variants(args, resume)
    if args.sample and args.perturb is not None:
        parser.error("--sample names its own seed: leave out --perturb")
    if args.breakdown < 0:
        parser.error(f"--breakdown must be 0 or more teams (got {args.breakdown})")
    jobs = load_trace(args.trace, args.limit)
    nodes = args.nodes
    if args.sample:
        variant = next(v for v in VARIANTS if v.name == args.sample)
        jobs, nodes = variant.jobs(jobs), variant.nodes or nodes
    if args.perturb is not None:
        jobs = perturb(jobs, seed=args.perturb)
    names = list(POLICIES) if args.policy == "all" else [args.policy]
    replays = [
        replay(jobs, nodes=nodes, gpus_per_node=args.gpus_per_node, policy=name,
               estimates=not args.no_estimates, preemptible=resume, guarantee_share=args.guarantee_share)
        for name in names
    ]
    summaries = [summary for summary, _ in replays]
    print(format_table(summaries))
    breakdowns = {s.policy: slowdown_breakdown(sim.outcomes, teams=args.breakdown) for s, sim in replays} if args.breakdown else {}
    for policy, rows in breakdowns.items():
        print(format_breakdown(policy, rows))
    if args.json_out:
        payload: dict[str, Any] = {"trace": str(args.trace), "results": [asdict(s) for s in summaries]}
        if args.sample:
            payload["sample"] = args.sample
        if breakdowns:
            payload["breakdown"] = {policy: [asdict(r) for r in rows] for policy, rows in breakdowns.items()}
        Path(args.json_out).write_text(json.dumps(payload, indent=2) + "\n")
    if args.report:
        title = f"Replay of {Path(args.trace).name}" + (f", sample {args.sample}" if args.sample else "")
        Path(args.report).write_text(report_page(title, replays))
        print(f"report: {args.report}")
    return 0


def report_page(title: str, replays: Sequence[tuple[Summary, Replay]]) -> str:
    """`replay_report.replay_page` for these replays of one sample, one per policy."""
    from apps.scheduling import replay_report  # plotly only for a report

    return replay_report.replay_page(title, {s.policy: sim.outcomes for s, sim in replays},
                                     {s.policy: s for s, _ in replays}, {s.policy: sim.requeues for s, sim in replays})


def _main_variants(args: argparse.Namespace, resume: Preemptible) -> int:
    policies = list(POLICIES) if args.policy == "all" else [args.policy]
    results = run_variants(args.trace, nodes=args.nodes, gpus_per_node=args.gpus_per_node, resume=resume,
                           limit=args.limit, workers=args.workers, policies=policies,
                           estimates=not args.no_estimates, guarantee_share=args.guarantee_share)
    if args.reuse:
        for variant in json.loads(Path(args.reuse).read_text())["variants"]:
            for row in variant["results"]:
                results.setdefault(variant["name"], {}).setdefault(row["policy"], Summary(**row))
    if all(set(by_policy) >= set(POLICIES) for by_policy in results.values()):
        print(format_variants({v.name: results[v.name] for v in VARIANTS if v.name in results}))
    if args.json_out:
        payload = {"trace": str(args.trace), "variants": [
            {**asdict(v), "nodes": v.nodes or args.nodes,
             "results": [asdict(s) for _, s in sorted(results[v.name].items(), key=lambda kv: list(POLICIES).index(kv[0]))]}
            for v in VARIANTS if v.name in results]}
        Path(args.json_out).write_text(json.dumps(payload, indent=2) + "\n")
    for name, by_policy in results.items():
        for summary in by_policy.values():
            print(f"{name:11} {summary.policy:10} {summary.cpu_s:7.1f} s CPU {summary.wall_s:7.1f} s wall")
    if args.report:
        _write_goals_report(args, results)
    return 0


def _write_goals_report(args: argparse.Namespace, results: dict[str, dict[str, Summary]]) -> None:
    from apps.scheduling import replay_report  # plotly only for a report

    grid = {v.name: goal_cells(*(results[v.name][p] for p in ("fifo", "backfill", "trainyard")))
            for v in VARIANTS if set(results.get(v.name, {})) >= {"fifo", "backfill", "trainyard"}}
    if not grid:
        print("report: not written: the goals need fifo, backfill and trainyard (--policy all, or --reuse)")
        return
    intro = (f"{Path(args.trace).name} on {args.nodes} nodes and its variants: trainyard against FIFO and "
             "FIFO+backfill. Each cell is trainyard's figure; × means times the baseline's.")
    Path(args.report).write_text(replay_report.page(f"Issue 28's goals: {Path(args.trace).name}", intro,
                                                    [replay_report.goals_figure(grid)]))
    print(f"report: {args.report}")


if __name__ == "__main__":
    sys.exit(main())
