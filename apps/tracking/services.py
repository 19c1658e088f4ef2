"""Writes for tracking: metric batch validation and ingestion.

The request path is: validate the whole batch in plain Python (nothing stored if any point is
bad), fence the attempt, store the points, then bring the rollup buckets and summaries the
batch touched up to date, all in one transaction.

Ingestion is the hot path of the whole portal (every running job sends batches of up to
10,000 points), so it is written for throughput:

- validation checks whole columns with a few C-level passes (types, ranges, the distinct keys)
  and only walks point by point, as the plain version does, to name the first bad point;
- on PostgreSQL the points go over with one binary COPY into a session temp table; then, under
  a per-run lock, one of two paths:
  * append (every point lies after its key's last stored step; what training does all the
    time): a plain INSERT, and each rollup level and the summary *merged* with the batch's own
    aggregates: one statement, no stored point read back;
  * replace (a resumed attempt re-logging steps, a replayed batch): INSERT .. ON CONFLICT that
    reports the rows that really changed, then every touched bucket *recomputed* from the level
    below, one set-based statement per level for all keys at once, and the summaries from the
    top level. Recomputing (rather than adding deltas) is what keeps min/max right when a value
    is replaced by a smaller or larger one.
- elsewhere (SQLite, for development and tests) the same semantics in plain SQL, key by key.

Either way rollups and summaries always equal a recomputation from the raw points.
"""

from __future__ import annotations

import gc
import json
import math
import re
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import Any, NamedTuple

from django.db import connection, transaction

from apps.core.errors import FieldError, ServiceError
from apps.core.jsonlimits import JSON_MAX_DEPTH
from apps.runs.selectors import attempt_fence_for_node
from apps.tracking.downsample import NAN_S, NEG_INF_S, POS_INF_S
from apps.tracking.models import LEVEL_FANOUT, LEVELS, Flag

MAX_POINTS = 10_000
MAX_BODY_BYTES = 4 * 1024 * 1024
MAX_KEY_LENGTH = 250
MAX_STEP = 2**62
KEY_PATTERN = re.compile(r"^[A-Za-z0-9_.\-/]+$")
_FLAG_OF_STRING = {NAN_S: Flag.NAN.value, POS_INF_S: Flag.POS_INF.value, NEG_INF_S: Flag.NEG_INF.value}
# Ranges of buckets recomputed per statement (SQLite path): bounds the SQL text, not the work.
_RANGES_PER_STATEMENT = 64
# Namespace of the per-run advisory lock that serializes batches of one run on PostgreSQL.
_RUN_LOCK_NAMESPACE = 0x7472

# (key, step, value or None, flag, wall_time)
PointRow = tuple[str, int, float | None, int, float]


class PayloadTooLarge(ServiceError):
    status_code = 413
    code = "payload_too_large"


@dataclass(frozen=True, slots=True)
class PointColumns:
    """A batch of points as parallel columns: what COPY wants, and cheap to check column-wise."""

    keys: Sequence[str]
    steps: Sequence[int]
    values: Sequence[float | None]  # None where the value is not finite (see flags)
    flags: Sequence[int]
    walls: Sequence[float]

    def __len__(self) -> int:
        return len(self.keys)

    @classmethod
    def from_rows(cls, rows: Iterable[PointRow]) -> PointColumns:
        cols = tuple(zip(*rows, strict=True))
        if not cols:
            return cls((), (), (), (), ())
        keys, steps, values, flags, walls = cols
        return cls(keys, steps, values, flags, walls)

    def rows(self) -> Iterable[PointRow]:
        return zip(self.keys, self.steps, self.values, self.flags, self.walls, strict=True)

    def last_per_step(self) -> PointColumns:
        """One point per (key, step), the last one sent: a batch may re-log a step."""
        if len(set(zip(self.keys, self.steps, strict=True))) == len(self.keys):
            return self
        index = {ks: i for i, ks in enumerate(zip(self.keys, self.steps, strict=True))}
        keep = sorted(index.values())
        return PointColumns([self.keys[i] for i in keep], [self.steps[i] for i in keep], [self.values[i] for i in keep],
                            [self.flags[i] for i in keep], [self.walls[i] for i in keep])


@dataclass(frozen=True)
class MetricBatch:
    attempt_id: int
    attempt: int
    points: PointColumns

    @property
    def rows(self) -> list[PointRow]:
        return list(self.points.rows())


