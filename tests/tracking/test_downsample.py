"""Acceptance 2 (pure part): downsampling keeps the true min and max, whatever the data."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from apps.tracking.downsample import decode, downsample, downsample_points, ema, encode, extremes, point_bucket

values = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.floats(-1e6, 1e6))


def true_extremes(vals: list[float]) -> tuple[float | None, float | None]:
    real = [v for v in vals if not math.isnan(v)]
    return (min(real), max(real)) if real else (None, None)


@settings(max_examples=300, deadline=None)
@given(vals=st.lists(values, min_size=1, max_size=400), max_points=st.integers(1, 60))
def test_extremes_survive_downsampling(vals: list[float], max_points: int) -> None:
    buckets = downsample_points(list(range(len(vals))), vals, max_points)
    assert len(buckets) <= max_points
    assert sum(b.count for b in buckets) == len(vals)
    assert extremes(buckets) == true_extremes(vals)
    # Every bucket's band covers its own points, so the spike is visible where it happened.
    lo_all = [b.lo for b in buckets if not math.isnan(b.lo)]
    hi_all = [b.hi for b in buckets if not math.isnan(b.hi)]
    lo, hi = true_extremes(vals)
    if lo is not None:
        assert min(lo_all) == lo and max(hi_all) == hi


@settings(max_examples=100, deadline=None)
@given(vals=st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=300), first=st.integers(1, 50), second=st.integers(1, 50))
def test_merging_twice_equals_merging_once_on_extremes_and_sums(vals: list[float], first: int, second: int) -> None:
    once = downsample_points(list(range(len(vals))), vals, second)
    twice = downsample(downsample_points(list(range(len(vals))), vals, first), second)
    assert extremes(once) == extremes(twice)
    assert math.isclose(sum(b.sum for b in once), sum(b.sum for b in twice), rel_tol=1e-9, abs_tol=1e-6)


def test_a_single_spike_is_never_sampled_away() -> None:
    vals = [1.0] * 100_000
    vals[77_777] = 1e9
    buckets = downsample_points(list(range(len(vals))), vals, 50)
    assert len(buckets) == 50
    assert max(b.hi for b in buckets) == 1e9
    assert [b for b in buckets if b.hi == 1e9][0].x_first <= 77_777 <= [b for b in buckets if b.hi == 1e9][0].x_last


def test_mean_of_non_finite_buckets() -> None:
    assert math.isnan(point_bucket(0, math.nan).mean)
    assert point_bucket(0, math.inf).mean == math.inf
    assert point_bucket(0, -math.inf).lo == -math.inf


def test_wire_encoding_round_trips() -> None:
    for v in (1.5, math.inf, -math.inf):
        assert decode(encode(v)) == v  # type: ignore[arg-type]
    assert math.isnan(decode(encode(math.nan)))  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        decode("abc")
    with pytest.raises(ValueError):
        decode(True)


def test_ema_debiased_and_passes_non_finite_through() -> None:
    assert ema([2.0, 2.0, 2.0], 0.9) == pytest.approx([2.0, 2.0, 2.0])
    out = ema([1.0, math.nan, 3.0], 0.5)
    second = out[1]
    assert out[0] == 1.0 and second is not None and math.isnan(second)
    assert out[2] == pytest.approx((0.5 * 0.5 * 1 + 0.5 * 3) / 0.75)
