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

import bisect
import heapq
import math
import statistics
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from apps.scheduling.breakdown import slowdown
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
    TeamUsage,
)
from apps.scheduling.policies import accrue_usage, demotion_threshold, limits_by_team, min_attempt, seconds_to_demotion, service
from apps.scheduling.predict import FinishedRun, RuntimePredictor, RuntimeQuery
from apps.scheduling.trace import POOL, JobOutcome, TraceJob, equal_quotas, gang_shape, jain, percentile

# The baselines: strict submission order on the first node that fits, and the same with EASY backfill.
_FIFO = Policy(ordering=Ordering.FIFO, backfill=False, preemption=False, packing=Packing.FIRST_FIT,
               guarantee_first=False, fair_share_weight=0.0)
POLICIES: dict[str, Policy] = {"fifo": _FIFO, "backfill": replace(_FIFO, backfill=True), "trainyard": Policy()}


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
