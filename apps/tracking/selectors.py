"""Reads for tracking: chart series from the right rollup level, summaries, comparison,
checkpoints, logs and energy. Callers pass runs already scoped to the user (the API views get
them through ScopedMixin), so nothing here widens what a user can see."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from operator import attrgetter
from typing import Any, NamedTuple, TypeVar

from django.db import connection
from django.db.models import Count, Exists, Max, Min, OuterRef, QuerySet
from django.utils import timezone

from apps.runs import selectors as run_selectors
from apps.runs.detail_selectors import run_cost, run_energy
from apps.runs.models import Attempt, Checkpoint, EnergySample, LogChunk, Run, RunStatus
from apps.tracking.display import energy_text, energy_unit, run_label, value_text
from apps.tracking.downsample import Bucket, decode, downsample, encode, extremes, point_bucket
from apps.tracking.energy_selectors import runs_energy
from apps.tracking.environment_selectors import environment_compare
from apps.tracking.models import LEVELS, AttemptEnvironment, Flag, MetricPoint, MetricSummary
from apps.tracking.sweeps import sweep_best_trial, sweep_objective

R = TypeVar("R")

DEFAULT_MAX_POINTS = 500
MAX_MAX_POINTS = 5000
COMPARE_MIN_RUNS = 2
COMPARE_MAX_RUNS = 50
COMPARE_MAX_KEYS = 20
# Rows one request may spend, shared among its series, reading a level finer than max_points asks
# for so that a short series fills max_points (5 points of 600 steps would be one level-1 bucket).
FILL_ROWS = 6000
_NONFINITE = {Flag.NAN.value: math.nan, Flag.POS_INF.value: math.inf, Flag.NEG_INF.value: -math.inf}


def _value(value: float | None, flag: int) -> float:
    return _NONFINITE[flag] if flag else float(value if value is not None else math.nan)


def summary_dict(s: MetricSummary) -> dict[str, Any]:
    bucket = _summary_bucket(s)
    lo, hi = extremes([bucket])
    return {
        "key": s.key,
        "count": s.count,
        "first": encode(_value(s.first_value, s.first_flag)),
        "last": encode(_value(s.last_value, s.last_flag)),
        "min": encode(lo),
        "max": encode(hi),
        "mean": encode(bucket.mean),
        "nonfinite": s.nan_count + s.posinf_count + s.neginf_count,
        "first_step": s.first_step,
        "last_step": s.last_step,
        "last_wall_time": s.last_step_wall,
    }


def metrics_summary(*, run_ids: Sequence[int], keys: Sequence[str]) -> dict[int, dict[str, dict[str, Any] | None]]:
    """Per run, per key: the last value (and its step), min and max, as the runs list's metric
    columns and its API show them; None where the run has not logged the key."""
    out: dict[int, dict[str, dict[str, Any] | None]] = {rid: dict.fromkeys(keys) for rid in run_ids}
    for s in MetricSummary.objects.filter(run_id__in=run_ids, key__in=keys):
        whole = summary_dict(s)
        out[s.run_id][s.key] = {"last": whole["last"], "last_step": whole["last_step"], "min": whole["min"], "max": whole["max"]}
    return out


def _summary_bucket(s: Any) -> Bucket:
    return Bucket(s.first_step, s.last_step, s.count, s.finite_count, s.sum, s.min, s.max, s.nan_count, s.posinf_count,
                  s.neginf_count)


def metric_summaries(*, run_ids: Sequence[int], keys: Sequence[str] | None = None) -> dict[int, dict[str, MetricSummary]]:
    qs = MetricSummary.objects.filter(run_id__in=run_ids).order_by("key")
    if keys:
        qs = qs.filter(key__in=keys)
    out: dict[int, dict[str, MetricSummary]] = {rid: {} for rid in run_ids}
    for s in qs:
        out[s.run_id][s.key] = s
    return out


@dataclass(frozen=True)
class SeriesQuery:
    max_points: int = DEFAULT_MAX_POINTS
    x: str = "step"  # or "time" (wall clock, Unix seconds)
    start: float | None = None
    end: float | None = None


def _pick_level(s: MetricSummary, q: SeriesQuery, *, fill_rows: float = FILL_ROWS) -> int | None:
    """The coarsest data needed: None for raw points, else a rollup level index.

    Reads at most about 2 x max_points rows when a level allows it, or up to `fill_rows` (this
    series' share of FILL_ROWS) to fill max_points; the merge down to max_points then keeps exact
    min/max per output bucket.
    """
    if q.x == "time":
        total = max(s.last_wall - s.first_wall, 1e-9)
        lo = s.first_wall if q.start is None else max(q.start, s.first_wall)
        hi = s.last_wall if q.end is None else min(q.end, s.last_wall)
        fraction = max(0.0, min(1.0, (hi - lo) / total)) if s.count > 1 else 1.0
        span_steps = (s.last_step - s.first_step + 1) * fraction
    else:
        lo = s.first_step if q.start is None else max(q.start, s.first_step)
        hi = s.last_step if q.end is None else min(q.end, s.last_step)
        span_steps = max(0.0, hi - lo + 1)
    budget = 2 * q.max_points
    raw_rows = span_steps * min(1.0, s.count / max(1.0, s.last_step - s.first_step + 1))
    if raw_rows <= budget:
        return None
    for level, size in enumerate(LEVELS):
        if span_steps / size + 1 <= budget:
            # A level too coarse to fill max_points (600 steps at 1024 per bucket is one point)
            # gives way to the next finer one only within fill_rows: that one reads up to 16 x
            # max_points rows, which a comparison of 60 long series paid 60 times (issue 33).
            finer_rows = raw_rows if level == 0 else span_steps / LEVELS[level - 1] + 1
            if span_steps / size < q.max_points and finer_rows <= fill_rows:
                return level - 1 if level > 0 else None
            return level
    return len(LEVELS) - 1


def _fetch_many(level: int | None, pairs: Sequence[tuple[int, str]], q: SeriesQuery) -> dict[tuple[int, str], list[Bucket]]:
    """Buckets of each (run, key) in `pairs` at one level (None: raw points), in x order: one
    query however many series ask for this level. Exactly those pairs: a run's other keys may
    be far bigger at this level than the ones that chose it."""
    where, params = _pairs_where(pairs)
    # No ORDER BY: each series is put in order afterwards, on its own. The rows come mostly in order
    # already (points are stored in step order), which Python's sort finishes in one pass,
    # while sorting them all in the database cost more than the rest of the query.
    if level is None:
        return _point_buckets(where, params, q)
    return _rollup_buckets(level, where, params, q)


def _pairs_where(pairs: Sequence[tuple[int, str]]) -> tuple[str, list[Any]]:
    """The SQL condition that matches exactly these (run, key) pairs, and its parameters."""
    keys_of: dict[int, set[str]] = {}
    for rid, key in pairs:
        keys_of.setdefault(rid, set()).add(key)
    # Runs that want the same keys make one (runs x keys) term: usually one term in all, which
    # the database checks far faster than a term per run.
    runs_of: dict[frozenset[str], list[int]] = {}
    for rid, wanted in keys_of.items():
        runs_of.setdefault(frozenset(wanted), []).append(rid)
    params: list[Any] = []
    terms = []
    for keyset, rids in runs_of.items():
        terms.append(f"(run_id IN ({', '.join(['%s'] * len(rids))}) AND key IN ({', '.join(['%s'] * len(keyset))}))")
        params += [*rids, *sorted(keyset)]
    return f"({' OR '.join(terms)})", params


def _x_range_sql(q: SeriesQuery, *, first_col: str, last_col: str) -> tuple[str, list[Any]]:
    """The conditions (each starting " AND") that keep rows reaching into q's x range, and their
    parameters: a row's last x at or after the start, its first x at or before the end."""
    sql = ""
    params: list[Any] = []
    if q.start is not None:
        sql += f" AND {last_col} >= %s"
        params.append(q.start)
    if q.end is not None:
        sql += f" AND {first_col} <= %s"
        params.append(q.end)
    return sql, params


def _point_buckets(where: str, params: list[Any], q: SeriesQuery) -> dict[tuple[int, str], list[Bucket]]:
    """Raw points of the series `where` matches, one bucket each, in x order."""
    by_time = q.x == "time"
    col = "wall_time" if by_time else "step"
    x_range, x_params = _x_range_sql(q, first_col=col, last_col=col)
    sql = f"SELECT run_id, key, step, wall_time, value, flag FROM tracking_metricpoint WHERE {where}{x_range}"
    points: dict[tuple[int, str], list[_PointRow]] = {}
    for point in _fetchall(sql, [*params, *x_params], _PointRow):
        points.setdefault((point.run_id, point.key), []).append(point)
    order = attrgetter("wall_time", "step") if by_time else attrgetter("step")
    out: dict[tuple[int, str], list[Bucket]] = {}
    for pair, point_rows in points.items():
        point_rows.sort(key=order)
        out[pair] = [point_bucket(float(p.wall_time if by_time else p.step), _value(p.value, p.flag)) for p in point_rows]
    return out


def _rollup_buckets(level: int, where: str, params: list[Any], q: SeriesQuery) -> dict[tuple[int, str], list[Bucket]]:
    """Rollup buckets at `level` of the series `where` matches, in x order."""
    lo_col, hi_col = ("first_wall", "last_wall") if q.x == "time" else ("first_step", "last_step")
    x_range, x_params = _x_range_sql(q, first_col=lo_col, last_col=hi_col)
    sql = (f'SELECT run_id, key, bucket, {lo_col}, {hi_col}, "count", finite_count, "sum", "min", "max", nan_count, '
           f"posinf_count, neginf_count FROM tracking_metricrollup WHERE level = %s AND {where}{x_range}")
    rollups: dict[tuple[int, str], list[_RollupRow]] = {}
    for rollup in _fetchall(sql, [level, *params, *x_params], _RollupRow):
        rollups.setdefault((rollup.run_id, rollup.key), []).append(rollup)
    # Rollup buckets never overlap in steps, and wall time rises with steps within a run, so
    # bucket order is x order on either axis.
    out: dict[tuple[int, str], list[Bucket]] = {}
    for pair, rollup_rows in rollups.items():
        rollup_rows.sort(key=attrgetter("bucket"))
        out[pair] = [Bucket(float(r.x_first), float(r.x_last), r.n, r.finite_n, r.total, r.low, r.high, r.nans, r.posinfs,
                            r.neginfs) for r in rollup_rows]
    return out


class _PointRow(NamedTuple):
    """A row of _fetch_many's raw-points query, in its column order."""

    run_id: int
    key: str
    step: int
    wall_time: float
    value: float | None
    flag: int


class _RollupRow(NamedTuple):
    """A row of _fetch_many's rollup query, in its column order (x: steps or wall time)."""

    run_id: int
    key: str
    bucket: int
    x_first: float
    x_last: float
    n: int
    finite_n: int
    total: float
    low: float | None
    high: float | None
    nans: int
    posinfs: int
    neginfs: int


def _fetchall(sql: str, params: Sequence[Any], row: Callable[..., R]) -> list[R]:
    """Rows of a read query as ``row(*columns)``; on PostgreSQL in binary (half the client CPU of
    Django's text rows, which matters at thousands of rows per chart)."""
    if connection.vendor != "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return [row(*columns) for columns in cursor.fetchall()]
    import psycopg
    from psycopg.rows import args_row

    connection.ensure_connection()
    # Errors as Django's own cursor would raise them (an outage is a 503, not a 500).
    with connection.wrap_database_errors, psycopg.Cursor(connection.connection, row_factory=args_row(row)) as cursor:
        cursor.execute(sql, params, binary=True)
        return cursor.fetchall()


def _enc(value: float | None) -> float | str | None:
    """encode() with a shortcut for the common case, a finite float (x - x is 0 only then)."""
    return value if value is not None and value - value == 0.0 else encode(value)


def _empty_series(run_id: int, key: str, q: SeriesQuery) -> dict[str, Any]:
    return {"key": key, "run": run_id, "x_axis": q.x, "level": "raw", "bucket_steps": 1, "count": 0,
            "true_min": None, "true_max": None, "x": [], "mean": [], "min": [], "max": []}


def metric_series_many(
    *, summaries: dict[int, dict[str, MetricSummary]], run_ids: Sequence[int], keys: Sequence[str], q: SeriesQuery,
) -> dict[tuple[int, str], dict[str, Any]]:
    """Downsampled series for every (run, key): x, mean, min and max per bucket, plus each
    series' true extremes (from its summary when the whole range is shown).

    Each series picks its own level from its summary and max_points; then there is one query
    per level in use (at most len(LEVELS) + 1), not one per series."""
    present = [(rid, key, summaries[rid][key]) for rid in run_ids for key in keys if key in summaries.get(rid, {})]
    fill_rows = FILL_ROWS / max(1, len(present))
    wanted: dict[int | None, list[tuple[int, str]]] = {}
    for rid, key, summary in present:
        wanted.setdefault(_pick_level(summary, q, fill_rows=fill_rows), []).append((rid, key))
    fetched: dict[tuple[int, str], tuple[int | None, list[Bucket]]] = {}
    for level, pairs in wanted.items():
        got = _fetch_many(level, pairs, q)
        for pair in pairs:
            fetched[pair] = (level, got.get(pair, []))
    whole = q.start is None and q.end is None
    out: dict[tuple[int, str], dict[str, Any]] = {}
    for rid in run_ids:
        for key in keys:
            series = out[(rid, key)] = _empty_series(rid, key, q)
            if (rid, key) not in fetched:
                continue
            summary = summaries[rid][key]
            level, raw = fetched[(rid, key)]
            buckets = downsample(raw, q.max_points)
            lo, hi = extremes([_summary_bucket(summary)] if whole else buckets)
            series.update(
                level="raw" if level is None else level,
                bucket_steps=1 if level is None else LEVELS[level],
                count=summary.count,
                true_min=encode(lo),
                true_max=encode(hi),
                x=[b.x_last for b in buckets],
                mean=[_enc(b.last if b.count == 1 and b.last is not None else b.mean) for b in buckets],
                min=[_enc(b.lo) for b in buckets],
                max=[_enc(b.hi) for b in buckets],
            )
    return out


def metric_series(*, run_id: int, summary: MetricSummary | None, key: str, q: SeriesQuery) -> dict[str, Any]:
    """One downsampled series: x, mean, min and max per bucket, plus the series' true extremes."""
    summaries = {run_id: {key: summary}} if summary is not None else {}
    return metric_series_many(summaries=summaries, run_ids=[run_id], keys=[key], q=q)[(run_id, key)]


def metric_series_for_runs(*, run_ids: Sequence[int], keys: Sequence[str], q: SeriesQuery) -> list[dict[str, Any]]:
    summaries = metric_summaries(run_ids=run_ids, keys=keys)
    many = metric_series_many(summaries=summaries, run_ids=run_ids, keys=keys, q=q)
    return [many[(rid, key)] for key in keys for rid in run_ids]


# --- comparison ---------------------------------------------------------------------------------

def _flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, dict) and data:
        out: dict[str, Any] = {}
        for k, v in data.items():
            out.update(_flatten(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: data} if prefix else {}


def _diff_rows(per_run: list[dict[str, Any]]) -> list[dict[str, Any]]:
    names = sorted({name for flat in per_run for name in flat})
    rows = []
    for name in names:
        values = [flat.get(name) for flat in per_run]
        distinct = {json.dumps(v, sort_keys=True, default=str) for v in values}
        rows.append({"name": name, "values": values, "differs": len(distinct) > 1})
    return rows


def run_lineage(*, run: Run, attempt: Attempt | None = None) -> dict[str, Any]:
    """Where a run came from: template version, init checkpoint, code snapshot and what its job reported."""
    if attempt is None:
        attempt = run.attempts.order_by("-number").first()
    return _lineage(run, attempt)


def _lineage(run: Run, attempt: Attempt | None) -> dict[str, Any]:
    ckpt = run.init_checkpoint
    return {
        "template": f"{run.template.slug} v{run.template.version}",
        "template_source": run.template.source_hash,
        "parent_run": run.parent_id,
        "init_checkpoint": {"id": ckpt.pk, "run": ckpt.run_id, "step": ckpt.step, "sha256": ckpt.sha256} if ckpt else None,
        "code_snapshot": {"sha256": run.code_snapshot.sha256, "git_commit": run.code_snapshot.git_commit} if run.code_snapshot else None,
        "reported": attempt.lineage if attempt else {},
    }


def _latest_attempts(run_ids: Sequence[int]) -> dict[int, Attempt]:
    latest: dict[int, Attempt] = {}
    for a in Attempt.objects.filter(run_id__in=run_ids).order_by("run_id", "-number"):
        latest.setdefault(a.run_id, a)
    return latest


def metric_coverage(*, run_ids: Sequence[int]) -> list[dict[str, Any]]:
    """The metrics these runs logged, those logged by the most of them first (ties by name), each
    with the runs that logged it (in run_ids' order). The comparison's parallel coordinates start
    on the first: a run without the chosen metric has no value on its axis, and so no line."""
    runs_of: dict[str, set[int]] = {}
    for run_id, key in MetricSummary.objects.filter(run_id__in=run_ids).values_list("run_id", "key"):
        runs_of.setdefault(key, set()).add(run_id)
    return _by_coverage(runs_of, run_ids)


def _by_coverage(runs_of: dict[str, set[int]], run_ids: Sequence[int]) -> list[dict[str, Any]]:
    order = sorted(runs_of, key=lambda key: (-len(runs_of[key]), key))
    return [{"key": key, "runs": [rid for rid in run_ids if rid in runs_of[key]]} for key in order]


def run_compare(*, runs: Sequence[Run], keys: Sequence[str] | None, q: SeriesQuery) -> dict[str, Any]:
    """Runs side by side: a fixed number of queries whatever the number of runs and keys
    (runs come with template, project, checkpoint and snapshot already joined)."""
    run_ids = [r.pk for r in runs]
    summaries = metric_summaries(run_ids=run_ids)
    all_keys = sorted({k for per in summaries.values() for k in per})
    # Past the limit, the keys most of the runs logged rather than the alphabetically first: a
    # run whose metrics all sort late would be on none of the charts. Shown in name order.
    widest = _by_coverage({k: {rid for rid, per in summaries.items() if k in per} for k in all_keys}, run_ids)
    chosen = list(keys) if keys else sorted(m["key"] for m in widest[:COMPARE_MAX_KEYS])
    attempts = _latest_attempts(run_ids)
    lineages = {r.pk: _lineage(r, attempts.get(r.pk)) for r in runs}
    energy = runs_energy(runs=runs)
    out_runs = []
    for r in runs:
        out_runs.append({
            "id": r.pk, "name": r.name or f"run {r.pk}", "label": run_label(pk=r.pk, name=r.name), "status": r.status,
            "project": r.project.full_slug,
            "template": r.template.slug, "template_version": r.template.version,
            "family": r.family, "tags": r.tags, "params": r.params, "lineage": lineages[r.pk],
            "created_at": r.created_at.isoformat(), "url": f"/runs/{r.pk}/",
            "summaries": {k: summary_dict(s) for k, s in summaries[r.pk].items() if k in chosen},
            "energy": energy[r.pk].as_dict(),
        })
    many = metric_series_many(summaries=summaries, run_ids=run_ids, keys=chosen, q=q)
    series = {k: [many[(rid, k)] for rid in run_ids] for k in chosen}
    return {
        "runs": out_runs,
        "keys": chosen,
        "available_keys": all_keys,
        "params": _diff_rows([_flatten(r.params) for r in runs]),
        "lineage": _diff_rows([_flatten(lineages[r.pk]) for r in runs]),
        "tags": _diff_rows([_flatten(r.tags) for r in runs]),
        # What the agents captured (latest attempt, rank 0), apart from what the jobs reported.
        "environment": environment_compare(run_ids=run_ids),
        "series": series,
    }


# --- checkpoints, logs, energy, progress ---------------------------------------------------------

class RunRecords(NamedTuple):
    """Which of the run page's cards have anything to read."""

    environments: bool
    energy_samples: bool
    checkpoints: bool
    log_notes: bool


def run_records(*, run: Run) -> RunRecords:
    """One query for what a run has on record: most running runs have no environment, energy
    sample, checkpoint or agent note yet, and their page then reads none of those tables again
    (a query each, then a card each added to every view of every run page)."""
    found = Run.objects.filter(pk=run.pk).annotate(
        e=Exists(AttemptEnvironment.objects.filter(attempt__run_id=OuterRef("pk"))),
        s=Exists(EnergySample.objects.filter(attempt__run_id=OuterRef("pk"))),
        c=Exists(Checkpoint.objects.filter(run_id=OuterRef("pk"))),
        n=Exists(LogChunk.objects.filter(run_id=OuterRef("pk"), stream="agent"))).values_list("e", "s", "c", "n").first()
    return RunRecords(*found) if found is not None else RunRecords(False, False, False, False)


def checkpoint_overview(*, run: Run, with_deleted: bool = False, recorded: bool = True) -> dict[str, Any]:
    """The run page's checkpoints: the kept ones as rows, and those retention deleted as how many
    and from which step to which, their rows only `with_deleted` (someone unfolded them). A long
    run keeps a few of its hundreds: listed whole, they made its page 16,000 px tall.
    recorded=False: the caller knows the run has none (run_records), and none is looked for."""
    ordered = Checkpoint.objects.filter(run=run).select_related("attempt").order_by("step", "id")
    deleted: dict[str, Any] = {"count": 0, "first_step": None, "last_step": None}
    if recorded:
        deleted = Checkpoint.objects.filter(run=run, deleted_at__isnull=False).aggregate(
            count=Count("id"), first_step=Min("step"), last_step=Max("step"))
    rows = None
    if with_deleted and deleted["count"]:
        rows = checkpoint_rows(run=run, checkpoints=ordered.filter(deleted_at__isnull=False))
    kept_ckpts = list(ordered.filter(deleted_at__isnull=True)) if recorded else []
    kept = checkpoint_rows(run=run, checkpoints=kept_ckpts)
    retention = checkpoint_retention(run.checkpoint_policy)
    best = checkpoint_best_id(run=run, kept=[(c.pk, c.metrics) for c in kept_ckpts])
    return {"kept": kept, "deleted": deleted if deleted["count"] else None, "deleted_rows": rows,
            "retention": retention, "best_id": best}


def checkpoint_best_id(*, run: Run, kept: Sequence[tuple[int, Any]] | None = None) -> int | None:
    """The checkpoint retention keeps as the run's best (the page's badge, the API's ``best``):
    only when its policy keeps the last K and a best; None otherwise. ``kept``: the kept
    checkpoints' (id, metrics) in step order, when the caller has them already."""
    retention = checkpoint_retention(run.checkpoint_policy)
    if not (retention["keep_last"] and retention["keep_best"]):
        return None
    if kept is None:
        kept = list(Checkpoint.objects.filter(run=run, deleted_at__isnull=True).order_by("step", "id").values_list("id", "metrics"))
    # By the metrics the job recorded with each checkpoint, the only ones its SDK ranks by
    # (not those the card fills in from the run's points at that step).
    return best_checkpoint([{"id": pk, "metrics": metrics} for pk, metrics in kept], retention["keep_best"])


def checkpoint_retention(policy: Any) -> dict[str, Any]:
    """What a run's ``checkpoint_policy`` keeps, as the job's SDK reads it (agents/runner.py passes
    keep_last and keep_best on): the last ``keep_last`` (0: every one) and, beside them, the one
    with the best ``keep_best = (metric, "min"|"max")`` (None when unset or unreadable)."""
    policy = policy if isinstance(policy, dict) else {}
    try:
        keep_last = max(0, int(policy.get("keep_last") or 0))
    except (TypeError, ValueError):
        keep_last = 0
    raw = policy.get("keep_best")
    keep_best: tuple[str, str] | None = None
    if isinstance(raw, str):
        metric, _, mode = raw.strip().rpartition(":")
        if metric and mode in ("min", "max"):
            keep_best = (metric, mode)
    return {"keep_last": keep_last, "keep_best": keep_best}


def best_checkpoint(rows: Sequence[dict[str, Any]], keep_best: tuple[str, str]) -> int | None:
    """The id of the checkpoint row whose recorded metrics have the best ``keep_best`` value
    (lowest for "min", highest for "max"), as the SDK keeps it (sdk/trainyard/_job_checkpoints.py
    best_record): NaN or a missing value is never best, and the latest of equals wins. ``rows``
    (id and metrics) in step order; None if none carries the metric."""
    metric, mode = keep_best
    chosen: tuple[float, int] | None = None
    for row in rows:
        raw = row["metrics"].get(metric) if isinstance(row.get("metrics"), dict) else None
        try:
            value = decode(raw) if raw is not None else math.nan
        except ValueError:
            continue
        if math.isnan(value):
            continue
        score = value if mode == "max" else -value
        if chosen is None or score >= chosen[0]:
            chosen = (score, row["id"])
    return chosen[1] if chosen else None


def checkpoint_rows(*, run: Run, checkpoints: Iterable[Checkpoint], best_id: int | None = None) -> list[dict[str, Any]]:
    """Rows for these checkpoints of ``run`` (attempt joined), in the order given (the API pages
    them); ``best`` marks the one whose id is ``best_id`` (checkpoint_best_id)."""
    ckpts = list(checkpoints)
    need = [c.step for c in ckpts if not c.metrics]
    at_step: dict[int, dict[str, Any]] = {}
    if need:
        for key, step, value, flag in MetricPoint.objects.filter(run=run, step__in=need).values_list("key", "step", "value", "flag"):
            at_step.setdefault(step, {})[key] = encode(_value(value, flag))
    return [
        {
            "id": c.pk, "step": c.step, "file_name": c.file_name, "size": c.size, "sha256": c.sha256,
            "metrics": c.metrics or at_step.get(c.step, {}), "attempt": c.attempt.number, "created_at": c.created_at.isoformat(),
            "deleted": c.deleted_at is not None, "available": bool(c.stored_path) and c.deleted_at is None,
            "download_url": f"/api/v1/runs/{run.pk}/checkpoints/{c.pk}/download/" if c.stored_path and c.deleted_at is None else None,
            "best": c.pk == best_id,
        }
        for c in ckpts
    ]


def log_chunks(*, run: Run, after: int, limit: int) -> dict[str, Any]:
    chunks = list(LogChunk.objects.filter(run=run, pk__gt=after).select_related("attempt").order_by("pk")[:limit])
    return {
        "chunks": [{"id": c.pk, "attempt": c.attempt.number, "rank": c.rank, "stream": c.stream, "text": c.text,
                    "created_at": c.created_at.isoformat()} for c in chunks],
        "next": chunks[-1].pk if chunks else after,
        "more": len(chunks) == limit,
    }


LOG_NOTES_SHOWN = 20


def log_note_words(text: str) -> str:
    """An agent's note ("[trainyard: 6.0 MB of output dropped ...]") as a sentence for a page."""
    return text.strip().removeprefix("[trainyard: ").removesuffix("]") + "."


def log_notes(*, run: Run) -> list[dict[str, Any]]:
    """The agent's own notes in a run's log (how much of a flooding job's output it dropped),
    oldest first: the page shows them above the log, whose start a long log scrolls away."""
    chunks = LogChunk.objects.filter(run=run, stream="agent").select_related("attempt").order_by("pk")[:LOG_NOTES_SHOWN]
    return [{"id": c.pk, "attempt": c.attempt.number, "rank": c.rank, "text": log_note_words(c.text)} for c in chunks]


def energy_series(*, run: Run, max_points: int = 1000) -> dict[str, Any]:
    """Per-device samples and the run's cumulative energy over time (sum of each device's latest
    reading), with the run's total as recorded and the unit that total reads best in."""
    samples = list(EnergySample.objects.filter(attempt__run=run).select_related("attempt", "node").order_by("at", "id"))
    step = max(1, math.ceil(len(samples) / max_points))
    devices: dict[str, dict[str, Any]] = {}
    latest: dict[tuple[int, int, int], float] = {}
    cumulative: dict[str, list[Any]] = {"t": [], "energy_j": []}
    for i, s in enumerate(samples):
        latest[(s.attempt_id, s.node_id, s.device_index)] = s.energy_j
        name = f"{s.node.hostname}:{'node' if s.device_index < 0 else s.device_index}"
        keep = i % step == 0 or i == len(samples) - 1
        if not keep:
            continue
        d = devices.setdefault(name, {"device": name, "t": [], "power_w": [], "utilization": [], "energy_j": [], "estimated": s.estimated})
        d["t"].append(s.at.isoformat())
        d["power_w"].append(s.power_w)
        d["utilization"].append(s.utilization)
        d["energy_j"].append(s.energy_j)
        cumulative["t"].append(s.at.isoformat())
        cumulative["energy_j"].append(sum(latest.values()))
    # The total the run detail API and the finance pages show: runs written without samples
    # (demo history, imports) still used energy, and the samples are thinned for the chart.
    total = run_energy(run=run)["joules"] or sum(latest.values())
    unit = energy_unit(total)
    return {"devices": list(devices.values()), "cumulative": cumulative, "total_j": total, "total_kwh": total / 3.6e6,
            "estimated": run.energy_estimated, "total_text": energy_text(total), "unit": unit.name, "unit_j": unit.joules,
            # Whole-node CPU readings carry neither: the page says so rather than draw empty axes.
            "power_reported": any(s.power_w is not None for s in samples),
            "utilization_reported": any(s.utilization is not None for s in samples)}


def queue_standing(*, run: Run) -> dict[str, Any] | None:
    """Where a queued run stands (written by the scheduler's passes); None once it has left the queue."""
    if run.status != RunStatus.QUEUED:
        return None
    return {"pool": run.pool.name, "position": run.queue_position, "estimated_start": run.estimated_start,
            "estimated_start_low": run.estimated_start_low, "estimated_start_high": run.estimated_start_high}


def run_progress(*, run: Run, now: datetime | None = None) -> dict[str, Any]:
    now = now or timezone.now()
    rate = shown = None
    if run.started_at:
        rate = run_selectors.run_live_rate(run=run, started_at=run.started_at)
        # A run too short for a second report still shows how fast it went, start-up included.
        shown = rate or run_selectors.run_live_rate(run=run, started_at=run.started_at, settled=False)
    eta_s = None
    if rate and run.total_steps and run.total_steps > run.steps_done:
        eta_s = (run.total_steps - run.steps_done) / rate
    return {"steps_done": run.steps_done, "total_steps": run.total_steps, "fraction": run.progress, "steps_per_s": shown,
            "eta_s": eta_s}


def attempt_rows(*, run: Run, attempts: Iterable[Attempt] | None = None) -> list[dict[str, Any]]:
    """The run's attempts in order, times as datetimes (the page's `when` filter writes them);
    `attempts` when the caller already read them (by number, with their assignments and nodes)."""
    if attempts is None:
        attempts = Attempt.objects.filter(run=run).prefetch_related("assignments__node").order_by("number")
    return [{"number": a.number, "status": a.status, "reason": a.reason,
             "nodes": sorted({asg.node.hostname for asg in a.assignments.all()}), "start": a.started_at or a.created_at,
             "end": a.ended_at, "exit_code": a.exit_code, "resumed_from_step": a.resumed_from_step}
            for a in attempts]


def attempt_timeline(*, run: Run, attempts: Iterable[Attempt] | None = None,
                     rows: Sequence[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """attempt_rows() with ISO times, as the run page's script and the history API read them;
    from `rows` when the caller built them already."""
    if rows is None:
        rows = attempt_rows(run=run, attempts=attempts)
    return [{**row, "start": row["start"].isoformat(), "end": row["end"].isoformat() if row["end"] else None} for row in rows]


def metric_keys_for_runs(*, run_ids: Iterable[int] | QuerySet[Any]) -> list[str]:
    # DISTINCT in the database: a list page asks for the keys of up to 2,000 runs, as a subquery
    # (a queryset of ids) rather than 2,000 parameters.
    ids = run_ids if isinstance(run_ids, QuerySet) else list(run_ids)
    return list(MetricSummary.objects.filter(run_id__in=ids).order_by("key").values_list("key", flat=True).distinct())


# --- sweeps -------------------------------------------------------------------------------------

# The metric a trial's row shows, first found wins: held-out figures before training ones.
TRIAL_METRICS = ("val_accuracy", "eval_accuracy", "accuracy", "val_loss", "eval_loss", "loss")


def sweep_trials(*, parent: Run, runs: QuerySet[Run]) -> dict[str, Any]:
    """A sweep parent's trials for its page: each one's id, name, status, the parameters that
    differ between them and one final metric, plus what they cost and used together.

    `runs` is already scoped to the viewer; the trials are those of it whose parent is `parent`.
    A parent runs nothing itself, so its own cost, energy and attempts are always empty."""
    trials = list(runs.filter(parent=parent).prefetch_related("attempts").order_by("pk"))
    flat = [_flatten(t.params) for t in trials]
    varying = [row["name"] for row in _diff_rows(flat) if row["differs"]]
    if not varying:  # one trial, or all alike: the swept names still say what each one tried
        varying = [name for name in (parent.params.get("space") or {}) if any(name in f for f in flat)]
    summaries = metric_summaries(run_ids=[t.pk for t in trials])
    keys = {key for per in summaries.values() for key in per}
    metric = next((k for k in TRIAL_METRICS if k in keys), min(keys) if keys else None)
    # The sweep's own objective, where it names one, is the metric shown and ranked by.
    objective = sweep_objective(params=parent.params, metric=metric)
    metric = objective["metric"] if objective else metric
    rows = []
    for trial, params in zip(trials, flat, strict=True):
        summary = summaries[trial.pk].get(metric) if metric else None
        rows.append({"id": trial.pk, "label": run_label(pk=trial.pk, name=trial.name), "status": trial.status,
                     "params": [value_text(params[name]) if name in params else "–" for name in varying],
                     "values": [params.get(name) for name in varying],
                     "metric": summary_dict(summary)["last"] if summary is not None else None})
    best = sweep_best_trial(rows=rows, goal=objective["goal"]) if objective else None
    for row in rows:
        row["best"] = row["id"] == best
    ids = [t.pk for t in trials][:COMPARE_MAX_RUNS]
    first = trials[0] if trials else None
    return {
        "rows": rows, "param_names": varying, "metric": metric, "objective": objective, "best": best,
        "chart": {"param_names": varying, "metric": metric, "goal": objective["goal"] if objective else "",
                  "trials": [{k: r[k] for k in ("id", "label", "values", "metric", "best")} for r in rows]},
        "compare_url": f"/compare/?runs={','.join(map(str, ids))}" if len(ids) >= COMPARE_MIN_RUNS else None,
        "finished": sum(1 for t in trials if t.is_finished), "count": len(trials),
        "cost": sum((run_cost(run=t) for t in trials), Decimal(0)),
        "energy_j": sum(run_energy(run=t)["joules"] for t in trials),
        "nodes": first.nodes if first else None, "devices_per_node": first.devices_per_node if first else None,
    }