def _reject_constant(name: str) -> Any:
    raise ValueError(f"bare {name} is not JSON; send non-finite values as the strings \"NaN\", \"Infinity\", \"-Infinity\"")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def metric_batch_parse(*, body: bytes) -> MetricBatch:
    """Parse and validate a metric batch; any bad point rejects the whole batch (400 naming it)."""
    if len(body) > MAX_BODY_BYTES:
        raise PayloadTooLarge(f"body is larger than the limit of {MAX_BODY_BYTES} bytes")
    # A full batch is ~50,000 new objects that all stay alive until validated: with the cyclic
    # collector on, that sets off collections of the whole process heap (a third of the parse
    # time). JSON cannot make reference cycles, so there is nothing for it to find here.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _batch_from_json(body)
    finally:
        if collecting:
            gc.enable()


def _batch_from_json(body: bytes) -> MetricBatch:
    try:
        data = json.loads(body, parse_constant=_reject_constant)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ServiceError(f"body is not valid JSON: {exc}", code="parse_error") from None
    except RecursionError:
        # Bodies past the web's JSON depth check (over its size limit) reach here; catching the
        # decoder's own error keeps the hot path free of a second pass over every batch.
        raise ServiceError(f"body is JSON nested too deep; the limit is {JSON_MAX_DEPTH} levels of arrays and objects",
                           code="too_deep") from None
    if not isinstance(data, dict):
        raise ServiceError("body must be a JSON object with attempt_id, attempt and points", code="invalid")
    for name in ("attempt_id", "attempt"):
        if not _is_int(data.get(name)) or data[name] < 0:
            raise FieldError(name, "required, a non-negative integer")
    points = data.get("points")
    if not isinstance(points, list):
        raise FieldError("points", "required, a list of [key, step, value, wall_time]")
    if len(points) > MAX_POINTS:
        raise FieldError("points", f"{len(points)} points; the limit is {MAX_POINTS} per batch", code="too_many_points")
    return MetricBatch(attempt_id=data["attempt_id"], attempt=data["attempt"], points=metric_points_validate(points=points))


def metric_points_validate(*, points: Sequence[Any]) -> PointColumns:
    """The batch as columns, or FieldError naming the first bad point.

    Checks whole columns first (a few C-level passes); only a batch that fails them is walked
    point by point, which is what finds and names the culprit.
    """
    columns = _validate_columns(points)
    if columns is None:
        columns = PointColumns.from_rows(_validate_each(points))
    return columns


def _finite_floats(column: Sequence[Any]) -> list[float] | Sequence[float] | None:
    """The column as finite floats, or None when some entry is not one (the slow path says which)."""
    types = set(map(type, column))
    if types != {float}:
        if not types <= {float, int}:
            return None
        try:
            column = [float(v) for v in column]
        except OverflowError:
            return None
    # JSON numbers can still overflow to +-inf (1e999); an inf or NaN makes the sum non-finite,
    # and so does a sum that merely overflows, which only costs a trip through the slow path.
    total = sum(column)
    if total - total != 0.0:
        return None
    return column


def _validate_columns(points: Sequence[Any]) -> PointColumns | None:
    if not points:
        return PointColumns((), (), (), (), ())
    if set(map(type, points)) != {list} or set(map(len, points)) != {4}:
        return None
    keys, steps, values, walls = zip(*points, strict=True)
    try:
        distinct_keys = set(keys)
    except TypeError:  # an unhashable key (a list or an object)
        return None
    match = KEY_PATTERN.match
    for key in distinct_keys:
        if type(key) is not str or not key or len(key) > MAX_KEY_LENGTH or not match(key):
            return None
    if set(map(type, steps)) != {int} or min(steps) < 0 or max(steps) > MAX_STEP:
        return None
    value_types = set(map(type, values))
    numbers: Sequence[float | None] | None
    if str not in value_types:
        numbers = _finite_floats(values)
        flags: Sequence[int] = (0,) * len(values)
    elif value_types <= {float, int, str}:
        if not {v for v in values if type(v) is str} <= _FLAG_OF_STRING.keys():
            return None
        numbers = _finite_floats([v for v in values if type(v) is not str])
        if numbers is not None:
            numbers = [None if type(v) is str else float(v) for v in values]
        flags = [_FLAG_OF_STRING[v] if type(v) is str else 0 for v in values]
    else:
        return None
    wall_times = _finite_floats(walls)
    if numbers is None or wall_times is None:
        return None
    return PointColumns(keys, steps, numbers, flags, wall_times)


