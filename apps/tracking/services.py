"""Writes for tracking: metric batch validation and ingestion.

The request path is: validate the whole batch in plain Python (nothing stored if any point is
bad), fence the attempt, upsert the points in bulk, then recompute the rollup buckets and
summaries the batch touched, all in one transaction. Recomputing touched buckets from the level
below (instead of adding deltas) is what keeps min/max right when a resumed attempt replaces a
step with a smaller or larger value.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import connection, transaction

from apps.core.errors import FieldError, ServiceError
from apps.runs.selectors import attempt_for_node_report
from apps.tracking.downsample import NAN_S, NEG_INF_S, POS_INF_S
from apps.tracking.models import LEVEL_FANOUT, LEVELS, Flag

MAX_POINTS = 10_000
MAX_BODY_BYTES = 4 * 1024 * 1024
MAX_KEY_LENGTH = 250
KEY_PATTERN = re.compile(r"^[A-Za-z0-9_.\-/]+$")
_FLAG_OF_STRING = {NAN_S: Flag.NAN.value, POS_INF_S: Flag.POS_INF.value, NEG_INF_S: Flag.NEG_INF.value}
# Ranges of buckets recomputed per statement: bounds the SQL text, not the work.
_RANGES_PER_STATEMENT = 64

# (key, step, value or None, flag, wall_time)
PointRow = tuple[str, int, float | None, int, float]


class PayloadTooLarge(ServiceError):
    status_code = 413
    code = "payload_too_large"


@dataclass(frozen=True)
class MetricBatch:
    attempt_id: int
    attempt: int
    rows: list[PointRow]


def _reject_constant(name: str) -> Any:
    raise ValueError(f"bare {name} is not JSON; send non-finite values as the strings \"NaN\", \"Infinity\", \"-Infinity\"")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def metric_batch_parse(*, body: bytes) -> MetricBatch:
    """Parse and validate a metric batch; any bad point rejects the whole batch (400 naming it)."""
    if len(body) > MAX_BODY_BYTES:
        raise PayloadTooLarge(f"body is larger than the limit of {MAX_BODY_BYTES} bytes")
    try:
        data = json.loads(body, parse_constant=_reject_constant)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ServiceError(f"body is not valid JSON: {exc}", code="parse_error") from None
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
    return MetricBatch(attempt_id=data["attempt_id"], attempt=data["attempt"], rows=metric_points_validate(points=points))


def metric_points_validate(*, points: Sequence[Any]) -> list[PointRow]:
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
        if not _is_int(step) or step < 0 or step > 2**62:
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
        attempt = attempt_for_node_report(node_id=node_id, attempt_id=batch.attempt_id, number=batch.attempt)
        metric_points_store(run_id=attempt.run_id, attempt=attempt.number, rows=batch.rows)
    return len(batch.rows)


def metric_points_store(*, run_id: int, attempt: int, rows: Iterable[PointRow]) -> None:
    """Upsert points (last one wins per key and step) and refresh rollups and summaries.

    Must run inside a transaction; also used by tests and benchmarks to load data directly.
    """
    unique = {(r[0], r[1]): r for r in rows}
    if not unique:
        return
    if connection.vendor == "postgresql":
        changed = _upsert_postgresql(run_id, attempt, list(unique.values()))
    else:
        _upsert_generic(run_id, attempt, list(unique.values()))
        changed = list(unique)
    if changed:
        metric_rollups_refresh(run_id=run_id, touched=changed)


_UPSERT_SET = (
    "ON CONFLICT (run_id, key, step) DO UPDATE SET value = excluded.value, flag = excluded.flag, "
    "wall_time = excluded.wall_time, attempt = excluded.attempt "
)


def _upsert_generic(run_id: int, attempt: int, rows: list[PointRow]) -> None:
    sql = (
        "INSERT INTO tracking_metricpoint (run_id, key, step, value, flag, wall_time, attempt) "
        "VALUES (%s, %s, %s, %s, %s, %s, %s) " + _UPSERT_SET +
        "WHERE tracking_metricpoint.value IS NOT excluded.value OR tracking_metricpoint.flag IS NOT excluded.flag "
        "OR tracking_metricpoint.wall_time IS NOT excluded.wall_time OR tracking_metricpoint.attempt IS NOT excluded.attempt"
    )
    with connection.cursor() as cursor:
        cursor.executemany(sql, [(run_id, k, s, v, f, w, attempt) for k, s, v, f, w in rows])


def _upsert_postgresql(run_id: int, attempt: int, rows: list[PointRow]) -> list[tuple[str, int]]:
    """COPY into a session temp table, then one INSERT .. ON CONFLICT; returns the (key, step)
    rows that actually changed, so a replayed batch costs no rollup work."""
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE TEMP TABLE IF NOT EXISTS tracking_ingest (key text, step bigint, value double precision, "
            "flag smallint, wall_time double precision) ON COMMIT DELETE ROWS"
        )
        raw = cursor.cursor
        with raw.copy("COPY tracking_ingest (key, step, value, flag, wall_time) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
        cursor.execute(
            "INSERT INTO tracking_metricpoint (run_id, key, step, value, flag, wall_time, attempt) "
            "SELECT %s, key, step, value, flag, wall_time, %s FROM tracking_ingest " + _UPSERT_SET +
            "WHERE (tracking_metricpoint.value, tracking_metricpoint.flag, tracking_metricpoint.wall_time, "
            "tracking_metricpoint.attempt) IS DISTINCT FROM (excluded.value, excluded.flag, excluded.wall_time, excluded.attempt) "
            "RETURNING key, step",
            [run_id, attempt],
        )
        changed = [(str(k), int(s)) for k, s in cursor.fetchall()]
        cursor.execute("TRUNCATE tracking_ingest")
    return changed


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
    """Recompute the rollup buckets (every level) and summaries covering the touched steps."""
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
