"""Queue-wait estimates: replay the queue forward with the scheduler core itself.

Running jobs end at their predicted ends, queued jobs run for their predicted runtimes, and
nothing new arrives. At each predicted end the very same `schedule()` pass runs (same
ordering, aging, quotas, backfill and packing as the live scheduler), so a job's estimated
start is when that pass would place it. The range comes from two more replays in which every
remaining duration is shrunk or stretched (by default to half and to double).

Estimates ignore work not yet submitted, so a job can be overtaken by later, higher-ranked
arrivals; treat the high end as the more honest figure on a busy pool.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
from collections import deque
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, replace

from apps.scheduling.core import queue_keys, schedule
from apps.scheduling.model import ClusterState, Node, NodeState, QueuedJob, RunningJob


@dataclass(frozen=True, slots=True)
class Estimate:
    """Estimated start of a queued job; None where the replay did not reach it.

    `extrapolated` is set where the replay stopped (pass or time limit) before the job started
    and the start was extended from the work still ahead of it, assuming the pool stays full.
    """

    job_id: str
    start: float | None
    low: float | None
    high: float | None
    extrapolated: bool = False


class QueueLag:
    """How far behind their rank times jobs have been starting lately.

    Every queued job has a rank time (its virtual deadline, or its submission time under FIFO;
    see `OrderKey`); jobs start roughly in rank-time order, so a job starts about when the
    front of the line reaches its rank time. The lag of a start is its start time minus its
    rank time, and the median lag of the starts in the last `window_s` says how far behind its
    rank time a job now joining the line will start: measured from what actually started, it
    already includes work not yet submitted and runs that overran their predictions, which a
    replay of today's queue cannot know. Lag is taken as constant over the wait: the front
    moving at one second of rank time per second. (Fitting the front's speed from the two
    halves of the window instead was much noisier on the Philly trace.) Record starts with
    `observe`.
    """

    def __init__(self, *, window_s: float = 86400.0, min_samples: int = 8) -> None:
        self.window_s = window_s
        self.min_samples = min_samples
        self._starts: deque[tuple[float, float]] = deque()
        # (now, median lag or None) of the last `lag_at` call: many estimates share one clock.
        self._cached: tuple[float, float | None] | None = None

    def observe(self, started_at: float, rank_time: float) -> None:
        self._starts.append((started_at, started_at - rank_time))
        while self._starts and self._starts[0][0] < started_at - self.window_s:
            self._starts.popleft()
        self._cached = None

    def lag_at(self, now: float) -> float | None:
        """Median lag of the starts in the window ending at `now`, or None with too few."""
        if self._cached is not None and self._cached[0] == now:
            return self._cached[1]
        lags = sorted(lag for t, lag in self._starts if now - self.window_s <= t <= now)
        median = lags[len(lags) // 2] if len(lags) >= self.min_samples else None
        self._cached = (now, median)
        return median

    def eta(self, rank_time: float, now: float) -> float | None:
        """When a job of this rank time should start, or None without enough recent starts."""
        lag = self.lag_at(now)
        return None if lag is None else max(now, rank_time + lag)


@dataclass(frozen=True, slots=True)
class ReplayResult:
    starts: dict[str, float]
    extrapolated: frozenset[str]
    passes: int
    # Each target's rank time at the start (see `OrderKey`), when the replay looked at the order.
    rank_times: dict[str, float] = field(default_factory=dict)


def simulate_starts(
    state: ClusterState,
    *,
    targets: Collection[str] | None = None,
    scale: float = 1.0,
    max_passes: int = 5000,
    horizon_s: float = 90 * 86400.0,
    step_ratio: float = 0.0,
    extrapolate: bool = True,
    arrivals: Sequence[QueuedJob] = (),
    ahead_only: bool = False,
    max_ahead: int | None = None,
    lag: QueueLag | None = None,
) -> ReplayResult:
    """Start time of each queued job (or of `targets` only) in a forward replay.

    `scale` multiplies every remaining duration. The replay stops once all targets have a
    start, after `max_passes` scheduling passes, or past `horizon_s`; targets still waiting
    then get a fluid extrapolation (see `_extrapolate`) unless `extrapolate` is off.

    `step_ratio` > 0 coarsens time far ahead: the replay jumps at least that fraction of the
    time already simulated, handling every end inside the jump together. A start found that
    way is late by at most that fraction of its wait, a fair price when a wait of days cannot
    be predicted to the minute, and the number of passes grows only logarithmically.

    `arrivals` are jobs expected to be submitted later (their `submitted_at` is in the future),
    for instance yesterday's submissions shifted a day ahead. Each joins the replay's queue once
    its time comes, so a policy that lets later, shorter work go first is estimated as such.

    `ahead_only` replays only the jobs ranked at or ahead of the last target in each pool (by
    the core's own order at the start). Jobs behind the targets could only start first by
    backfilling into holes the targets cannot use, so leaving them out changes little and
    makes a replay for a job near the front of a long queue cheap. With `max_ahead`, targets
    behind more than that many jobs skip the replay and get the fluid extrapolation at once.
    With a `lag`, jobs the replay does not reach are placed where the measured lag of the
    line puts them instead (falling back to the fluid guess while it has too few samples).
    """
    rank_times: dict[str, float] = {}
    if targets is not None and (ahead_only or max_ahead is not None):
        ahead, rank_times = _jobs_ahead(state, targets)
        if max_ahead is not None and len(ahead) > max_ahead:
            # The lag needs only the rank times just taken; the fluid guess re-ranks the line.
            lagged = None if lag is None else {t: lag.eta(r, state.now) for t, r in rank_times.items()}
            if lagged is not None and all(when is not None for when in lagged.values()):
                guessed = {t: when for t, when in lagged.items() if when is not None}
            else:
                guessed = _extrapolate(replace(state, queued=tuple(ahead)), targets)
            return ReplayResult(starts=guessed, extrapolated=frozenset(guessed), passes=0, rank_times=rank_times)
        if ahead_only:
            state = replace(state, queued=tuple(ahead))
    now = state.now
    nodes = {n.id: n for n in state.nodes}
    free = {n.id: n.free_devices for n in state.nodes}
    queued: dict[str, QueuedJob] = {j.id: j for j in sorted(state.queued, key=lambda j: j.id)}
    running: dict[str, RunningJob] = {}
    ends: list[tuple[float, str]] = []
    for run in sorted(state.running, key=lambda r: r.id):
        end = now + max(0.0, _expected_end(run) - now) * scale
        running[run.id] = run if end == run.predicted_end else replace(run, predicted_end=end)
        heapq.heappush(ends, (end, run.id))
    pending = set(queued) if targets is None else {t for t in targets if t in queued}
    expected = sorted((j for j in arrivals if j.id not in queued), key=lambda j: (j.submitted_at, j.id))
    arrived = 0
    starts: dict[str, float] = {}
    passes = 0
    while pending and passes < max_passes and now - state.now <= horizon_s:
        passes += 1
        while arrived < len(expected) and expected[arrived].submitted_at <= now:
            queued[expected[arrived].id] = expected[arrived]
            arrived += 1
        snapshot = ClusterState(
            now=now,
            nodes=tuple(
                n if n.free_devices == free[n.id] else Node(n.id, n.pool, n.total_devices, free[n.id], n.state)
                for n in nodes.values()
            ),
            running=tuple(running.values()),
            queued=tuple(queued.values()),
            quotas=state.quotas,
            usage=state.usage,
            policies=state.policies,
            default_policy=state.default_policy,
        )
        decision = schedule(snapshot, explain=False)
        for placement in decision.placements:
            job = queued.pop(placement.job_id)
            starts[job.id] = now
            pending.discard(job.id)
            end = now + max(0.0, _expected_runtime(job)) * scale
            running[job.id] = RunningJob(
                id=job.id,
                team=job.team,
                pool=job.pool,
                priority_class=job.priority_class,
                allocation=placement.allocation,
                started_at=now,
                predicted_end=end,
                preemptible=job.preemptible,
            )
            heapq.heappush(ends, (end, job.id))
            for node_id, count in placement.allocation:
                free[node_id] -= count
        if decision.preemptions:
            # Victims stop at once here and go back in line with what they had left.
            for pre in decision.preemptions:
                victim = running.pop(pre.victim_id, None)
                if victim is None:
                    continue
                _release(free, nodes, victim)
                queued[victim.id] = QueuedJob(
                    id=victim.id,
                    team=victim.team,
                    pool=victim.pool,
                    priority_class=victim.priority_class,
                    submitted_at=victim.started_at,
                    nodes=len(victim.allocation),
                    devices_per_node=max(c for _, c in victim.allocation),
                    predicted_runtime=max(0.0, victim.predicted_end - now),
                    preemptible=victim.preemptible,
                )
            continue
        if not pending:
            break
        # Nothing else can start until something ends: jump to the next predicted end (or
        # further, when coarsening), releasing everything that ends by then.
        while ends and ends[0][1] not in running:
            heapq.heappop(ends)
        if not ends:
            break
        now = max(now, ends[0][0], now + step_ratio * (now - state.now))
        while ends and ends[0][0] <= now:
            _, run_id = heapq.heappop(ends)
            done = running.pop(run_id, None)
            if done is not None:
                _release(free, nodes, done)
    extrapolated: set[str] = set()
    if pending and extrapolate:
        rest = replace(
            state,
            now=now,
            running=tuple(running.values()),
            queued=tuple(queued.values()),
        )
        for job_id, when in _extrapolate(rest, pending, lag, not_before=state.now).items():
            starts[job_id] = when
            extrapolated.add(job_id)
    return ReplayResult(starts=starts, extrapolated=frozenset(extrapolated), passes=passes, rank_times=rank_times)


def _jobs_ahead(state: ClusterState, targets: Collection[str]) -> tuple[list[QueuedJob], dict[str, float]]:
    """The targets and every job ranked ahead of the last of them in its pool (not sorted),
    and the targets' rank times."""
    wanted = set(targets)
    keep: list[QueuedJob] = []
    rank_times: dict[str, float] = {}
    for keyed in queue_keys(state).values():
        marks = [item for item in keyed if item[4] in wanted]
        if marks:
            last = max(marks)
            keep.extend(item[5] for item in keyed if item <= last)
            rank_times.update((item[4], item[2]) for item in marks)
    return keep, rank_times


def _extrapolate(
    state: ClusterState,
    pending: Collection[str],
    lag: QueueLag | None = None,
    not_before: float | None = None,
) -> dict[str, float]:
    """Guess for jobs the replay did not reach.

    With a lag that has samples: when the front of the line reaches the job's rank time
    (`QueueLag`), judged from the replay's start `not_before` but never before the replay's
    own end. Otherwise a fluid guess: with the pool full, devices come free as fast as work
    completes, so a job starts when the device-seconds queued ahead of it (in the core's own
    order) have been served, now + work ahead / pool devices, never before the next end.
    """
    capacity: dict[str, int] = {}
    for node in state.nodes:
        if node.state == NodeState.READY:
            capacity[node.pool] = capacity.get(node.pool, 0) + node.total_devices
    next_end: dict[str, float] = {}
    for run in state.running:
        next_end[run.pool] = min(next_end.get(run.pool, float("inf")), _expected_end(run))
    out: dict[str, float] = {}
    wanted = set(pending)
    for pool, keyed in queue_keys(state).items():
        devices = capacity.get(pool, 0)
        marks = sorted(item for item in keyed if item[5].id in wanted)
        if devices <= 0 or not marks:
            continue
        # Work queued ahead of each target: bucket every job by the first target it does not
        # rank behind (a target falls in its own bucket, so its own work is taken out again).
        work = [0.0] * len(marks)
        for item in keyed:
            i = bisect_left(marks, item)
            if i < len(marks):
                work[i] += item[5].devices * max(0.0, _expected_runtime(item[5]))
        ahead = 0.0
        for i, mark in enumerate(marks):
            ahead += work[i]
            own = mark[5].devices * max(0.0, _expected_runtime(mark[5]))
            fluid = max(state.now + (ahead - own) / devices, next_end.get(pool, state.now))
            eta = None if lag is None else lag.eta(mark[2], state.now if not_before is None else not_before)
            out[mark[5].id] = fluid if eta is None else max(eta, state.now)
    return out


def _expected_runtime(job: QueuedJob) -> float:
    # Waits add many durations together, so they take the expected (mean) runtime where known.
    return job.predicted_runtime if job.expected_runtime is None else job.expected_runtime


def _expected_end(run: RunningJob) -> float:
    return run.predicted_end if run.expected_end is None else run.expected_end


def _release(free: dict[str, int], nodes: dict[str, Node], run: RunningJob) -> None:
    for node_id, count in run.allocation:
        if node_id in free:
            node = nodes[node_id]
            cap = node.total_devices if node.state == NodeState.READY else 0
            free[node_id] = min(cap, free[node_id] + count)


def queue_estimates(
    state: ClusterState,
    *,
    jobs: Collection[str] | None = None,
    ranges: bool = True,
    low_scale: float = 0.5,
    high_scale: float = 2.0,
    max_passes: int = 5000,
    step_ratio: float = 0.05,
) -> dict[str, Estimate]:
    """Estimated start and range for every queued job (or just `jobs`)."""

    def replay(scale: float) -> ReplayResult:
        return simulate_starts(state, targets=jobs, scale=scale, max_passes=max_passes, step_ratio=step_ratio)

    point = replay(1.0)
    low = replay(low_scale) if ranges else point
    high = replay(high_scale) if ranges else point
    wanted = sorted(j.id for j in state.queued) if jobs is None else sorted(jobs)
    out: dict[str, Estimate] = {}
    for job_id in wanted:
        start = point.starts.get(job_id)
        lo, hi = low.starts.get(job_id), high.starts.get(job_id)
        # Shorter durations need not mean an earlier start (a backfill hole can close), so the
        # range is widened to always contain the point estimate.
        if start is not None:
            lo = start if lo is None else min(lo, start)
            hi = None if hi is None else max(hi, start)
        out[job_id] = Estimate(job_id=job_id, start=start, low=lo, high=hi, extrapolated=job_id in point.extrapolated)
    return out