def _validate_each(points: Sequence[Any]) -> list[PointRow]:
    rows: list[PointRow] = []
    match = KEY_PATTERN.match
    for i, point in enumerate(points):
        where = f"points[{i}]"
        if not isinstance(point, list) or len(point) != 4:
            raise FieldError(where, "must be [key, step, value, wall_time]")
        key, step, value, wall = point
        if not isinstance(key, str) or not key:
            raise FieldError(where, "key must be a non-empty string")
        if len(key) > MAX_KEY_LENGTH:
            raise FieldError(where, f"key is {len(key)} characters; the limit is {MAX_KEY_LENGTH}", code="key_too_long")
        if not match(key):
            raise FieldError(where, f"key {key[:60]!r} may contain only letters, digits and _ . - /", code="bad_key")
        if not _is_int(step) or step < 0 or step > MAX_STEP:
            raise FieldError(where, "step must be an integer between 0 and 2**62")
        flag = Flag.FINITE.value
        number: float | None
        if isinstance(value, str):
            if value not in _FLAG_OF_STRING:
                raise FieldError(where, "value must be a number or one of \"NaN\", \"Infinity\", \"-Infinity\"", code="bad_value")
            flag, number = _FLAG_OF_STRING[value], None
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            try:
                number = float(value)
            except OverflowError:
                raise FieldError(where, "value is out of the float range", code="bad_value") from None
            if not math.isfinite(number):
                raise FieldError(where, "value is out of the float range", code="bad_value")
        else:
            raise FieldError(where, "value must be a number or one of \"NaN\", \"Infinity\", \"-Infinity\"", code="bad_value")
        if isinstance(wall, bool) or not isinstance(wall, (int, float)):
            raise FieldError(where, "wall_time must be a finite number (Unix seconds)")
        try:
            wall_f = float(wall)
        except OverflowError:
            raise FieldError(where, "wall_time must be a finite number (Unix seconds)") from None
        if not math.isfinite(wall_f):
            raise FieldError(where, "wall_time must be a finite number (Unix seconds)")
        rows.append((key, step, number, flag, wall_f))
    return rows


def metric_batch_ingest(*, node_id: int, batch: MetricBatch) -> int:
    """Store a validated batch for the attempt the node reports for; returns points accepted.

    404 for an attempt not on this node, 409 for a stale attempt or finished run (the fence).
    """
    with transaction.atomic():
        run_id, number = attempt_fence_for_node(node_id=node_id, attempt_id=batch.attempt_id, number=batch.attempt)
        metric_points_store(run_id=run_id, attempt=number, points=batch.points)
    return len(batch.points)


def metric_points_store(*, run_id: int, attempt: int, rows: Iterable[PointRow] = (), points: PointColumns | None = None) -> None:
    """Upsert points (last one wins per key and step) and refresh rollups and summaries.

    Takes `rows` (tuples) or `points` (columns). Runs in the caller's transaction, or in one of
    its own (points, rollups and summaries must change together; and the PostgreSQL path's
    temp table only keeps its rows until a commit); also used by tests, seeding and benchmarks
    to load data directly.
    """
    cols = (points if points is not None else PointColumns.from_rows(rows)).last_per_step()
    if not len(cols):
        return
    with transaction.atomic(savepoint=False):
        if connection.vendor == "postgresql":
            _store_postgresql(run_id, attempt, cols)
            return
        _upsert_generic(run_id, attempt, cols)
        metric_rollups_refresh(run_id=run_id, touched=zip(cols.keys, cols.steps, strict=True))


def _upsert_generic(run_id: int, attempt: int, cols: PointColumns) -> None:
    sql = (
        "INSERT INTO tracking_metricpoint (run_id, key, step, value, flag, wall_time, attempt) "
        "VALUES (%s, %s, %s, %s, %s, %s, %s) "
        "ON CONFLICT (run_id, key, step) DO UPDATE SET value = excluded.value, flag = excluded.flag, "
        "wall_time = excluded.wall_time, attempt = excluded.attempt "
        "WHERE tracking_metricpoint.value IS NOT excluded.value OR tracking_metricpoint.flag IS NOT excluded.flag "
        "OR tracking_metricpoint.wall_time IS NOT excluded.wall_time OR tracking_metricpoint.attempt IS NOT excluded.attempt"
    )
    with connection.cursor() as cursor:
        cursor.executemany(sql, [(run_id, k, s, v, f, w, attempt) for k, s, v, f, w in cols.rows()])


