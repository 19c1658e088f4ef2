"""Queue-wait estimates: replay the front of the queue with the scheduler core itself, and
place jobs further back by how far behind their rank times jobs have lately been starting, or
by the work ahead of them.

Near the front (the first `max_ahead` jobs of a pool), running jobs end at their live ETA or
their predicted (median) end, queued jobs run for their predicted (median) runtimes, and nothing
new arrives. At each end the very same `schedule()` pass runs (same ordering, aging, quotas,
backfill and packing as the live scheduler), so a job's estimated start is when that pass would place it; the range comes from
two more replays in which every remaining duration is shrunk or stretched (by default to half
and to double). Further back, a replay would have to guess weeks of other people's runtimes and
still ignore everything submitted meanwhile, so such jobs are placed by the measured lag of
starts behind their rank times (`QueueLag`), with the spread of those lags as the range, where
the line moves through rank times; in a pool that demotes (least attained service) by the work
ahead of them over the pool's devices (`_in_order`, `_extrapolate`). The portal and the trace
simulator both call `queue_estimates`, so the simulator's accuracy figures are the portal's.

Estimates ignore work not yet submitted, so a job can be overtaken by later, higher-ranked
arrivals; treat the high end as the more honest figure on a busy pool. Under least attained
service that is most of a long wait, so a learned correction (`WaitCalibration`) replaces a
replayed start by what the waits of comparable estimates have lately turned out to be, where
that has been right more often than the replay; both callers feed it the same outcomes.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
from collections import defaultdict, deque
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial

from apps.scheduling.core import queue_keys, schedule
from apps.scheduling.model import RETRY_BACKOFF, ClusterState, Node, NodeState, Placement, Policy, PriorityClass, QueuedJob, RunningJob
from apps.scheduling.placement import INF
from apps.scheduling.policies import OrderKey, line_in_rank_order, rank_time, seconds_to_demotion

# Jobs this far back in their pool's line are placed by the lag instead of a replay.
MAX_AHEAD = 150
# Lag quantiles for the range of a job placed by the lag.
LAG_LOW_Q, LAG_HIGH_Q = 0.2, 0.8


@dataclass(frozen=True, slots=True)
class Estimate:
    """Estimated start of a queued job; None where the replay did not reach it.

    `extrapolated` is set where the start did not come from a replay reaching the job: placed
    by the measured lag (`QueueLag`), or by the fluid guess of the work ahead of it.
    """

    job_id: str
    start: float | None
    low: float | None
    high: float | None
    extrapolated: bool = False
    # The replay's (or lag's) own estimate before `WaitCalibration` corrected it; None when
    # no calibration was applied (then `start` is that estimate).
    raw_start: float | None = None


# Waits within this of the truth, or within this share of the wait, count as right (issue 28).
CLOSE_S, CLOSE_SHARE = 600.0, 0.25


def close_margin(wait: float) -> float:
    """How far from the actual start an estimate of a `wait`-second wait may be and count as
    right: the one rule the replay, the queue page and the correction score by."""
    return max(CLOSE_S, CLOSE_SHARE * wait)


def _close(guess: float, wait: float) -> bool:
    return abs(guess - wait) <= close_margin(wait)


def _best_point(waits: Sequence[float]) -> tuple[float, int]:
    """The wait that the most of `waits` would call right (within max(CLOSE_S, CLOSE_SHARE of
    it)), and how many: the densest spot of the distribution at the resolution the estimate is
    judged by, found by sweeping the intervals' ends."""
    edges: list[tuple[float, int]] = []
    for wait in waits:
        margin = close_margin(wait)
        edges.append((wait - margin, 0))
        edges.append((wait + margin, 1))
    edges.sort()
    count = best = 0
    point = 0.0
    for at, end in edges:
        if end:
            count -= 1
            continue
        count += 1
        if count > best:
            best, point = count, at
    return max(0.0, point), best


CalibrationKey = tuple[bool, int, int]
# A class's corrected wait replaces the replay's figure only where, over the class's recent
# outcomes, it was right this many times as often: with the replay reaching most long waits, a
# correction adopted on any margin lost 5.8 points on the trace (issue 28; 1.25 lost none).
ADOPT_MARGIN = 1.25


