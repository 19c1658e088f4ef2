"""Downsampling for charts: min/max/mean buckets that never lose a series' extremes.

Pure Python, no Django import: the read API feeds it rollup rows or raw points, and the tests
and benchmarks feed it plain lists. A bucket's min and max are exact aggregates of what went
into it, so merging buckets (never sampling them) keeps every spike; non-finite values are
counted per kind rather than folded into the finite aggregates.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

NAN_S, POS_INF_S, NEG_INF_S = "NaN", "Infinity", "-Infinity"


@dataclass(frozen=True, slots=True)
class Bucket:
    x_first: float
    x_last: float
    count: int
    finite_count: int
    sum: float
    min: float | None  # over finite values only
    max: float | None
    nan: int = 0
    posinf: int = 0
    neginf: int = 0
    last: float | None = None  # value at x_last when known (raw points); may be non-finite

    @property
    def mean(self) -> float:
        """Mean of the finite values; NaN when there are none, +-inf when only infinities."""
        if self.finite_count:
            return self.sum / self.finite_count
        if self.posinf and not self.neginf:
            return math.inf
        if self.neginf and not self.posinf:
            return -math.inf
        return math.nan

    @property
    def lo(self) -> float:
        """True minimum including infinities (NaN when the bucket holds only NaN)."""
        if self.neginf:
            return -math.inf
        if self.min is not None:
            return self.min
        return math.inf if self.posinf else math.nan

    @property
    def hi(self) -> float:
        if self.posinf:
            return math.inf
        if self.max is not None:
            return self.max
        return -math.inf if self.neginf else math.nan


def point_bucket(x: float, value: float) -> Bucket:
    """A bucket holding one raw point."""
    if math.isfinite(value):
        return Bucket(x, x, 1, 1, value, value, value, last=value)
    if math.isnan(value):
        return Bucket(x, x, 1, 0, 0.0, None, None, nan=1, last=value)
    if value > 0:
        return Bucket(x, x, 1, 0, 0.0, None, None, posinf=1, last=value)
    return Bucket(x, x, 1, 0, 0.0, None, None, neginf=1, last=value)


def _lo(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    if b is None:
        return a
    return a if a <= b else b


def _hi(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    if b is None:
        return a
    return a if a >= b else b


def merge(group: Sequence[Bucket]) -> Bucket:
    """One bucket holding everything in `group` (consecutive buckets, in x order)."""
    first = group[0]
    if len(group) == 1:
        return first
    lo: float | None = None
    hi: float | None = None
    count = finite = nan = posinf = neginf = 0
    total = 0.0
    for b in group:
        count += b.count
        finite += b.finite_count
        total += b.sum
        nan += b.nan
        posinf += b.posinf
        neginf += b.neginf
        lo = _lo(lo, b.min)
        hi = _hi(hi, b.max)
    return Bucket(first.x_first, group[-1].x_last, count, finite, total, lo, hi, nan, posinf, neginf, group[-1].last)


def downsample(buckets: Sequence[Bucket], max_points: int) -> list[Bucket]:
    """min(len(buckets), max_points) buckets, each merging a run of consecutive input buckets."""
    if max_points < 1:
        raise ValueError("max_points must be >= 1")
    n = len(buckets)
    if n <= max_points:
        return list(buckets)
    # Groups of n / max_points, split evenly: chunks of ceil(n / max_points) would turn 10
    # buckets asked down to 9 into 5.
    return [merge(buckets[k * n // max_points : (k + 1) * n // max_points]) for k in range(max_points)]


def downsample_points(xs: Sequence[float], values: Sequence[float], max_points: int) -> list[Bucket]:
    return downsample([point_bucket(x, v) for x, v in zip(xs, values, strict=True)], max_points)


def extremes(buckets: Iterable[Bucket]) -> tuple[float | None, float | None]:
    """The series' true (min, max), infinities included; (None, None) when there is nothing but NaN."""
    lo: float | None = None
    hi: float | None = None
    for b in buckets:
        if b.neginf:
            lo = -math.inf
        elif b.min is not None:
            lo = _lo(lo, b.min)
        elif b.posinf:
            lo = _lo(lo, math.inf)
        if b.posinf:
            hi = math.inf
        elif b.max is not None:
            hi = _hi(hi, b.max)
        elif b.neginf:
            hi = _hi(hi, -math.inf)
    return lo, hi


def ema(values: Sequence[float | None], weight: float) -> list[float | None]:
    """TensorBoard-style exponential smoothing with debiasing; non-finite values pass through."""
    if not 0 <= weight < 1:
        raise ValueError("weight must be in [0, 1)")
    out: list[float | None] = []
    acc = 0.0
    n = 0
    for v in values:
        if v is None or not math.isfinite(v):
            out.append(v)
            continue
        n += 1
        acc = acc * weight + (1 - weight) * v
        out.append(acc / (1 - weight**n) if weight else v)
    return out


def encode(value: float | None) -> float | str | None:
    """A JSON-safe value: non-finite floats become the wire strings."""
    if value is None:
        return None
    if math.isnan(value):
        return NAN_S
    if math.isinf(value):
        return POS_INF_S if value > 0 else NEG_INF_S
    return value


def decode(value: float | int | str) -> float:
    """The inverse of `encode` for a wire value; raises ValueError for anything else."""
    if isinstance(value, str):
        if value == NAN_S:
            return math.nan
        if value == POS_INF_S:
            return math.inf
        if value == NEG_INF_S:
            return -math.inf
        raise ValueError("not a number")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError("not a number")
    return float(value)