def _ranges(buckets: Iterable[int]) -> list[tuple[int, int]]:
    """Sorted half-open ranges [lo, hi) covering the given bucket numbers."""
    out: list[tuple[int, int]] = []
    for b in sorted(set(buckets)):
        if out and out[-1][1] == b:
            out[-1] = (out[-1][0], b + 1)
        else:
            out.append((b, b + 1))
    return out


_AGG_COLUMNS = (
    '"count", finite_count, "sum", "min", "max", nan_count, posinf_count, neginf_count, first_step, last_step, first_wall, last_wall'
)
_AGG_UPDATE = ", ".join(f"{c} = excluded.{c}" for c in _AGG_COLUMNS.split(", "))
_FROM_POINTS = (
    "COUNT(*), COUNT(value), COALESCE(SUM(value), 0), MIN(value), MAX(value), "
    f"SUM(CASE WHEN flag = {Flag.NAN.value} THEN 1 ELSE 0 END), SUM(CASE WHEN flag = {Flag.POS_INF.value} THEN 1 ELSE 0 END), "
    f"SUM(CASE WHEN flag = {Flag.NEG_INF.value} THEN 1 ELSE 0 END), MIN(step), MAX(step), MIN(wall_time), MAX(wall_time)"
)
_FROM_ROLLUPS = (
    'SUM("count"), SUM(finite_count), SUM("sum"), MIN("min"), MAX("max"), SUM(nan_count), SUM(posinf_count), '
    "SUM(neginf_count), MIN(first_step), MAX(last_step), MIN(first_wall), MAX(last_wall)"
)


