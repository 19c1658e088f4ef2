"""Which rollup level a chart reads (issue 33): the comparison's long series, viewed at a few
hundred points, read a coarse level, not level 0, and keep their spikes; a series steps down to a
finer level to fill max_points only within its share of FILL_ROWS, so a request reads at most
2 x max_points rows a series plus FILL_ROWS."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from hypothesis import given
from hypothesis import strategies as st

from apps.runs.models import RunStatus
from apps.tracking.models import LEVELS, MetricSummary
from apps.tracking.selectors import FILL_ROWS, SeriesQuery, _pick_level, metric_series, metric_summaries
from apps.tracking.services import metric_points_store
from tests.tracking.conftest import make_run


def _summary(first: int, last: int) -> MetricSummary:
    """A dense series' summary (one point a step), unsaved: the level choice reads nothing else."""
    return MetricSummary(key="loss", first_step=first, last_step=last, count=last - first + 1,
                         first_wall=1000.0 + first, last_wall=1000.0 + last)


def _rows_read(s: MetricSummary, level: int | None) -> float:
    span = s.last_step - s.first_step + 1
    return span if level is None else span / LEVELS[level] + 1


def test_the_benchs_comparison_reads_level_1() -> None:
    """20 runs x 3 keys of 100,000 steps (bench/compare.py): each series' share of FILL_ROWS is
    100 rows, far below level 0's 1,563, so level 1's 98 buckets it is."""
    s = _summary(0, 99_999)
    for max_points in (200, 400):  # the compare API's default, and what the compare page asks
        for x in ("step", "time"):
            assert _pick_level(s, SeriesQuery(max_points=max_points, x=x), fill_rows=FILL_ROWS / 60) == 1, (max_points, x)


def test_a_long_series_alone_fills_its_chart_from_level_0() -> None:
    assert _pick_level(_summary(0, 99_999), SeriesQuery(max_points=200)) == 0  # 1,563 rows of the 6,000


@given(last=st.integers(0, 5_000_000), max_points=st.integers(1, 5000), series=st.integers(1, 1000))
def test_no_series_reads_more_than_its_budget_or_its_share(last: int, max_points: int, series: int) -> None:
    s = _summary(0, last)
    level = _pick_level(s, SeriesQuery(max_points=max_points), fill_rows=FILL_ROWS / series)
    coarsest = level == len(LEVELS) - 1  # even the coarsest level is over budget: it is read anyway
    assert coarsest or _rows_read(s, level) <= max(2 * max_points, FILL_ROWS / series), (level, _rows_read(s, level))


def test_the_compare_api_reads_level_1_for_long_runs_and_keeps_their_spikes(cast: Any) -> None:
    """Two runs x two keys of 100,000 steps at the API's 200 points: a share of 1,500 rows each,
    under level 0's 1,563."""
    runs = [make_run(cast.digits, name=f"r{i}", status=RunStatus.SUCCEEDED) for i in range(2)]
    for i, run in enumerate(runs):
        rows = [(key, s, 1.0 / (s + 1), 0, 1_700_000_000.0 + s) for s in range(100_000) for key in ("acc", "loss")]
        spike = 10_000 * (i + 1)
        rows[2 * spike] = ("acc", spike, -5.0 - i, 0, 1_700_000_000.0 + spike)
        rows[2 * spike + 1] = ("loss", spike, 99.0 + i, 0, 1_700_000_000.0 + spike)
        with transaction.atomic():
            metric_points_store(run_id=run.pk, attempt=1, rows=rows)
    data = cast.client(cast.alice).get(f"/api/v1/compare/?runs={runs[0].pk},{runs[1].pk}").json()
    every = data["series"]["loss"] + data["series"]["acc"]
    assert [(x["level"], x["bucket_steps"], len(x["x"])) for x in every] == [(1, LEVELS[1], 98)] * 4
    assert [(x["true_max"], max(x["max"])) for x in data["series"]["loss"]] == [(99.0, 99.0), (100.0, 100.0)]
    assert [(x["true_min"], min(x["min"])) for x in data["series"]["acc"]] == [(-5.0, -5.0), (-6.0, -6.0)]


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
