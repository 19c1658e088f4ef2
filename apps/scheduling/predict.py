"""Runtime prediction from finished runs only, and from live progress when a run reports it.

A queued run is predicted from the recent finished runs most like it: same team, template
(job type), parameters and devices; when those are too few, the predictor widens step by step
(dropping parameters, then the device count, then the team) and finally falls back to the
template's maximum runtime. When the run's total steps are known, the first widening keeps the
team, template and devices and scales their pace to this run's steps: a run of 4,000 steps is
not predicted from the 300-step runs of the same template as if it were one. Where those runs
differ in length (by a factor of 2 or more), the pace is fitted as start-up plus seconds per step
(`affine_fit`), so short smoke tests, mostly start-up, do not make a long run look many times
longer; otherwise it is their seconds per step.

The point estimate is a quantile of that history (the median by default: durations are
heavy-tailed, so for one job a mean misleads), with a low/high quantile range. Alongside it
comes the mean over a longer window (`mean_s`): the right figure wherever many predictions are
summed, as in the fluid guess of a long queue's wait, where summing medians of a heavy-tailed
distribution underestimates the work ahead many times over. (A replay of the front of the line
ends each run at its median: which run frees devices first is a question about single runs.)

Hardware sets the pace: where a run names its pool and that pool has finished at least
`min_samples` runs of the same team, template and devices (same parameters, or scaled by steps),
those alone predict it, mean included. Otherwise history from every pool does. A run for a new
pool of faster GPUs is then not predicted at the old pool's pace once a few have finished there.

A running run is predicted from its progress (steps done, total steps, current rate) when it
reports them; otherwise from the same history conditioned on having already run `elapsed_s`
(a run that outlived most of its peers is probably one of the long ones).

Only runs that have finished feed the history; the run being predicted never does.
"""

from __future__ import annotations

import dataclasses
from bisect import bisect_right, insort
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

HistoryKey = tuple[str, ...]


@dataclass(frozen=True, slots=True)
class FinishedRun:
    team: str
    job_type: str
    devices: int
    runtime_s: float
    finished_at: float
    # Normalised parameters that change runtime (e.g. "epochs=10,batch=64"); "" if unknown.
    params_key: str = ""
    # Total optimizer steps the run was asked for (its template's steps parameter), if known.
    steps: float | None = None
    # The pool (hardware class) it ran on; "" when unknown or when there is only one.
    pool: str = ""


@dataclass(frozen=True, slots=True)
class Progress:
    steps_done: float
    total_steps: float
    steps_per_s: float


@dataclass(frozen=True, slots=True)
class RuntimeQuery:
    team: str
    job_type: str
    devices: int
    params_key: str = ""
    template_max_runtime_s: float | None = None
    steps: float | None = None
    pool: str = ""
    # For a running job: how long it has run so far, and its live progress if reported.
    elapsed_s: float = 0.0
    progress: Progress | None = None


@dataclass(frozen=True, slots=True)
class RuntimePrediction:
    """Predicted total runtime (from start), with a plausible range and what it rests on."""

    runtime_s: float
    low_s: float
    high_s: float
    basis: str
    samples: int = 0
    # Expected runtime (mean of the history, conditioned like the point estimate); None where
    # there is no history to average.
    mean_s: float | None = None

    @property
    def expected_s(self) -> float:
        """The figure to sum over many jobs: the mean when known, else the point estimate."""
        return self.runtime_s if self.mean_s is None else self.mean_s


def _quantile(sorted_values: list[float], q: float, start: int = 0) -> float:
    """Linear-interpolated quantile of sorted_values[start:] without copying it."""
    n = len(sorted_values) - start
    pos = q * (n - 1)
    lo = int(pos)
    hi = min(lo + 1, n - 1)
    frac = pos - lo
    return sorted_values[start + lo] * (1 - frac) + sorted_values[start + hi] * frac


