"""Which rollup level a chart reads (issue 33): a long series viewed at a few hundred points reads a
coarse level, not level 0, and keeps its spikes; only a short series steps down to a finer level
to fill max_points, so no series reads more than max(2 x max_points, SHORT_SERIES_ROWS) rows."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from hypothesis import given
from hypothesis import strategies as st

from apps.runs.models import RunStatus
from apps.tracking.models import LEVELS, MetricSummary
from apps.tracking.selectors import SHORT_SERIES_ROWS, SeriesQuery, _pick_level, metric_series, metric_summaries
from apps.tracking.services import metric_points_store
from tests.tracking.conftest import make_run


def _summary(first: int, last: int) -> MetricSummary:
    """A dense series' summary (one point a step), unsaved: the level choice reads nothing else."""
    return MetricSummary(key="loss", first_step=first, last_step=last, count=last - first + 1,
                         first_wall=1000.0 + first, last_wall=1000.0 + last)


def _rows_read(s: MetricSummary, level: int | None) -> float:
    span = s.last_step - s.first_step + 1
    return span if level is None else span / LEVELS[level] + 1


def test_a_long_series_at_200_or_400_points_reads_level_1() -> None:
    s = _summary(0, 99_999)
    for max_points in (200, 400):  # the compare API's default, and what the compare page asks
        for x in ("step", "time"):
            assert _pick_level(s, SeriesQuery(max_points=max_points, x=x)) == 1, (max_points, x)


@given(last=st.integers(0, 5_000_000), max_points=st.integers(1, 5000))
def test_no_series_reads_more_than_its_budget_or_a_short_series(last: int, max_points: int) -> None:
    s = _summary(0, last)
    level = _pick_level(s, SeriesQuery(max_points=max_points))
    coarsest = level == len(LEVELS) - 1  # even the coarsest level is over budget: it is read anyway
    assert coarsest or _rows_read(s, level) <= max(2 * max_points, SHORT_SERIES_ROWS), (level, _rows_read(s, level))


def test_a_long_series_at_200_points_keeps_its_spikes(cast: Any) -> None:
    run = make_run(cast.digits)
    rows = [("loss", s, 1.0 / (s + 1), 0, 1_700_000_000.0 + s) for s in range(100_000)]
    rows[77_777] = ("loss", 77_777, 1e6, 0, 1_700_000_000.0 + 77_777)
    rows[3_333] = ("loss", 3_333, -5.0, 0, 1_700_000_000.0 + 3_333)
    with transaction.atomic():
        metric_points_store(run_id=run.pk, attempt=1, rows=rows)
    summary = metric_summaries(run_ids=[run.pk])[run.pk]["loss"]
    s = metric_series(run_id=run.pk, summary=summary, key="loss", q=SeriesQuery(max_points=200))
    assert (s["level"], s["bucket_steps"], len(s["x"])) == (1, LEVELS[1], 98)
    assert (s["true_min"], s["true_max"]) == (-5.0, 1e6)
    assert max(s["max"]) == 1e6 and min(s["min"]) == -5.0


def test_the_compare_api_reads_level_1_for_long_runs(cast: Any) -> None:
    runs = [make_run(cast.digits, name=f"r{i}", status=RunStatus.SUCCEEDED) for i in range(2)]
    for i, run in enumerate(runs):
        rows = [("loss", s, 1.0, 0, 1_700_000_000.0 + s) for s in range(100_000)]
        rows[10_000 * (i + 1)] = ("loss", 10_000 * (i + 1), 99.0 + i, 0, 1_700_000_000.0 + 10_000 * (i + 1))
        with transaction.atomic():
            metric_points_store(run_id=run.pk, attempt=1, rows=rows)
    data = cast.client(cast.alice).get(f"/api/v1/compare/?runs={runs[0].pk},{runs[1].pk}").json()
    series = data["series"]["loss"]
    assert [(x["level"], len(x["x"])) for x in series] == [(1, 98), (1, 98)]
    assert [(x["true_max"], max(x["max"])) for x in series] == [(99.0, 99.0), (100.0, 100.0)]


def test_a_short_series_still_fills_few_points_from_a_finer_level(cast: Any) -> None:
    """What 5f586a4 fixed stays fixed: 30,000 steps at 200 points read level 0 (469 rows) rather
    than level 1's 30 buckets."""
    run = make_run(cast.digits)
    with transaction.atomic():
        metric_points_store(run_id=run.pk, attempt=1, rows=[("loss", s, float(s % 97), 0, 1000.0 + s) for s in range(30_000)])
    summary = metric_summaries(run_ids=[run.pk])[run.pk]["loss"]
    s = metric_series(run_id=run.pk, summary=summary, key="loss", q=SeriesQuery(max_points=200))
    assert (s["level"], len(s["x"])) == (0, 200)
    assert (s["true_min"], s["true_max"]) == (0.0, 96.0)
