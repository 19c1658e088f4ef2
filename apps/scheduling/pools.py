"""Runs that may use several pools: place each where it is predicted to finish first.

A run naming several acceptable pools is, each pass, moved to the pool where it is predicted to
FINISH first: now + its predicted wait there (the same replay `estimate.queue_estimates` gives
every queued run) + its predicted runtime divided by that pool's pace for its template. Pace is
Gavel's normalized throughput: how fast runs of a template went in a pool (steps per second of the
runs that finished there, or one run per runtime where they report no steps), relative to the pool
the runtime prediction was made for. A pool without such history runs at pace 1.0, and the reason
says so. Plain Python, like the rest of the core: state in, choices out.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from apps.core.text import hours_minutes
from apps.scheduling.estimate import MAX_AHEAD, Lags, queue_estimates
from apps.scheduling.model import ClusterState, QueuedJob

# A run stays in its pool unless another is predicted to finish at least this much sooner, so two
# nearly equal pools do not swap it back and forth from pass to pass.
SWITCH_MARGIN_S = 60.0


@dataclass(frozen=True, slots=True)
class PaceSample:
    """One finished run: its template, the pool it ran in, and its speed (steps or runs per second)."""

    template: str
    pool: str
    rate: float


@dataclass(frozen=True, slots=True)
class PoolSpeed:
    """A pool a run may use and its pace there, relative to the pool its runtime was predicted for."""

    pool: str
    pace: float = 1.0
    # False: no finished run of the template in this pool (or the other) to measure pace from.
    measured: bool = False


@dataclass(frozen=True, slots=True)
class PoolOption:
    pool: str
    # Seconds until it would start there; None: the pool cannot hold it as it stands.
    wait_s: float | None
    runtime_s: float
    pace: float = 1.0
    measured: bool = False

    @property
    def finish_s(self) -> float | None:
        return None if self.wait_s is None else self.wait_s + self.runtime_s


@dataclass(frozen=True, slots=True)
class PoolChoice:
    job_id: str
    pool: str
    reason: str
    options: tuple[PoolOption, ...] = ()


def pace_rates(samples: Iterable[PaceSample]) -> dict[tuple[str, str], float]:
    """(template, pool) -> the median speed of its finished runs there."""
    rates: dict[tuple[str, str], list[float]] = defaultdict(list)
    for sample in samples:
        if sample.rate > 0:
            rates[(sample.template, sample.pool)].append(sample.rate)
    return {key: statistics.median(values) for key, values in rates.items()}


def pool_speeds(rates: Mapping[tuple[str, str], float], *, template: str, base: str,
                pools: Sequence[str]) -> tuple[PoolSpeed, ...]:
    """Each pool's pace for `template` relative to `base` (1.0, unmeasured, without both rates)."""
    base_rate = rates.get((template, base))
    out: list[PoolSpeed] = []
    for pool in pools:
        rate = rates.get((template, pool))
        if pool == base:
            out.append(PoolSpeed(pool, 1.0, base_rate is not None))
        elif rate is None or base_rate is None:
            out.append(PoolSpeed(pool))
        else:
            out.append(PoolSpeed(pool, rate / base_rate, True))
    return tuple(out)


def pool_choose(job_id: str, options: Sequence[PoolOption], *, current: str,
                margin_s: float = SWITCH_MARGIN_S) -> PoolChoice:
    """The option finishing first (the current pool unless another beats it by `margin_s`)."""
    able = sorted((o for o in options if o.finish_s is not None), key=lambda o: (o.finish_s, o.pool))
    if not able:
        names = ", ".join(o.pool for o in options)
        return PoolChoice(job_id, current, f"in {current}: none of {names} can hold it as it stands", tuple(options))
    best = able[0]
    mine = next((o for o in able if o.pool == current), None)
    if mine is not None and (mine.finish_s or 0.0) - (best.finish_s or 0.0) < margin_s:
        best = mine
    others = [o for o in able if o.pool != best.pool]
    return PoolChoice(job_id, best.pool, _reason(best, others, options), tuple(options))


def _reason(best: PoolOption, others: Sequence[PoolOption], options: Sequence[PoolOption]) -> str:
    if not others:
        cannot = ", ".join(o.pool for o in options if o.finish_s is None)
        return f"placed in {best.pool}: the only acceptable pool that can hold it" + (f" ({cannot} cannot)" if cannot else "")
    runner = others[0]
    gain = (runner.finish_s or 0.0) - (best.finish_s or 0.0)
    ratio = best.pace / runner.pace if runner.pace > 0 else 1.0
    if best.measured and runner.measured:
        pace = f"pace {ratio:.1f}×"
    else:
        pace = "pace taken as 1.0×: no finished run of this template measured in both pools"
    if gain < SWITCH_MARGIN_S:
        return f"placed in {best.pool}: predicted to finish about when {runner.pool} would ({pace})"
    return f"placed in {best.pool}: predicted to finish {hours_minutes(gain)} sooner than {runner.pool} ({pace})"


def _moved(job: QueuedJob, speed: PoolSpeed, base: PoolSpeed) -> QueuedJob:
    """The job as it would queue in `speed.pool`: its runtimes scaled by the pace there."""
    scale = base.pace / speed.pace if speed.pace > 0 else 1.0
    expected = None if job.expected_runtime is None else job.expected_runtime * scale
    return replace(job, pool=speed.pool, predicted_runtime=job.predicted_runtime * scale, expected_runtime=expected)


def _with(state: ClusterState, job: QueuedJob) -> ClusterState:
    return replace(state, queued=tuple(job if j.id == job.id else j for j in state.queued))


def _wait(state: ClusterState, job_id: str, lags: Lags, max_passes: int) -> float | None:
    estimate = queue_estimates(state, jobs=[job_id], lags=lags, ranges=False, max_passes=max_passes,
                               max_ahead=MAX_AHEAD).get(job_id)
    if estimate is None or estimate.start is None:
        return None
    return max(0.0, estimate.start - state.now)


def pools_choose(state: ClusterState, speeds: Mapping[str, Sequence[PoolSpeed]], *, lags: Lags = None,
                 max_passes: int = 400, only: Collection[str] | None = None) -> tuple[ClusterState, list[PoolChoice]]:
    """Each job of `speeds` (job id -> its acceptable pools, paces relative to its current pool)
    moved to the pool where it would finish first; earliest submitted first, each seeing the
    choices before it. Returns the state with the jobs moved and the choices."""
    jobs = sorted((j for j in state.queued if j.id in speeds and (only is None or j.id in only)),
                  key=lambda j: (j.submitted_at, j.id))
    choices: list[PoolChoice] = []
    for job in jobs:
        pool_speeds_ = speeds[job.id]
        base = next((s for s in pool_speeds_ if s.pool == job.pool), PoolSpeed(job.pool))
        options = []
        for speed in pool_speeds_:
            moved = _moved(job, speed, base)
            options.append(PoolOption(speed.pool, _wait(_with(state, moved), job.id, lags, max_passes),
                                      moved.expected_runtime or moved.predicted_runtime, speed.pace, speed.measured))
        choice = pool_choose(job.id, options, current=job.pool)
        chosen = next((s for s in pool_speeds_ if s.pool == choice.pool), base)
        state = _with(state, _moved(job, chosen, base))
        choices.append(choice)
    return state, choices