class _Window:
    """Samples of one history key: the last `size` in sorted order (quantiles), and the last
    `mean_size` (at least `size`) in arrival order with their sum (means)."""

    __slots__ = ("arrival", "mean_size", "ordered", "size", "total")

    def __init__(self, size: int, mean_size: int) -> None:
        self.size = size
        self.mean_size = max(size, mean_size)
        self.arrival: deque[float] = deque()
        self.ordered: list[float] = []
        self.total = 0.0

    def add(self, value: float) -> None:
        self.arrival.append(value)
        self.total += value
        insort(self.ordered, value)
        if len(self.ordered) > self.size:
            # The sample leaving the quantile window is the one `size` places from the end.
            old = self.arrival[-self.size - 1]
            del self.ordered[bisect_right(self.ordered, old) - 1]
        if len(self.arrival) > self.mean_size:
            self.total -= self.arrival.popleft()

    def mean_beyond(self, elapsed: float) -> tuple[float, int]:
        """Mean and count of the samples longer than `elapsed` (all of them when it is 0)."""
        if elapsed <= 0:
            return self.total / len(self.arrival), len(self.arrival)
        longer = [v for v in self.arrival if v > elapsed]
        return (sum(longer) / len(longer), len(longer)) if longer else (elapsed, 0)


class RuntimePredictor:
    """Incremental predictor: `observe` each run as it finishes, `predict` any time."""

    LEVELS = ("team+type+params+devices", "team+type+devices", "team+type", "type+devices", "type")
    PER_STEP = "team+type+devices, per step"
    AFFINE = "team+type+devices, start-up + per step"

    def __init__(
        self,
        *,
        quantile: float = 0.5,
        low_quantile: float = 0.2,
        high_quantile: float = 0.8,
        window: int = 16,
        min_samples: int = 3,
        default_runtime_s: float = 3600.0,
        mean_window: int = 64,
        mean_min_samples: int = 16,
    ) -> None:
        self.quantile = quantile
        self.low_quantile = low_quantile
        self.high_quantile = high_quantile
        self.window = window
        self.min_samples = min_samples
        # A mean of a heavy-tailed history needs many more samples than a median to settle, so
        # it rests on a longer window and widens to a coarser level sooner.
        self.mean_window = mean_window
        self.mean_min_samples = mean_min_samples
        self.default_runtime_s = default_runtime_s
        self._history: dict[HistoryKey, _Window] = {}
        # (steps, seconds) of finished runs that said their total steps, by team+type+devices,
        # and the pace fitted to them (`_pace`), until the next run is observed.
        self._pairs: dict[HistoryKey, deque[tuple[float, float]]] = {}
        self._paces: dict[HistoryKey, tuple[str, float, float, _Window]] = {}
        self._cache: dict[tuple[str, ...], RuntimePrediction] = {}

    @staticmethod
    def _keys(team: str, job_type: str, devices: int, params_key: str, pool: str = "") -> tuple[HistoryKey, ...]:
        """History keys, narrowest first. With a pool, only the two narrowest (all that a pool's
        own search, `_from_history(..., narrow=True)`, reads), under a prefix of their own."""
        d = str(devices)
        if pool:
            return (("pool p", pool, team, job_type, params_key, d), ("pool d", pool, team, job_type, d))
        return (
            ("p", team, job_type, params_key, d),
            ("d", team, job_type, d),
            ("t", team, job_type),
            ("g", job_type, d),
            ("j", job_type),
        )

    def observe(self, run: FinishedRun) -> None:
        runtime = max(0.0, run.runtime_s)
        for pool in ("", run.pool) if run.pool else ("",):
            keys = self._keys(run.team, run.job_type, run.devices, run.params_key, pool)
            for key in keys:
                self._window(self._history, key).add(runtime)
            if run.steps is not None and run.steps > 0:
                self._pairs.setdefault(keys[1], deque(maxlen=self.mean_window)).append((run.steps, runtime))
        # Invalidate everything: cheap, and a finished run can change several cached answers.
        self._cache.clear()
        self._paces.clear()

    def _window(self, windows: dict[HistoryKey, _Window], key: HistoryKey) -> _Window:
        window = windows.get(key)
        if window is None:
            window = windows[key] = _Window(self.window, self.mean_window)
        return window

    def predict(self, query: RuntimeQuery) -> RuntimePrediction:
        if query.progress is not None and query.progress.steps_per_s > 0 and query.progress.total_steps > 0:
            return self._from_progress(query)
        if query.elapsed_s > 0:
            return self._predict(query, query.elapsed_s)
        cache_key = (query.team, query.job_type, str(query.devices), query.params_key, query.pool,
                     str(query.template_max_runtime_s), str(query.steps))
        hit = self._cache.get(cache_key)
        if hit is None:
            hit = self._cache[cache_key] = self._predict(query, 0.0)
        return hit

    def _predict(self, query: RuntimeQuery, elapsed: float) -> RuntimePrediction:
        if query.pool:
            local = self._from_history(
                self._keys(query.team, query.job_type, query.devices, query.params_key, query.pool), query, elapsed,
                narrow=True)
            if local is not None:
                return dataclasses.replace(local, basis=f"{local.basis} on pool {query.pool}")
        found = self._from_history(self._keys(query.team, query.job_type, query.devices, query.params_key), query, elapsed)
        assert found is not None  # only a narrow search comes back empty-handed
        return found

    def _from_progress(self, query: RuntimeQuery) -> RuntimePrediction:
        assert query.progress is not None
        p = query.progress
        remaining = max(0.0, p.total_steps - p.steps_done) / p.steps_per_s
        runtime = query.elapsed_s + remaining
        if query.template_max_runtime_s is not None:
            runtime = min(runtime, max(query.template_max_runtime_s, query.elapsed_s))
        # Rates drift (evaluation passes, contention); a +-20% band on what is left is honest.
        return RuntimePrediction(
            runtime_s=runtime,
            low_s=query.elapsed_s + 0.8 * remaining,
            high_s=query.elapsed_s + 1.2 * remaining,
            basis="live progress",
        )

    def _levels(self, keys: tuple[HistoryKey, ...], query: RuntimeQuery) -> list[tuple[str, _Window, float]]:
        """The history windows to try, narrowest first, each with its name and the factor that
        turns its samples into seconds (1, or this run's steps for a per-step window).

        Where this run's steps can be scaled from its peers' pace, the coarser levels are left
        out: they mix runs of any length and would put it back among them (for the mean too,
        which wants more samples than the per-step window may have yet)."""
        levels: list[tuple[str, _Window, float]] = []
        for name, key in zip(self.LEVELS[: len(keys)], keys, strict=True):
            window = self._history.get(key)
            if window is not None:
                levels.append((name, window, 1.0))
            if name == self.LEVELS[0] and query.steps is not None and query.steps > 0 and keys[1] in self._pairs:
                level, startup, pace, ratios = self._pace(keys[1])
                levels.append((level, ratios, startup + pace * query.steps))
                return levels
        return levels

    def _pace(self, key: HistoryKey) -> tuple[str, float, float, _Window]:
        """The level name, start-up seconds and seconds per step for this key's runs, with each
        run's runtime as a ratio to that line (the spread, as a window).

        Fitted as start-up + pace x steps (`affine_fit`) from at least `min_samples` runs spanning
        a factor of 2 in steps; otherwise plain seconds per step (start-up 0, pace 1, so the
        ratios are the runs' seconds per step). That alone is right only for runs much longer
        than their start-up: scaled from short smoke tests, it predicts a long run many times too long."""
        found = self._paces.get(key)
        if found is None:
            pairs = self._pairs[key]
            line = affine_fit([x for x, _ in pairs], [y for _, y in pairs]) if len(pairs) >= self.min_samples else None
            level, (startup, pace) = (self.AFFINE, line) if line is not None else (self.PER_STEP, (0.0, 1.0))
            ratios = _Window(self.window, self.mean_window)
            for steps, seconds in pairs:
                ratios.add(seconds / (startup + pace * steps))
            found = self._paces[key] = (level, startup, pace, ratios)
        return found

    def _from_history(
        self, keys: tuple[HistoryKey, ...], query: RuntimeQuery, elapsed: float, *, narrow: bool = False
    ) -> RuntimePrediction | None:
        """The prediction from these keys' history. `narrow` (one pool's keys): only from a level
        with `min_samples` peers, and None when there is none, so the caller can widen to every pool."""
        cap = query.template_max_runtime_s
        levels = self._levels(keys, query)
        if narrow:
            levels = [level for level in levels if len(level[1].ordered) >= self.min_samples]
            if not levels:
                return None
        mean = self._mean(levels, elapsed)
        if mean is not None and cap is not None:
            mean = min(mean, max(cap, elapsed))
        fallback: tuple[str, _Window, float, int] | None = None
        for name, window, scale in levels:
            # Condition on survival: only peers that ran longer than this run already has.
            start = bisect_right(window.ordered, elapsed / scale) if elapsed > 0 else 0
            count = len(window.ordered) - start
            if count >= self.min_samples:
                return self._summarise(window, start, name, scale, cap, elapsed, mean)
            if count > 0 and fallback is None:
                fallback = (name, window, scale, start)
        if narrow:
            return None
        if fallback is not None:
            name, window, scale, start = fallback
            return self._summarise(window, start, name, scale, cap, elapsed, mean)
        if cap is not None and cap > elapsed:
            return RuntimePrediction(
                runtime_s=cap, low_s=max(elapsed, cap * 0.1), high_s=cap, basis="template maximum", mean_s=mean
            )
        # Nothing to go on, or it outlived every peer: heavy tails say it is about half done.
        runtime = max(self.default_runtime_s, 2.0 * elapsed)
        return RuntimePrediction(
            runtime_s=runtime,
            low_s=max(elapsed, runtime * 0.5),
            high_s=runtime * 2.0,
            basis="no history",
            mean_s=None if mean is None else max(mean, elapsed),
        )

    def _mean(self, levels: list[tuple[str, _Window, float]], elapsed: float) -> float | None:
        """Mean runtime of the narrowest level with `mean_min_samples` peers that outlived
        `elapsed`, else of the level with the most such peers; None without any."""
        best: tuple[int, float] | None = None
        for _, window, scale in levels:
            mean, count = window.mean_beyond(elapsed / scale)
            mean *= scale
            if count >= self.mean_min_samples:
                return mean
            if count > 0 and (best is None or count > best[0]):
                best = (count, mean)
        return None if best is None else best[1]

    def _summarise(
        self, window: _Window, start: int, level: str, scale: float, cap: float | None, elapsed: float,
        mean: float | None,
    ) -> RuntimePrediction:
        values = window.ordered
        point = _quantile(values, self.quantile, start) * scale
        low = _quantile(values, self.low_quantile, start) * scale
        high = _quantile(values, self.high_quantile, start) * scale
        if cap is not None:
            point, low, high = (min(v, max(cap, elapsed)) for v in (point, low, high))
        return RuntimePrediction(
            runtime_s=max(point, elapsed),
            low_s=max(low, elapsed),
            high_s=max(high, point, elapsed),
            basis=f"history: {level}",
            samples=len(values) - start,
            mean_s=None if mean is None else max(mean, elapsed),
        )


