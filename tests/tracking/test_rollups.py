"""Acceptance 2 (stored part): summaries and rollups equal a recomputation from raw points after
arbitrary insert/replace sequences, on SQLite and PostgreSQL; chart reads use them."""

from __future__ import annotations

import math
from typing import Any

import pytest
from django.db import transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apps.tracking.models import LEVELS, MetricPoint, MetricRollup, MetricSummary
from apps.tracking.selectors import SeriesQuery, metric_series, metric_summaries
from apps.tracking.services import metric_points_store
from tests.tracking.conftest import make_run

NONFINITE = {"NaN": (None, 1), "Infinity": (None, 2), "-Infinity": (None, 3)}
value_st = st.one_of(st.floats(-1e3, 1e3), st.sampled_from(["NaN", "Infinity", "-Infinity"]))
step_st = st.one_of(st.integers(0, 200), st.integers(0, 40_000))
batch_st = st.lists(st.tuples(st.sampled_from(["loss", "acc"]), step_st, value_st), min_size=1, max_size=60)


def _rows(batch: list[tuple[str, int, Any]], t: float) -> list[tuple[str, int, float | None, int, float]]:
    out = []
    for i, (key, step, value) in enumerate(batch):
        v, f = NONFINITE[value] if isinstance(value, str) else (float(value), 0)
        out.append((key, step, v, f, t + i))
    return out


def _expected(points: list[tuple[int, float | None, int, float]]) -> dict[str, Any]:
    finite = [float(v) for _, v, f, _ in points if f == 0 and v is not None]
    return {
        "count": len(points), "finite_count": len(finite), "sum": sum(finite) if finite else 0.0,
        "min": min(finite) if finite else None, "max": max(finite) if finite else None,
        "nan_count": sum(1 for p in points if p[2] == 1), "posinf_count": sum(1 for p in points if p[2] == 2),
        "neginf_count": sum(1 for p in points if p[2] == 3), "first_step": min(p[0] for p in points),
        "last_step": max(p[0] for p in points), "first_wall": min(p[3] for p in points), "last_wall": max(p[3] for p in points),
    }


def _check(agg: Any, exp: dict[str, Any], where: str) -> None:
    for name, want in exp.items():
        got = getattr(agg, name)
        if name == "sum":
            assert math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-6), (where, name, got, want)
        else:
            assert got == want, (where, name, got, want)


def assert_rollups_match_raw(run_id: int) -> None:
    raw: dict[str, list[tuple[int, float | None, int, float]]] = {}
    for key, step, value, flag, wall in MetricPoint.objects.filter(run_id=run_id).values_list("key", "step", "value", "flag", "wall_time"):
        raw.setdefault(key, []).append((step, value, flag, wall))
    summaries = metric_summaries(run_ids=[run_id])[run_id]
    assert set(summaries) == set(raw)
    for key, points in raw.items():
        s = summaries[key]
        _check(s, _expected(points), f"summary {key}")
        by_step = {p[0]: p for p in points}
        first, last = by_step[min(by_step)], by_step[max(by_step)]
        assert (s.first_value, s.first_flag, s.last_value, s.last_flag, s.last_step_wall) == (first[1], first[2], last[1], last[2], last[3])
        for level, size in enumerate(LEVELS):
            groups: dict[int, list[Any]] = {}
            for p in points:
                groups.setdefault(p[0] // size, []).append(p)
            stored = {r.bucket: r for r in MetricRollup.objects.filter(run_id=run_id, key=key, level=level)}
            assert set(stored) == set(groups), (key, level)
            for bucket, pts in groups.items():
                _check(stored[bucket], _expected(pts), f"{key} L{level}#{bucket}")


@pytest.mark.django_db
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(batches=st.lists(batch_st, min_size=1, max_size=5))
def test_rollups_equal_recomputation_after_inserts_and_replaces(cast: Any, batches: list[list[Any]]) -> None:
    run = make_run(cast.digits)
    for attempt, batch in enumerate(batches, start=1):
        with transaction.atomic():
            metric_points_store(run_id=run.pk, attempt=attempt, rows=_rows(batch, 1000.0 * attempt))
    assert_rollups_match_raw(run.pk)


def test_replay_changes_nothing_and_replace_lowers_max(cast: Any) -> None:
    run = make_run(cast.digits)
    rows = [("loss", s, float(s), 0, 10.0 + s) for s in range(3000)]
    with transaction.atomic():
        metric_points_store(run_id=run.pk, attempt=1, rows=rows)
    with transaction.atomic():
        metric_points_store(run_id=run.pk, attempt=1, rows=rows)
    assert_rollups_match_raw(run.pk)
    # A resumed attempt re-logs the top steps with small values: the max must come down.
    with transaction.atomic():
        metric_points_store(run_id=run.pk, attempt=2, rows=[("loss", s, 0.5, 0, 99_999.0) for s in range(2000, 3000)])
    assert_rollups_match_raw(run.pk)
    assert MetricSummary.objects.get(run=run, key="loss").max == 1999.0


def test_series_reads_rollups_and_keeps_the_spike(cast: Any) -> None:
    run = make_run(cast.digits)
    rows = [("loss", s, 1.0, 0, 1000.0 + s) for s in range(100_000)]
    rows[54_321] = ("loss", 54_321, 1e9, 0, 1000.0 + 54_321)
    rows[12_345] = ("loss", 12_345, -7.0, 0, 1000.0 + 12_345)
    with transaction.atomic():
        metric_points_store(run_id=run.pk, attempt=1, rows=rows)
    summary = metric_summaries(run_ids=[run.pk])[run.pk]["loss"]
    for q in (SeriesQuery(max_points=500), SeriesQuery(max_points=40), SeriesQuery(max_points=200, x="time")):
        s = metric_series(run_id=run.pk, summary=summary, key="loss", q=q)
        assert s["level"] != "raw" and len(s["x"]) <= q.max_points
        assert (s["true_min"], s["true_max"]) == (-7.0, 1e9)
        assert max(s["max"]) == 1e9 and min(s["min"]) == -7.0
    window = metric_series(run_id=run.pk, summary=summary, key="loss", q=SeriesQuery(max_points=500, start=54_000, end=54_400))
    assert window["level"] == "raw" and len(window["x"]) == 401 and window["true_max"] == 1e9


@pytest.mark.django_db
def test_few_points_asked_of_a_short_series_are_not_one_coarse_bucket(cast: Any) -> None:
    run = make_run(cast.digits)
    with transaction.atomic():
        metric_points_store(run_id=run.pk, attempt=1, rows=[("loss", s, 600.0 - s, 0, 1000.0 + s) for s in range(1, 601)])
    summary = metric_summaries(run_ids=[run.pk])[run.pk]["loss"]
    for max_points in (2, 5, 9, 20, 300):
        s = metric_series(run_id=run.pk, summary=summary, key="loss", q=SeriesQuery(max_points=max_points))
        assert len(s["x"]) == max_points, (max_points, s["level"], s["x"])
        assert (s["true_min"], s["true_max"]) == (0.0, 599.0) and s["x"][-1] == 600
