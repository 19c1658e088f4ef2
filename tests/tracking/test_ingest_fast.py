"""The fast ingestion path keeps the exact semantics of the simple one: the column-wise
validator accepts and rejects what the point-by-point one does; the PostgreSQL append path
(plain insert, merged rollups) and its replace path (upsert, recomputed rollups) both leave
rollups and summaries equal to a recomputation from raw points; points go with their run."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pytest
from django.db import transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apps.core.errors import FieldError
from apps.tracking.models import MetricPoint, MetricRollup, MetricSummary
from apps.tracking.services import PointColumns, _validate_each, metric_points_store, metric_points_validate
from tests.tracking.conftest import Reporting, make_run
from tests.tracking.test_rollups import assert_rollups_match_raw

T = 1_700_000_000.0

any_value = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False), st.integers(-(2**1100), 2**1100), st.booleans(), st.none(),
    st.sampled_from(["NaN", "Infinity", "-Infinity", "nan", "", "1.5"]), st.lists(st.integers(), max_size=2),
)
any_key = st.one_of(st.sampled_from(["loss", "acc", "train/loss", "a.b-c_d"]), st.text(max_size=6), st.integers(), st.none(),
                    st.just("k" * 251), st.lists(st.text(max_size=2), max_size=1))
any_step = st.one_of(st.integers(0, 2**62), st.integers(-5, 2**63), st.booleans(), st.floats(0, 10), st.text(max_size=2))
point_st = st.one_of(
    st.lists(st.one_of(any_key, any_step, any_value), min_size=0, max_size=5),
    st.tuples(any_key, any_step, any_value, any_value).map(list),
    st.tuples(st.sampled_from(["loss", "acc"]), st.integers(0, 10**6), st.floats(-1e6, 1e6) | st.sampled_from(["NaN", "Infinity"]),
              st.floats(0, 2e9) | st.integers(0, 2**40)).map(list),
)


def _columns(c: PointColumns) -> tuple[list[Any], ...]:
    return tuple(list(col) for col in (c.keys, c.steps, c.values, c.flags, c.walls))


@settings(max_examples=300, deadline=None)
@given(points=st.lists(point_st, max_size=8))
def test_column_validator_agrees_with_point_by_point(points: list[Any]) -> None:
    try:
        slow = PointColumns.from_rows(_validate_each(points))
    except FieldError as exc:
        with pytest.raises(FieldError) as fast_exc:
            metric_points_validate(points=points)
        # Same first culprit, same words: the fast path defers to the slow one to name it.
        assert str(fast_exc.value) == str(exc)
        return
    fast = metric_points_validate(points=points)
    assert _columns(fast) == _columns(slow)
    assert all(type(v) is float for v in fast.values if v is not None)
    assert all(type(w) is float for w in fast.walls)


@pytest.mark.parametrize("raw, needle", [
    (b'{"attempt_id": 1, "attempt": 1, "points": [["loss", 1, 1e999, 1]]}', "points[0]: value is out of the float range"),
    (b'{"attempt_id": 1, "attempt": 1, "points": [["loss", 1, 1.0, 1], ["loss", 2, 1.0, -1e999]]}', "points[1]: wall_time"),
    (b'{"attempt_id": 1, "attempt": 1, "points": [["loss", 1, null, 1]]}', "points[0]: value must be a number"),
    (b'{"attempt_id": 1, "attempt": 1, "points": [["loss", 1, 1.0, 1], ["loss", 2, 1.0, 1, 5]]}', "points[1]: must be"),
    (b'{"attempt_id": 1, "attempt": 1, "points": [["loss", 4611686018427387905, 1.0, 1]]}', "points[0]: step must be"),
])
def test_overflowing_and_malformed_json_numbers_are_400(reporting: Reporting, raw: bytes, needle: str) -> None:
    resp = reporting.post(None, raw=raw.replace(b'"attempt_id": 1', f'"attempt_id": {reporting.attempt.pk}'.encode()))
    assert resp.status_code == 400, resp.content
    assert needle in resp.json()["error"]["message"]
    assert not MetricPoint.objects.filter(run=reporting.run).exists()


def test_integers_and_mixed_values_are_accepted(reporting: Reporting) -> None:
    resp = reporting.post(reporting.batch([["loss", 0, 1, 1_700_000_000], ["loss", 1, 2.5, T + 1], ["loss", 2, "NaN", T + 2],
                                           ["acc", 0, 0, T]]))
    assert resp.status_code == 200 and resp.json() == {"accepted": 4}
    got = dict(MetricPoint.objects.filter(run=reporting.run, key="loss").values_list("step", "value"))
    assert got == {0: 1.0, 1: 2.5, 2: None}
    assert_rollups_match_raw(reporting.run.pk)


def _store(run_id: int, attempt: int, rows: Sequence[tuple[str, int, float | None, int, float]]) -> None:
    with transaction.atomic():
        metric_points_store(run_id=run_id, attempt=attempt, rows=rows)


def test_appends_across_bucket_boundaries_merge_exactly(cast: Any) -> None:
    """Training's shape: each batch continues where the last stopped, so the bucket at the seam
    (and every level above it) is merged with what is stored, never recomputed."""
    run = make_run(cast.digits)
    step = 0
    for size in (1, 63, 2, 1000, 64, 5000, 17000, 3):
        rows = []
        for s in range(step, step + size):
            value, flag = (float(math.sin(s) * s), 0) if s % 997 else (None, 1 + (s // 997) % 3)
            rows += [("loss", s, value, flag, T + s), ("acc", s * 2, float(s % 50), 0, T + s)]
        _store(run.pk, 1, rows)
        step += size
        assert_rollups_match_raw(run.pk)
    summary = MetricSummary.objects.get(run=run, key="loss")
    assert (summary.first_step, summary.last_step, summary.count) == (0, step - 1, step)
    assert summary.last_step_wall == T + step - 1
    # A NaN as the newest point is the summary's last value.
    _store(run.pk, 1, [("loss", step + 5, None, 1, T + 1e6)])
    summary.refresh_from_db()
    assert (summary.last_value, summary.last_flag, summary.last_step) == (None, 1, step + 5)
    assert_rollups_match_raw(run.pk)


def test_replace_after_appends_and_new_key_mid_run(cast: Any) -> None:
    run = make_run(cast.digits)
    _store(run.pk, 1, [("loss", s, float(s), 0, T + s) for s in range(5000)])
    # A resumed attempt goes back to step 4000: not an append, so the replace path recomputes.
    _store(run.pk, 2, [("loss", s, -1.0, 0, T + 10_000 + s) for s in range(4000, 4100)] + [("lr", 4000, 0.1, 0, T)])
    assert_rollups_match_raw(run.pk)
    assert MetricSummary.objects.get(run=run, key="loss").min == -1.0
    # ...and the next batch, beyond every stored step, is an append again.
    _store(run.pk, 2, [("loss", s, 2.0, 0, T + 20_000 + s) for s in range(5000, 5100)] + [("lr", 4001, 0.2, 0, T + 1)])
    assert_rollups_match_raw(run.pk)
    assert MetricPoint.objects.filter(run=run, attempt=2).count() == 202


def test_several_stores_in_one_transaction(cast: Any) -> None:
    runs = [make_run(cast.digits) for _ in range(2)]
    with transaction.atomic():
        for run in runs:
            metric_points_store(run_id=run.pk, attempt=1, rows=[("loss", s, float(s), 0, T + s) for s in range(300)])
        metric_points_store(run_id=runs[0].pk, attempt=1, rows=[("loss", s, 1.0, 0, T) for s in range(100, 400)])
    for run in runs:
        assert_rollups_match_raw(run.pk)
    assert MetricPoint.objects.filter(run=runs[1]).count() == 300


@pytest.mark.django_db
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(batches=st.lists(st.tuples(st.integers(0, 3000), st.integers(1, 300), st.sampled_from(["loss", "acc"]), st.booleans()),
                        min_size=1, max_size=6))
def test_append_and_replace_sequences(cast: Any, batches: list[tuple[int, int, str, bool]]) -> None:
    """Runs of consecutive steps starting anywhere: some are appends, some overlap what is
    stored; either way the stored aggregates equal a recomputation."""
    run = make_run(cast.digits)
    for attempt, (start, length, key, nonfinite) in enumerate(batches, start=1):
        rows = [(key, s, None if nonfinite and s % 7 == 0 else float(s * attempt % 13), 1 if nonfinite and s % 7 == 0 else 0,
                 T + attempt * 1000 + s) for s in range(start, start + length)]
        _store(run.pk, attempt, rows)
    assert_rollups_match_raw(run.pk)


def test_deleting_a_run_deletes_its_metrics(cast: Any) -> None:
    run, other = make_run(cast.digits), make_run(cast.digits)
    for r in (run, other):
        _store(r.pk, 1, [("loss", s, 1.0, 0, T + s) for s in range(100)])
    run.delete()
    assert not MetricPoint.objects.filter(run_id=run.pk).exists()
    assert not MetricRollup.objects.filter(run_id=run.pk).exists() and not MetricSummary.objects.filter(run_id=run.pk).exists()
    assert MetricPoint.objects.filter(run=other).count() == 100


def test_compare_reads_each_series_at_its_own_level_in_few_queries(cast: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A short run's series are raw points while a long run's come from rollups; the raw query
    must not drag in the long run's points, and there is one query per level, not per series."""
    from apps.tracking import selectors
    from apps.tracking.selectors import SeriesQuery, metric_series_many, metric_summaries

    queries: list[str] = []
    fetchall = selectors._fetchall

    def counting(sql: str, params: Sequence[Any], row: Any) -> list[Any]:
        queries.append(sql)
        return fetchall(sql, params, row)

    monkeypatch.setattr(selectors, "_fetchall", counting)

    short, long = make_run(cast.digits), make_run(cast.digits)
    _store(short.pk, 1, [(k, s, float(s) + i, 0, T + s) for i, k in enumerate(("loss", "acc")) for s in range(50)])
    _store(long.pk, 1, [("loss", s, 1.0, 0, T + s) for s in range(60_000)] + [("loss", 33_333, 99.0, 0, T + 33_333)]
           + [("acc", s, -1.0, 0, T + s) for s in range(150)])
    runs = [short.pk, long.pk]
    summaries = metric_summaries(run_ids=runs)
    got = metric_series_many(summaries=summaries, run_ids=runs, keys=["loss", "acc"], q=SeriesQuery(max_points=100))
    assert len(queries) == 2  # raw points for three series, one rollup level for the fourth
    assert got[(short.pk, "loss")]["level"] == "raw" and got[(short.pk, "loss")]["x"] == [float(s) for s in range(50)]
    assert got[(short.pk, "acc")]["mean"][-1] == 50.0
    assert got[(long.pk, "acc")]["level"] == "raw" and len(got[(long.pk, "acc")]["x"]) <= 100
    assert got[(long.pk, "acc")]["min"] == [-1.0] * len(got[(long.pk, "acc")]["x"])
    big = got[(long.pk, "loss")]
    assert big["level"] != "raw" and 0 < len(big["x"]) <= 100 and big["count"] == 60_000
    assert big["true_max"] == 99.0 and max(big["max"]) == 99.0 and big["true_min"] == 1.0