def affine_fit(steps: Sequence[float], seconds: Sequence[float]) -> tuple[float, float] | None:
    """(start-up, seconds per step) minimising the relative error of seconds ~ start-up + pace x
    steps, both at least 0; None unless the steps span a factor of 2 and the pace is positive.

    Relative error, so that a few long runs do not swamp the short ones that fix the start-up."""
    if not steps or min(steps) <= 0 or max(steps) < 2 * min(steps) or min(seconds) <= 0:
        return None
    weights = [1.0 / (y * y) for y in seconds]
    sw = sum(weights)
    sx = sum(w * x for w, x in zip(weights, steps, strict=True))
    sy = sum(w * y for w, y in zip(weights, seconds, strict=True))
    sxx = sum(w * x * x for w, x in zip(weights, steps, strict=True))
    sxy = sum(w * x * y for w, x, y in zip(weights, steps, seconds, strict=True))
    det = sw * sxx - sx * sx
    if det <= 0:
        return None
    pace = (sw * sxy - sx * sy) / det
    startup = (sy - pace * sx) / sw
    if startup < 0:  # no measurable start-up: seconds per step through the origin
        startup, pace = 0.0, sxy / sxx
    return (startup, pace) if pace > 0 else None


def predict_runtime(history: Iterable[FinishedRun], query: RuntimeQuery, *, now: float) -> RuntimePrediction:
    """One-shot prediction from a list of runs (e.g. loaded from the database).

    Runs that had not finished by `now` are ignored, so replaying the past never peeks ahead.
    """
    predictor = RuntimePredictor()
    for run in sorted(history, key=lambda r: r.finished_at):
        if run.finished_at <= now:
            predictor.observe(run)
    return predictor.predict(query)