def metric_rollups_refresh(*, run_id: int, touched: Iterable[tuple[str, int]]) -> None:
    """Recompute the rollup buckets (every level) and summaries covering the touched steps.

    The portable version (SQLite), one key at a time; PostgreSQL uses _pg_ingest's set-based one.
    """
    steps_by_key: dict[str, list[int]] = {}
    for key, step in touched:
        steps_by_key.setdefault(key, []).append(step)
    with connection.cursor() as cursor:
        for key, steps in steps_by_key.items():
            buckets = {s // LEVELS[0] for s in steps}
            for chunk in _chunks(_ranges(buckets)):
                where = " OR ".join(["(step >= %s AND step < %s)"] * len(chunk))
                params: list[Any] = [run_id, key]
                for lo, hi in chunk:
                    params += [lo * LEVELS[0], hi * LEVELS[0]]
                cursor.execute(
                    f"INSERT INTO tracking_metricrollup (run_id, key, level, bucket, {_AGG_COLUMNS}) "
                    f"SELECT run_id, key, 0, step / {LEVELS[0]}, {_FROM_POINTS} FROM tracking_metricpoint "
                    f"WHERE run_id = %s AND key = %s AND ({where}) GROUP BY run_id, key, step / {LEVELS[0]} "
                    f"ON CONFLICT (run_id, key, level, bucket) DO UPDATE SET {_AGG_UPDATE}",
                    params,
                )
            for level in range(1, len(LEVELS)):
                buckets = {b // LEVEL_FANOUT for b in buckets}
                for chunk in _chunks(_ranges(buckets)):
                    where = " OR ".join(["(bucket >= %s AND bucket < %s)"] * len(chunk))
                    params = [run_id, key, level - 1]
                    for lo, hi in chunk:
                        params += [lo * LEVEL_FANOUT, hi * LEVEL_FANOUT]
                    cursor.execute(
                        f"INSERT INTO tracking_metricrollup (run_id, key, level, bucket, {_AGG_COLUMNS}) "
                        f"SELECT run_id, key, {level}, bucket / {LEVEL_FANOUT}, {_FROM_ROLLUPS} FROM tracking_metricrollup "
                        f"WHERE run_id = %s AND key = %s AND level = %s AND ({where}) GROUP BY run_id, key, bucket / {LEVEL_FANOUT} "
                        f"ON CONFLICT (run_id, key, level, bucket) DO UPDATE SET {_AGG_UPDATE}",
                        params,
                    )
        keys = list(steps_by_key)
        marks = ", ".join(["%s"] * len(keys))
        top = len(LEVELS) - 1
        cursor.execute(
            f"INSERT INTO tracking_metricsummary (run_id, key, {_AGG_COLUMNS}, first_value, first_flag, last_value, last_flag, "
            f"last_step_wall) SELECT run_id, key, {_FROM_ROLLUPS}, NULL, 0, NULL, 0, 0 FROM tracking_metricrollup "
            f"WHERE run_id = %s AND level = {top} AND key IN ({marks}) GROUP BY run_id, key "
            f"ON CONFLICT (run_id, key) DO UPDATE SET {_AGG_UPDATE}",
            [run_id, *keys],
        )
        point = "SELECT p.{col} FROM tracking_metricpoint p WHERE p.run_id = s.run_id AND p.key = s.key AND p.step = s.{at}"
        cursor.execute(
            f"UPDATE tracking_metricsummary AS s SET first_value = ({point.format(col='value', at='first_step')}), "
            f"first_flag = ({point.format(col='flag', at='first_step')}), last_value = ({point.format(col='value', at='last_step')}), "
            f"last_flag = ({point.format(col='flag', at='last_step')}), "
            f"last_step_wall = ({point.format(col='wall_time', at='last_step')}) WHERE s.run_id = %s AND s.key IN ({marks})",
            [run_id, *keys],
        )


def _chunks(ranges: list[tuple[int, int]]) -> list[list[tuple[int, int]]]:
    return [ranges[i : i + _RANGES_PER_STATEMENT] for i in range(0, len(ranges), _RANGES_PER_STATEMENT)]


# --- PostgreSQL: binary COPY, one upsert, set-based rollups --------------------------------------

_PG_AGG = ", ".join(c.strip() for c in _AGG_COLUMNS.split(","))
_PG_AGG_UPDATE = ", ".join(f"{c} = excluded.{c}" for c in _PG_AGG.split(", "))
_PG_FROM_POINTS = (
    "COUNT(*), COUNT(p.value), COALESCE(SUM(p.value), 0), MIN(p.value), MAX(p.value), "
    f"COUNT(*) FILTER (WHERE p.flag = {Flag.NAN.value}), COUNT(*) FILTER (WHERE p.flag = {Flag.POS_INF.value}), "
    f"COUNT(*) FILTER (WHERE p.flag = {Flag.NEG_INF.value}), MIN(p.step), MAX(p.step), MIN(p.wall_time), MAX(p.wall_time)"
)
_PG_FROM_ROLLUPS = (
    'SUM(r."count"), SUM(r.finite_count), SUM(r."sum"), MIN(r."min"), MAX(r."max"), SUM(r.nan_count), SUM(r.posinf_count), '
    "SUM(r.neginf_count), MIN(r.first_step), MAX(r.last_step), MIN(r.first_wall), MAX(r.last_wall)"
)
# The batch as COPY sends it: each key as its index k into the batch's distinct keys (passed as
# the array parameter "names"), so every row has the same width and the batch's grouping runs
# on an integer; the text goes in once per row only where it is stored.
_PG_TEMP_TABLE = (
    "CREATE TEMP TABLE IF NOT EXISTS tracking_batch (k integer, step bigint, value double precision, flag smallint, "
    "wall_time double precision) ON COMMIT DELETE ROWS"
)
_PG_COPY = "COPY tracking_batch (k, step, value, flag, wall_time) FROM STDIN (FORMAT BINARY)"
_PG_COPY_TYPES = ["int4", "int8", "float8", "int2", "float8"]
_PG_COPY_HEADER = b"PGCOPY\n\xff\r\n\x00" + struct.pack("!ii", 0, 0)
_PG_COPY_TRAILER = struct.pack("!h", -1)
# One row of binary COPY: field count, then (length, value) per field; NULL-free rows only.
_PG_COPY_ROW = struct.Struct("!h ii iq id ih id").pack


def _name(alias: str) -> str:
    """SQL for the key text of batch row `alias`."""
    return f"(%(names)s::text[])[{alias}.k + 1]"


# Only rows that really change come back, so a replayed batch costs no rollup work; what comes
# back is already the set of touched level-0 buckets.
_PG_UPSERT = (
    "WITH changed AS (INSERT INTO tracking_metricpoint AS p (run_id, key, step, value, flag, wall_time, attempt) "
    f"SELECT %(run)s, {_name('b')}, b.step, b.value, b.flag, b.wall_time, %(attempt)s FROM tracking_batch b "
    "ON CONFLICT (run_id, key, step) DO UPDATE SET value = excluded.value, flag = excluded.flag, "
    "wall_time = excluded.wall_time, attempt = excluded.attempt "
    "WHERE (p.value, p.flag, p.wall_time, p.attempt) IS DISTINCT FROM (excluded.value, excluded.flag, excluded.wall_time, "
    "excluded.attempt) RETURNING p.key, p.step) "
    f"SELECT key, step / {LEVELS[0]} FROM changed GROUP BY 1, 2"
)
# LATERAL: one index range scan per touched bucket. A plain join lets the planner hash the
# whole run's points when the run has few keys, which is every run.
_PG_LEVEL0 = (
    f"INSERT INTO tracking_metricrollup (run_id, key, level, bucket, {_PG_AGG}) "
    "SELECT %(run)s, t.key, 0, t.bucket, a.* FROM unnest(%(keys)s::text[], %(buckets)s::bigint[]) AS t(key, bucket) "
    f"CROSS JOIN LATERAL (SELECT {_PG_FROM_POINTS} FROM tracking_metricpoint p WHERE p.run_id = %(run)s AND p.key = t.key "
    f"AND p.step >= t.bucket * {LEVELS[0]} AND p.step < (t.bucket + 1) * {LEVELS[0]}) AS a "
    f"ON CONFLICT (run_id, key, level, bucket) DO UPDATE SET {_PG_AGG_UPDATE}"
)
_PG_LEVEL_N = (
    f"INSERT INTO tracking_metricrollup (run_id, key, level, bucket, {_PG_AGG}) "
    "SELECT %(run)s, t.key, %(level)s, t.bucket, a.* FROM unnest(%(keys)s::text[], %(buckets)s::bigint[]) AS t(key, bucket) "
    f"CROSS JOIN LATERAL (SELECT {_PG_FROM_ROLLUPS} FROM tracking_metricrollup r WHERE r.run_id = %(run)s AND r.key = t.key "
    f"AND r.level = %(below)s AND r.bucket >= t.bucket * {LEVEL_FANOUT} AND r.bucket < (t.bucket + 1) * {LEVEL_FANOUT}) AS a "
    f"ON CONFLICT (run_id, key, level, bucket) DO UPDATE SET {_PG_AGG_UPDATE}"
)
_PG_SUMMARY = (
    f"INSERT INTO tracking_metricsummary (run_id, key, {_PG_AGG}, first_value, first_flag, last_value, last_flag, last_step_wall) "
    "SELECT %(run)s, a.key, a.n, a.fn, a.sm, a.mn, a.mx, a.na, a.pi, a.ni, a.fs, a.ls, a.fw, a.lw, "
    "f.value, f.flag, l.value, l.flag, l.wall_time FROM ("
    'SELECT r.key, SUM(r."count") AS n, SUM(r.finite_count) AS fn, SUM(r."sum") AS sm, MIN(r."min") AS mn, MAX(r."max") AS mx, '
    "SUM(r.nan_count) AS na, SUM(r.posinf_count) AS pi, SUM(r.neginf_count) AS ni, MIN(r.first_step) AS fs, "
    "MAX(r.last_step) AS ls, MIN(r.first_wall) AS fw, MAX(r.last_wall) AS lw "
    f"FROM tracking_metricrollup r WHERE r.run_id = %(run)s AND r.level = {len(LEVELS) - 1} AND r.key = ANY(%(keys)s::text[]) "
    "GROUP BY r.key) AS a "
    "JOIN tracking_metricpoint f ON f.run_id = %(run)s AND f.key = a.key AND f.step = a.fs "
    "JOIN tracking_metricpoint l ON l.run_id = %(run)s AND l.key = a.key AND l.step = a.ls "
    f"ON CONFLICT (run_id, key) DO UPDATE SET {_PG_AGG_UPDATE}, first_value = excluded.first_value, "
    "first_flag = excluded.first_flag, last_value = excluded.last_value, last_flag = excluded.last_flag, "
    "last_step_wall = excluded.last_step_wall"
)


# Append fast path: when every point of the batch lies after its key's last stored step (what a
# training job does all the time), nothing can conflict, so the points go in with a plain INSERT
# (about half the cost of ON CONFLICT) and every rollup level and the summary are merged with
# the batch's own aggregates instead of being re-read. Counts, sums, min/max and first/last all
# merge exactly. One statement: b0 (the batch's level-0 buckets) also answers whether it is an
# append ("ok"); every write is guarded by that answer, and the statement returns it, so a batch
# that is not an append has changed nothing and goes the replace way.
_PG_B_SUMS = (
    "SUM(n) AS n, SUM(fn) AS fn, SUM(sm) AS sm, MIN(mn) AS mn, MAX(mx) AS mx, SUM(na) AS na, SUM(pi) AS pi, SUM(ni) AS ni, "
    "MIN(fs) AS fs, MAX(ls) AS ls, MIN(fw) AS fw, MAX(lw) AS lw"
)
_PG_G_COLUMNS = "g.n, g.fn, g.sm, g.mn, g.mx, g.na, g.pi, g.ni, g.fs, g.ls, g.fw, g.lw"
_PG_MERGE = (
    '"count" = t."count" + excluded."count", finite_count = t.finite_count + excluded.finite_count, '
    '"sum" = t."sum" + excluded."sum", "min" = LEAST(t."min", excluded."min"), "max" = GREATEST(t."max", excluded."max"), '
    "nan_count = t.nan_count + excluded.nan_count, posinf_count = t.posinf_count + excluded.posinf_count, "
    "neginf_count = t.neginf_count + excluded.neginf_count, first_step = LEAST(t.first_step, excluded.first_step), "
    "last_step = GREATEST(t.last_step, excluded.last_step), first_wall = LEAST(t.first_wall, excluded.first_wall), "
    "last_wall = GREATEST(t.last_wall, excluded.last_wall)"
)
_PG_OK = "(SELECT yes FROM ok)"


def _pg_append_level(level: int) -> str:
    """CTE merging the batch's buckets (b0, level 0) into rollup level `level`."""
    return (
        f"l{level} AS (INSERT INTO tracking_metricrollup AS t (run_id, key, level, bucket, {_PG_AGG}) "
        f"SELECT %(run)s, {_name('g')}, {level}, g.bucket, {_PG_G_COLUMNS} FROM (SELECT k, bucket / {LEVEL_FANOUT**level} AS bucket, "
        f"{_PG_B_SUMS} FROM b0 GROUP BY 1, 2) AS g WHERE {_PG_OK} "
        f"ON CONFLICT (run_id, key, level, bucket) DO UPDATE SET {_PG_MERGE})"
    )


class _AppendRow(NamedTuple):
    """The row `_PG_APPEND` returns: whether the batch only appended (and so is already stored)."""

    appended: bool


class _TouchedRow(NamedTuple):
    """A row of `_PG_UPSERT`: a key and a level-0 bucket the batch changed."""

    key: str
    bucket: int


_PG_APPEND = (
    f"WITH b0 AS MATERIALIZED (SELECT k, step / {LEVELS[0]} AS bucket, COUNT(*) AS n, COUNT(value) AS fn, "
    "COALESCE(SUM(value), 0) AS sm, MIN(value) AS mn, MAX(value) AS mx, "
    f"COUNT(*) FILTER (WHERE flag = {Flag.NAN.value}) AS na, COUNT(*) FILTER (WHERE flag = {Flag.POS_INF.value}) AS pi, "
    f"COUNT(*) FILTER (WHERE flag = {Flag.NEG_INF.value}) AS ni, MIN(step) AS fs, MAX(step) AS ls, "
    "MIN(wall_time) AS fw, MAX(wall_time) AS lw FROM tracking_batch GROUP BY 1, 2), "
    "ok AS MATERIALIZED (SELECT COALESCE(bool_and(s.last_step IS NULL OR g.fs > s.last_step), true) AS yes "
    "FROM (SELECT k, MIN(fs) AS fs FROM b0 GROUP BY k) AS g "
    f"LEFT JOIN tracking_metricsummary s ON s.run_id = %(run)s AND s.key = {_name('g')}), "
    "points AS (INSERT INTO tracking_metricpoint (run_id, key, step, value, flag, wall_time, attempt) "
    f"SELECT %(run)s, {_name('b')}, b.step, b.value, b.flag, b.wall_time, %(attempt)s FROM tracking_batch b WHERE {_PG_OK}), "
    + ", ".join(_pg_append_level(level) for level in range(len(LEVELS)))
    + f", summary AS (INSERT INTO tracking_metricsummary AS t (run_id, key, {_PG_AGG}, first_value, first_flag, last_value, "
    f"last_flag, last_step_wall) SELECT %(run)s, {_name('g')}, {_PG_G_COLUMNS}, f.value, f.flag, l.value, l.flag, l.wall_time "
    f"FROM (SELECT k, {_PG_B_SUMS} FROM b0 GROUP BY k) AS g "
    "JOIN tracking_batch f ON f.k = g.k AND f.step = g.fs JOIN tracking_batch l ON l.k = g.k AND l.step = g.ls "
    f"WHERE {_PG_OK} ON CONFLICT (run_id, key) DO UPDATE SET {_PG_MERGE}, "
    "first_value = CASE WHEN excluded.first_step < t.first_step THEN excluded.first_value ELSE t.first_value END, "
    "first_flag = CASE WHEN excluded.first_step < t.first_step THEN excluded.first_flag ELSE t.first_flag END, "
    "last_value = CASE WHEN excluded.last_step > t.last_step THEN excluded.last_value ELSE t.last_value END, "
    "last_flag = CASE WHEN excluded.last_step > t.last_step THEN excluded.last_flag ELSE t.last_flag END, "
    "last_step_wall = CASE WHEN excluded.last_step > t.last_step THEN excluded.last_step_wall ELSE t.last_step_wall END) "
    "SELECT yes FROM ok"
)


def _store_postgresql(run_id: int, attempt: int, cols: PointColumns) -> None:
    import psycopg

    connection.ensure_connection()
    # A plain psycopg cursor binds parameters server-side and in binary (Django's own cursor
    # quotes them into the SQL text). wrap_database_errors turns its errors into Django's, as
    # Django's cursor would: an outage is then the usual 503, and a broken connection is dropped.
    with connection.wrap_database_errors, psycopg.Cursor(connection.connection) as cursor:
        cursor.execute(_PG_TEMP_TABLE)
        # Empty unless an earlier call in this same transaction left rows (ON COMMIT clears it).
        cursor.execute("DELETE FROM tracking_batch")
        names = list(dict.fromkeys(cols.keys))
        ks = list(map({name: i for i, name in enumerate(names)}.__getitem__, cols.keys))
        with cursor.copy(_PG_COPY) as copy:
            if any(cols.flags):
                # Non-finite values are NULLs, which make rows of different widths: psycopg's
                # row by row writer. (Rare: most batches hold only finite values.)
                copy.set_types(_PG_COPY_TYPES)
                write = copy.write_row
                for row in zip(ks, cols.steps, cols.values, cols.flags, cols.walls, strict=True):
                    write(row)
            else:
                # Every row the same width: the whole COPY body in one C-level pass.
                eight = repeat(8)
                copy.write(b"".join((_PG_COPY_HEADER, b"".join(map(
                    _PG_COPY_ROW, repeat(5), repeat(4), ks, eight, cols.steps, eight, cols.values, repeat(2), cols.flags, eight, cols.walls,
                )), _PG_COPY_TRAILER)))
        run = {"run": run_id, "attempt": attempt, "names": names}
        # One batch at a time per run (an agent sends them one after another anyway): the append
        # check and the rollup refresh both read what earlier batches committed.
        cursor.execute("SELECT pg_advisory_xact_lock(%s::int4, %s::int4)", [_RUN_LOCK_NAMESPACE, run_id % 2**31])
        cursor.execute(_PG_APPEND, run)
        appended = cursor.fetchone()
        if appended is not None and _AppendRow._make(appended).appended:
            return
        cursor.execute(_PG_UPSERT, run)
        touched = [_TouchedRow._make(row) for row in cursor.fetchall()]
        if not touched:
            return
        keys = [row.key for row in touched]
        buckets = [row.bucket for row in touched]
        run = {"run": run_id}
        cursor.execute(_PG_LEVEL0, {**run, "keys": keys, "buckets": buckets})
        for level in range(1, len(LEVELS)):
            pairs = sorted({(k, b // LEVEL_FANOUT) for k, b in zip(keys, buckets, strict=True)})
            keys = [k for k, _ in pairs]
            buckets = [b for _, b in pairs]
            cursor.execute(_PG_LEVEL_N, {**run, "level": level, "below": level - 1, "keys": keys, "buckets": buckets})
        cursor.execute(_PG_SUMMARY, {**run, "keys": sorted(set(keys))})