@pytest.mark.django_db(transaction=True)
def test_store_outside_a_transaction_still_stores_everything(cast: Any) -> None:
    """In autocommit, each statement would commit on its own (and empty the PostgreSQL temp
    table between the COPY and the INSERT): the store opens its own transaction."""
    run = make_run(cast.digits)
    metric_points_store(run_id=run.pk, attempt=1, rows=[("loss", s, float(s), 0, T + s) for s in range(500)])
    metric_points_store(run_id=run.pk, attempt=1, rows=[("loss", s, 0.0, 0, T) for s in range(400, 600)])
    assert MetricPoint.objects.filter(run=run).count() == 600
    assert_rollups_match_raw(run.pk)


def test_database_errors_surface_as_djangos(cast: Any) -> None:
    """The PostgreSQL path talks to psycopg directly; its errors still arrive as django.db
    exceptions, so an outage maps to the 503 the core middleware gives (and not a 500)."""
    from django.db import IntegrityError

    run = make_run(cast.digits)
    with pytest.raises(IntegrityError), transaction.atomic():
        metric_points_store(run_id=run.pk, attempt=-1, rows=[("loss", 1, 1.0, 0, T)])  # attempt >= 0 is a CHECK
    assert not MetricPoint.objects.filter(run=run).exists()