class WaitCalibration:
    """A learned correction of estimated waits, from how the waits of comparable runs turned out.

    The replay cannot know the work submitted after a run, nor how long running jobs really
    last; under least attained service both decide when a run starts, so the replay's figure
    is biased in ways that change with the load. This keeps, per class of estimate (back in
    line after a preemption or new; the replay's estimated wait, in factor-of-two bins; one
    device, a node or less, or more), the waits that estimates of that class were followed by
    (`observe`, called when such a run starts, so only what was known by then is used), and
    `adjust` replaces an estimate by the wait that the most of its class's recent outcomes
    would have called right (`_best_point`), where that is right `ADOPT_MARGIN` times as often
    as the replay's own figures were. Classes with fewer than `min_samples` outcomes keep the
    replay's figure.
    """

    def __init__(self, *, window: int = 300, min_samples: int = 20, refresh: int = 10) -> None:
        self.window = window
        self.min_samples = min_samples
        self.refresh = refresh
        # Per class: (estimated wait, actual wait) of the latest outcomes.
        self._outcomes: dict[CalibrationKey, deque[tuple[float, float]]] = defaultdict(lambda: deque(maxlen=window))
        self._seen: dict[CalibrationKey, int] = defaultdict(int)
        # Per class: (outcomes seen when fitted, corrected wait or None to keep the estimate).
        self._points: dict[CalibrationKey, tuple[int, float | None]] = {}

    @staticmethod
    def key(*, estimated_wait: float, requeued: bool, devices: int) -> CalibrationKey:
        wait_bin = -1 if estimated_wait < 60.0 else min(16, int(estimated_wait // 60.0).bit_length())
        width = 0 if devices <= 1 else 1 if devices <= 8 else 2
        return requeued, wait_bin, width

    @classmethod
    def job_key(cls, job: QueuedJob, *, estimated_wait: float) -> CalibrationKey:
        """`key` of a queued job's estimate, where the correction learns it (the trace replay) and
        where it applies it: back in line when an attempt of the job was placed before
        (`QueuedJob.placed_before`), whether or not that attempt ran, as the portal files its
        estimate rows (`outcomes.estimate_requeued`). A job with attained service was placed."""
        requeued = job.placed_before or job.attained_s > 0
        return cls.key(estimated_wait=estimated_wait, requeued=requeued, devices=job.devices)

    def observe(self, key: CalibrationKey, estimated_wait: float, wait: float) -> None:
        """A run whose estimate was of class `key` (and said `estimated_wait`) started after `wait`."""
        self._outcomes[key].append((max(0.0, estimated_wait), max(0.0, wait)))
        self._seen[key] += 1

    def adjust(self, key: CalibrationKey, estimated_wait: float) -> float:
        """The corrected wait: the class's best point where, over its recent outcomes, that point
        would have been right more often than the estimates were; else the estimate itself."""
        outcomes = self._outcomes.get(key)
        if outcomes is None or len(outcomes) < self.min_samples:
            return estimated_wait
        seen = self._seen[key]
        cached = self._points.get(key)
        if cached is None or seen - cached[0] >= self.refresh:
            point, hits = _best_point([wait for _, wait in outcomes])
            raw_hits = sum(1 for guess, wait in outcomes if _close(guess, wait))
            cached = self._points[key] = (seen, point if hits > ADOPT_MARGIN * raw_hits else None)
        return estimated_wait if cached[1] is None else cached[1]


Calibrations = WaitCalibration | Mapping[str, WaitCalibration] | None


def _calibration_of(calibration: Calibrations, pool: str) -> WaitCalibration | None:
    if calibration is None or isinstance(calibration, WaitCalibration):
        return calibration
    return calibration.get(pool)


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
        # (now, sorted lags or None) of the last `lags_at` call: many estimates share one clock.
        self._cached: tuple[float, list[float] | None] | None = None

    def observe(self, started_at: float, rank_time: float) -> None:
        self._starts.append((started_at, started_at - rank_time))
        while self._starts and self._starts[0][0] < started_at - self.window_s:
            self._starts.popleft()
        self._cached = None

    def lags_at(self, now: float) -> list[float] | None:
        """Lags of the starts in the window ending at `now`, sorted; None with too few."""
        if self._cached is not None and self._cached[0] == now:
            return self._cached[1]
        lags = sorted(lag for t, lag in self._starts if now - self.window_s <= t <= now)
        found = lags if len(lags) >= self.min_samples else None
        self._cached = (now, found)
        return found

    def lag_at(self, now: float) -> float | None:
        """Median lag of the starts in the window ending at `now`, or None with too few."""
        lags = self.lags_at(now)
        return None if lags is None else lags[len(lags) // 2]

    def eta(self, rank_time: float, now: float) -> float | None:
        """When a job of this rank time should start, or None without enough recent starts."""
        lag = self.lag_at(now)
        return None if lag is None else max(now, rank_time + lag)

    def eta_range(self, rank_time: float, now: float) -> tuple[float, float, float] | None:
        """(low, median, high) start of a job of this rank time, from the spread of recent lags."""
        lags = self.lags_at(now)
        if lags is None:
            return None
        last = len(lags) - 1
        low, mid, high = lags[int(LAG_LOW_Q * last)], lags[len(lags) // 2], lags[int(round(LAG_HIGH_Q * last))]
        return max(now, rank_time + low), max(now, rank_time + mid), max(now, rank_time + high)


Lags = QueueLag | Mapping[str, QueueLag] | None


def _in_order(lags: Lags, state: ClusterState) -> Lags:
    """The lags of the pools whose line moves forward through rank times, as `QueueLag`
    assumes. Not where least attained service demotes: runs that stop demoted runs start far
    ahead of their rank times, and the lag put them hours or days late (on the trace's seed 1,
    a median 38 times the wait); the fluid guess was right 3 times as often there."""
    if lags is None:
        return None
    kept: dict[str, QueueLag] = {}
    for pool in {j.pool for j in state.queued}:
        lag = _lag_of(lags, pool)
        if lag is not None and line_in_rank_order(state.policies.get(pool, state.default_policy)):
            kept[pool] = lag
    return kept


def _lag_of(lags: Lags, pool: str) -> QueueLag | None:
    """The lag to use for a pool: one for every pool, or each pool's own."""
    if lags is None or isinstance(lags, QueueLag):
        return lags
    return lags.get(pool)


@dataclass(frozen=True, slots=True)
class ReplayResult:
    starts: dict[str, float]
    extrapolated: frozenset[str]
    passes: int
    # Each target's rank time at the start (see `OrderKey`), when the replay looked at the order.
    rank_times: dict[str, float] = field(default_factory=dict)
    # (low, high) of the targets placed by the measured lag: the spread of the recent lags.
    ranges: dict[str, tuple[float, float]] = field(default_factory=dict)


def simulate_starts(
    state: ClusterState,
    *,
    targets: Collection[str] | None = None,
    scale: float = 1.0,
    max_passes: int = 5000,
    horizon_s: float = 90 * 86400.0,
    step_ratio: float = 0.0,
    min_step_s: float = 0.0,
    extrapolate: bool = True,
    arrivals: Sequence[QueuedJob] = (),
    ahead_only: bool = False,
    max_ahead: int | None = None,
    lag: Lags = None,
) -> ReplayResult:
    """Start time of each queued job (or of `targets` only) in a forward replay.

    `scale` multiplies every remaining duration. The replay stops once all targets have a
    start, after `max_passes` scheduling passes, or past `horizon_s`; targets still waiting
    then get a fluid extrapolation (see `_extrapolate`) unless `extrapolate` is off.

    `step_ratio` > 0 coarsens time far ahead: the replay jumps at least that fraction of the
    time already simulated, handling every end inside the jump together. A start found that
    way is late by at most that fraction of its wait, a fair price when a wait of days cannot
    be predicted to the minute, and the number of passes grows only logarithmically.
    `min_step_s` > 0 jumps at least that far each time, so a bounded number of passes reaches
    further (the trace replay's budget). A start inside a coarse jump is reported at the middle
    of the jump from the first end it took in, off by at most half the jump either way.

    `arrivals` are jobs expected to be submitted later (their `submitted_at` is in the future),
    for instance yesterday's submissions shifted a day ahead. Each joins the replay's queue once
    its time comes, so a policy that lets later, shorter work go first is estimated as such.

    `ahead_only` replays only the jobs ranked at or ahead of the last replayed target in each
    pool (by the core's own order at the start). Jobs behind the targets could only start
    first by backfilling into holes the targets cannot use, so leaving them out changes little
    and makes a replay for a job near the front of a long queue cheap. With `max_ahead`, a
    target with that many jobs or more ahead of it in its pool skips the replay and is placed
    at once. `lag` (one `QueueLag` for every pool, or one per pool) places such targets, and
    any the replay does not reach, where the measured lag of the line puts them, with the
    spread of the lags as their range; without enough recent starts, or in a pool whose line
    does not move in rank order (`_in_order`), they get the fluid guess.
    """
    lag = _in_order(lag, state)
    placed: dict[str, float] = {}
    ranges: dict[str, tuple[float, float]] = {}
    rank_times: dict[str, float] = {}
    if targets is None and max_ahead is not None:
        targets = [j.id for j in state.queued]
    if targets is not None and (ahead_only or max_ahead is not None):
        state, targets, rank_times = _front(state, targets, ahead_only, max_ahead, lag, placed, ranges)
        if not targets:
            return ReplayResult(starts=placed, extrapolated=frozenset(placed), passes=0, rank_times=rank_times,
                                ranges=ranges)
    replay = _Replay.begin(state, targets, scale, arrivals)
    replay.run(max_passes=max_passes, horizon_s=horizon_s, step_ratio=step_ratio, min_step_s=min_step_s)
    return replay.result(placed, ranges, rank_times, lag, extrapolate=extrapolate)


def _front(
    state: ClusterState,
    targets: Collection[str],
    ahead_only: bool,
    max_ahead: int | None,
    lag: Lags,
    placed: dict[str, float],
    ranges: dict[str, tuple[float, float]],
) -> tuple[ClusterState, list[str], dict[str, float]]:
    """Place the targets `max_ahead` or more places back without a replay (into `placed` and
    `ranges`); the state to replay (only what ranks ahead of the targets, with `ahead_only`),
    the targets left to replay, and every target's rank time."""
    positions, rank_times, pools, keyed = _standing(state, targets)
    far = set() if max_ahead is None else {t for t, ahead in positions.items() if ahead >= max_ahead}
    _place_far(state, far, pools, rank_times, keyed, lag, placed, ranges)
    left = [t for t in positions if t not in far]
    if left and ahead_only:
        state = replace(state, queued=tuple(_ahead_of(keyed, set(left))))
    return state, left, rank_times

def _place_far(
    state: ClusterState,
    far: set[str],
    pools: dict[str, str],
    rank_times: dict[str, float],
    keyed: Mapping[str, list[OrderKey]],
    lag: Lags,
    placed: dict[str, float],
    ranges: dict[str, tuple[float, float]],
) -> None:
    """Targets too far back to replay, into `placed` and `ranges`: by the lag, or the fluid guess."""
    unplaced: set[str] = set()
    for job_id in sorted(far):
        pool_lag = _lag_of(lag, pools[job_id])
        rank = rank_times.get(job_id)
        span = None if pool_lag is None or rank is None else pool_lag.eta_range(rank, state.now)
        if span is None:
            unplaced.add(job_id)
        else:
            placed[job_id] = span[1]
            ranges[job_id] = (span[0], span[2])
    if unplaced:
        guessed, _ = _extrapolate(state, unplaced, keys=keyed)
        placed.update(guessed)


@dataclass(slots=True)
class _Replay:
    """The replayed cluster: what runs, what waits, and when each target started."""

    state: ClusterState
    scale: float
    now: float
    nodes: dict[str, Node]
    free: dict[str, int]
    queued: dict[str, QueuedJob]
    running: dict[str, RunningJob]
    # (predicted end, run id); stale entries (runs gone since) are skipped when met.
    ends: list[tuple[float, str]]
    # Targets not started yet.
    pending: set[str]
    # Expected arrivals in submission order, and how many have joined the queue.
    expected: list[QueuedJob]
    arrived: int = 0
    starts: dict[str, float] = field(default_factory=dict)
    passes: int = 0
    # The first end inside the last coarse jump (None when the replay stepped to that end itself):
    # a start then came somewhere between it and the jump's end, so the midpoint is reported.
    jumped_from: float | None = None
    node_states: dict[tuple[str, int], Node] = field(default_factory=dict)

    @classmethod
    def begin(
        cls, state: ClusterState, targets: Collection[str] | None, scale: float, arrivals: Sequence[QueuedJob]
    ) -> _Replay:
        now = state.now
        queued: dict[str, QueuedJob] = {j.id: j for j in sorted(state.queued, key=lambda j: j.id)}
        running: dict[str, RunningJob] = {}
        ends: list[tuple[float, str]] = []
        for run in sorted(state.running, key=lambda r: r.id):
            end = now + max(0.0, _expected_end(run) - now) * scale
            running[run.id] = run if end == run.predicted_end else replace(run, predicted_end=end)
            heapq.heappush(ends, (end, run.id))
        return cls(
            state=state,
            scale=scale,
            now=now,
            nodes={n.id: n for n in state.nodes},
            free={n.id: n.free_devices for n in state.nodes},
            queued=queued,
            running=running,
            ends=ends,
            pending=set(queued) if targets is None else {t for t in targets if t in queued},
            expected=sorted((j for j in arrivals if j.id not in queued), key=lambda j: (j.submitted_at, j.id)),
        )

    def run(self, *, max_passes: int, horizon_s: float, step_ratio: float, min_step_s: float) -> None:
        """Pass after pass until every target started, or out of passes or past the horizon."""
        began = self.state.now
        while self.pending and self.passes < max_passes and self.now - began <= horizon_s:
            self.passes += 1
            self._admit_arrivals()
            decision = schedule(self._snapshot(), explain=False)
            for placement in decision.placements:
                self._start(placement)
            if decision.preemptions:
                # Victims stop at once here and go back in line with what they had left.
                for pre in decision.preemptions:
                    self._requeue(pre.victim_id)
                continue
            if not self.pending or not self._advance(step_ratio, min_step_s):
                break

    def result(
        self,
        placed: dict[str, float],
        ranges: dict[str, tuple[float, float]],
        rank_times: dict[str, float],
        lag: Lags,
        *,
        extrapolate: bool,
    ) -> ReplayResult:
        """The starts found, with `placed` (placed without a replay), and a fluid or lag guess for
        the targets the replay did not reach, unless `extrapolate` is off."""
        starts = self.starts
        extrapolated: set[str] = set(placed)
        starts.update(placed)
        if self.pending and extrapolate:
            rest = replace(self.state, now=self.now, running=tuple(self.running.values()), queued=tuple(self.queued.values()))
            guessed, guessed_ranges = _extrapolate(rest, self.pending, lag, not_before=self.state.now)
            starts.update(guessed)
            ranges.update(guessed_ranges)
            extrapolated.update(guessed)
        return ReplayResult(starts=starts, extrapolated=frozenset(extrapolated), passes=self.passes, rank_times=rank_times,
                            ranges=ranges)

    def _admit_arrivals(self) -> None:
        expected = self.expected
        while self.arrived < len(expected) and expected[self.arrived].submitted_at <= self.now:
            self.queued[expected[self.arrived].id] = expected[self.arrived]
            self.arrived += 1

    def _snapshot(self) -> ClusterState:
        state, free = self.state, self.free
        return ClusterState(
            now=self.now,
            nodes=tuple(n if n.free_devices == free[n.id] else self._node(n, free[n.id]) for n in self.nodes.values()),
            running=tuple(self.running.values()),
            queued=tuple(self.queued.values()),
            quotas=state.quotas,
            usage=state.usage,
            policies=state.policies,
            default_policy=state.default_policy,
        )

    def _node(self, node: Node, free: int) -> Node:
        # A node takes few states over a replay: one object each (`replace` is slow).
        seen = self.node_states.get((node.id, free))
        if seen is None:
            seen = self.node_states[node.id, free] = replace(node, free_devices=free)
        return seen

    def _start(self, placement: Placement) -> None:
        now = self.now
        job = self.queued.pop(placement.job_id)
        # Inside a coarse jump it runs from the jump's middle, where its start is reported: run
        # from the jump's end, a short run held its devices half a jump too long (issue 28).
        started = self.starts[job.id] = now if self.jumped_from is None else (self.jumped_from + now) / 2
        self.pending.discard(job.id)
        # One run's own length: the median (the mean of a heavy tail is for sums, `_extrapolate`).
        end = started + max(0.0, job.predicted_runtime) * self.scale
        self.running[job.id] = RunningJob(
            id=job.id,
            team=job.team,
            pool=job.pool,
            priority_class=job.priority_class,
            allocation=placement.allocation,
            started_at=started,
            predicted_end=end,
            preemptible=job.preemptible,
            attained_s=job.attained_s,
            memory_per_device=job.memory_per_device,
            cpus_per_device=job.cpus_per_device,
        )
        heapq.heappush(self.ends, (end, job.id))
        for node_id, count in placement.allocation:
            self.free[node_id] -= count

    def _requeue(self, victim_id: str) -> None:
        victim = self.running.pop(victim_id, None)
        if victim is None:
            return
        now = self.now
        _release(self.free, self.nodes, victim)
        self.queued[victim.id] = QueuedJob(
            id=victim.id,
            team=victim.team,
            pool=victim.pool,
            priority_class=victim.priority_class,
            submitted_at=victim.started_at,
            nodes=len(victim.allocation),
            devices_per_node=max(c for _, c in victim.allocation),
            predicted_runtime=max(0.0, victim.predicted_end - now),
            preemptible=victim.preemptible,
            attained_s=victim.service(now),
            placed_before=True,
            memory_per_device=victim.memory_per_device,
            cpus_per_device=victim.cpus_per_device,
        )

    def _advance(self, step_ratio: float, min_step_s: float) -> bool:
        """Nothing else can start until something ends: jump to the next predicted end (or
        further, when coarsening), releasing everything that ends by then. False: nothing runs."""
        ends, running = self.ends, self.running
        while ends and ends[0][1] not in running:
            heapq.heappop(ends)
        if not ends:
            return False
        step = max(min_step_s, step_ratio * (self.now - self.state.now))
        first_end = ends[0][0]
        now = self.now = max(self.now, first_end, self.now + step)
        self.jumped_from = first_end if now > first_end else None
        while ends and ends[0][0] <= now:
            _, run_id = heapq.heappop(ends)
            done = running.pop(run_id, None)
            if done is not None:
                _release(self.free, self.nodes, done)
        return True

def _standing(
    state: ClusterState, targets: Collection[str]
) -> tuple[dict[str, int], dict[str, float], dict[str, str], dict[str, list[OrderKey]]]:
    """For each queued target: how many jobs rank ahead of it in its pool, its rank time (none
    for a demoted job, ranked by service) and its pool; plus every pool's order keys (unsorted), for `_ahead_of` and `_extrapolate`."""
    wanted = set(targets)
    positions: dict[str, int] = {}
    rank_times: dict[str, float] = {}
    pools: dict[str, str] = {}
    keys = queue_keys(state)
    for pool, keyed in keys.items():
        marks = sorted(item for item in keyed if item[4] in wanted)
        if not marks:
            continue
        if len(marks) == 1:
            # The common case (one new job): a comprehension beats the bucketing loop below.
            (mark,) = marks
            counts = [len([1 for item in keyed if item < mark])]
        else:
            # Count the jobs ranked before each target without sorting the whole line: bucket
            # i holds the jobs after target i - 1 up to and including target i.
            bucket = [0] * (len(marks) + 1)
            for item in keyed:
                bucket[bisect_left(marks, item)] += 1
            counts, upto = [], 0
            for i in range(len(marks)):
                upto += bucket[i]
                counts.append(upto - 1)
        for mark, ahead in zip(marks, counts, strict=True):
            positions[mark[4]] = ahead
            rank = rank_time(mark)
            if rank is not None:
                rank_times[mark[4]] = rank
            pools[mark[4]] = pool
    return positions, rank_times, pools, keys


def _ahead_of(keys: Mapping[str, list[OrderKey]], targets: set[str]) -> list[QueuedJob]:
    """The targets and every job ranked ahead of the last of them in its pool (not sorted)."""
    keep: list[QueuedJob] = []
    for keyed in keys.values():
        marks = [item for item in keyed if item[4] in targets]
        if marks:
            last = max(marks)
            keep.extend(item[5] for item in keyed if item <= last)
    return keep


def _extrapolate(
    state: ClusterState,
    pending: Collection[str],
    lag: Lags = None,
    not_before: float | None = None,
    keys: Mapping[str, list[OrderKey]] | None = None,
) -> tuple[dict[str, float], dict[str, tuple[float, float]]]:
    """Guess for jobs no replay placed, and the range of those placed by the lag.

    With a lag that has samples: when the front of the line reaches the job's rank time
    (`QueueLag`), judged from the replay's start `not_before` but never before the replay's
    own end. Otherwise a fluid guess: with the pool full, devices come free as fast as work
    completes, so a job starts when the device-seconds queued ahead of it (in the core's own
    order) have been served, now + work ahead / pool devices, never before the next end. Where
    the pool demotes, a job ahead counts only until it would be demoted (`_fluid_work`).
    `keys` are the pools' order keys when the caller has them for this very state.
    """
    capacity: dict[str, int] = defaultdict(int)
    for node in state.nodes:
        if node.state == NodeState.READY:
            capacity[node.pool] += node.total_devices
    next_end: dict[str, float] = {}
    for run in state.running:
        next_end[run.pool] = min(next_end.get(run.pool, float("inf")), _expected_end(run))
    out: dict[str, float] = {}
    ranges: dict[str, tuple[float, float]] = {}
    wanted = set(pending)
    since = state.now if not_before is None else not_before
    for pool, keyed in (queue_keys(state) if keys is None else keys).items():
        marks = sorted(item for item in keyed if item[4] in wanted)
        if not marks:
            continue
        pool_lag = _lag_of(lag, pool)
        fluid_marks = []
        for mark in marks:
            rank = rank_time(mark)
            span = None if pool_lag is None or rank is None else pool_lag.eta_range(rank, since)
            if span is None:
                fluid_marks.append(mark)
                continue
            low, mid, high = (max(when, state.now) for when in span)
            out[mark[4]] = mid
            ranges[mark[4]] = (low, high)
        devices = capacity.get(pool, 0)
        if devices <= 0 or not fluid_marks:
            continue
        # Work queued ahead of each target: bucket every job by the first target it does not
        # rank behind (a target falls in its own bucket, so its own work is taken out again).
        work = [0.0] * len(fluid_marks)
        cost = partial(_fluid_work, state.policies.get(pool, state.default_policy))
        for item in keyed:
            i = bisect_left(fluid_marks, item)
            if i < len(fluid_marks):
                work[i] += cost(item[5])
        ahead = 0.0
        for i, mark in enumerate(fluid_marks):
            ahead += work[i]
            own = cost(mark[5])
            out[mark[4]] = max(state.now + (ahead - own) / devices, next_end.get(pool, state.now))
    return out, ranges


def _fluid_work(policy: Policy, job: QueuedJob) -> float:
    """Device-seconds a queued job holds before a new job behind it gets its turn: all of its run,
    or where the pool demotes, only until it is demoted below that job (its service left to the
    threshold). Counting whole runs put the trace's fluid guesses 4-10x late (issue 28)."""
    run_s = max(0.0, _expected_runtime(job))
    if job.priority_class <= PriorityClass.NORMAL:
        left = seconds_to_demotion(job.attained_s, job.devices, policy)
        if left > 0:
            run_s = min(run_s, left)
    return job.devices * run_s


def _expected_runtime(job: QueuedJob) -> float:
    # The fluid guess adds many durations together, so it takes the expected (mean) runtime.
    return job.predicted_runtime if job.expected_runtime is None else job.expected_runtime


def _expected_end(run: RunningJob) -> float:
    # The live ETA where the run reports one, else the median end (see `RunningJob.expected_end`).
    return run.predicted_end if run.expected_end is None else run.expected_end


def _release(free: dict[str, int], nodes: dict[str, Node], run: RunningJob) -> None:
    for node_id, count in run.allocation:
        if node_id in free:
            node = nodes[node_id]
            cap = node.total_devices if node.state == NodeState.READY else 0
            free[node_id] = min(cap, free[node_id] + count)


def unestimated(state: ClusterState) -> frozenset[str]:
    """Queued jobs that get no estimated start: held for budget, or shaped so that no set of
    their pool's ready nodes could ever hold them (too few nodes with enough devices, memory and
    CPU cores, or none
    ready, as `core` finds them: `WaitCode.NO_HARDWARE`). No replay would ever start them, and a
    guess of when money or hardware arrives is no estimate."""
    sizes: dict[str, list[tuple[int, float, float]]] = defaultdict(list)
    for node in state.nodes:
        if node.state == NodeState.READY:
            sizes[node.pool].append((node.total_devices, node.memory_bytes or INF, node.cpus or INF))
    fits: dict[tuple[str, int, int, int, float], bool] = {}
    out: set[str] = set()
    for job in state.queued:
        if job.blocked_reason is not None and job.blocked_reason != RETRY_BACKOFF:
            out.add(job.id)
            continue
        nodes, devices, memory, cpus = job.shape
        shape = (job.pool, nodes, devices, memory, cpus)
        ok = fits.get(shape)
        if ok is None:
            ok = fits[shape] = (nodes >= 1 and devices >= 1 and sum(
                1 for t, m, c in sizes.get(job.pool, ()) if t >= devices and m >= memory and c >= cpus) >= nodes)
        if not ok:
            out.add(job.id)
    return frozenset(out)


def queue_estimates(
    state: ClusterState,
    *,
    jobs: Collection[str] | None = None,
    lags: Lags = None,
    ranges: bool = True,
    low_scale: float = 0.5,
    high_scale: float = 2.0,
    max_passes: int = 5000,
    step_ratio: float = 0.05,
    min_step_s: float = 0.0,
    max_ahead: int | None = None,
    calibration: Calibrations = None,
) -> dict[str, Estimate]:
    """Estimated start and range for every queued job (or just `jobs`); none (all three None)
    for the jobs no pass can start as the pool stands (`unestimated`).

    With `calibration` (one for every pool, or one per pool), each start found is corrected by
    what comparable estimates were followed by (`WaitCalibration`); the replay's own figure is
    kept as `raw_start`, and the range is widened to hold the corrected start.

    With `max_ahead`, only the jobs that many places from the front of their pool, or closer,
    are replayed; the rest are placed by `lags` (see `simulate_starts`). Replayed jobs get their
    range from two more replays with every duration scaled by `low_scale` and `high_scale`;
    jobs placed by the lag from the spread of the recent lags; jobs placed by the fluid guess
    from the same scales applied to their wait.
    """
    replay = partial(simulate_starts, state, max_passes=max_passes, step_ratio=step_ratio, min_step_s=min_step_s,
                     ahead_only=max_ahead is not None, max_ahead=max_ahead, lag=lags)
    wanted = sorted(j.id for j in state.queued) if jobs is None else sorted(jobs)
    never = unestimated(state)
    point = replay(targets=[j for j in wanted if j not in never], scale=1.0)
    # Only jobs a replay placed are worth replaying again, shrunk and stretched.
    again = [j for j in wanted if j in point.starts and j not in point.extrapolated]
    low = replay(targets=again, scale=low_scale) if ranges and again else point
    high = replay(targets=again, scale=high_scale) if ranges and again else point
    replays = _Replays(point=point, low=low, high=high, low_scale=low_scale, high_scale=high_scale)
    jobs_by_id = {j.id: j for j in state.queued} if calibration is not None else {}
    return {job_id: Estimate(job_id=job_id, start=None, low=None, high=None) if job_id in never
            else _job_estimate(job_id, jobs_by_id.get(job_id), state.now, replays, calibration) for job_id in wanted}


@dataclass(frozen=True, slots=True)
class _Replays:
    """The point replay of `queue_estimates`, its shrunk and stretched ones, and their scales."""

    point: ReplayResult
    low: ReplayResult
    high: ReplayResult
    low_scale: float
    high_scale: float


def _job_range(job_id: str, start: float | None, now: float, replays: _Replays) -> tuple[float | None, float | None]:
    """A job's (low, high) before calibration: the lag's spread, the scaled fluid guess, or the
    starts of the shrunk and stretched replays, widened to hold `start`."""
    point = replays.point
    lo: float | None
    hi: float | None
    if job_id in point.ranges:
        lo, hi = point.ranges[job_id]
    elif job_id in point.extrapolated and start is not None:
        lo, hi = now + replays.low_scale * (start - now), now + replays.high_scale * (start - now)
    else:
        lo, hi = replays.low.starts.get(job_id), replays.high.starts.get(job_id)
    # Shorter durations need not mean an earlier start (a backfill hole can close), so the
    # range is widened to always contain the point estimate.
    return (lo, hi) if start is None else _holding(lo, hi, start)


def _holding(lo: float | None, hi: float | None, start: float) -> tuple[float | None, float | None]:
    """(lo, hi) widened to hold `start` (an unknown high stays unknown)."""
    return (start if lo is None else min(lo, start)), (None if hi is None else max(hi, start))


def _job_estimate(
    job_id: str, job: QueuedJob | None, now: float, replays: _Replays, calibration: Calibrations
) -> Estimate:
    """One estimable job's `Estimate`, its start corrected by its pool's calibration if any."""
    start = replays.point.starts.get(job_id)
    lo, hi = _job_range(job_id, start, now, replays)
    raw = None
    pool_calibration = None if job is None else _calibration_of(calibration, job.pool)
    if start is not None and job is not None and pool_calibration is not None:
        raw = start
        key = WaitCalibration.job_key(job, estimated_wait=start - now)
        start = now + pool_calibration.adjust(key, start - now)
        lo, hi = _holding(lo, hi, start)
    return Estimate(job_id=job_id, start=start, low=lo, high=hi, extrapolated=job_id in replays.point.extrapolated,
                    raw_start=raw)
