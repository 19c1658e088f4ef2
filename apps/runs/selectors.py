"""Reads over runs and attempts, including the fencing check every agent report goes through."""

from __future__ import annotations

import math
from datetime import datetime
from typing import NamedTuple

from django.db import connection
from django.db.models import OuterRef, QuerySet, Subquery

from apps.core.errors import Conflict, NotFound
from apps.runs.models import FINISHED_STATUSES, Assignment, Attempt, Run
from apps.tenants.selectors import AnyUser, team_ids_for_user


def run_list(*, user: AnyUser) -> QuerySet[Run]:
    return Run.objects.filter(project__team_id__in=team_ids_for_user(user=user)).select_related("project__team", "template", "pool")


def attempt_for_node_report(*, node_id: int, attempt_id: int, number: int | None = None, allow_finished: bool = False) -> Attempt:
    """The attempt an agent reports for, if it may still report for it.

    Unknown attempts, and attempts with no assignment on this node, are 404 (another node's run
    is not this agent's business). A stale attempt (the run has moved on to a newer attempt, or
    the number does not match) is 409, which tells the agent to kill it: that is the fence.
    """
    # One query: the run's latest attempt number comes along as a subquery.
    newest = Attempt.objects.filter(run_id=OuterRef("run_id")).order_by("-number").values("number")[:1]
    attempt = (Attempt.objects.select_related("run").annotate(latest_number=Subquery(newest))
               .filter(pk=attempt_id, assignments__node_id=node_id).first())
    if attempt is None:
        raise NotFound(f"attempt {attempt_id} is not assigned to this node")
    _fence(attempt_id=attempt_id, number=number, found=attempt.number, latest=attempt.latest_number,
           run_id=attempt.run_id, run_status=attempt.run.status, allow_finished=allow_finished)
    return attempt


# attempt_for_node_report's check as one plain statement, for metric batches (an agent sends
# one every few seconds): the same answer without building the attempt and its run.
_FENCE_SQL = (
    "SELECT t.run_id, t.number, r.status, (SELECT MAX(l.number) FROM {attempt} l WHERE l.run_id = t.run_id) "
    "FROM {attempt} t JOIN {run} r ON r.id = t.run_id "
    "WHERE t.id = %s AND EXISTS (SELECT 1 FROM {assignment} a WHERE a.attempt_id = t.id AND a.node_id = %s)"
)


class _FenceRow(NamedTuple):
    """A row of `_FENCE_SQL`, in its column order."""

    run_id: int
    number: int
    run_status: str
    latest_number: int | None


def attempt_fence_for_node(*, node_id: int, attempt_id: int, number: int | None = None, allow_finished: bool = False) -> tuple[int, int]:
    """(run id, attempt number) of the attempt an agent reports for; errors as attempt_for_node_report."""
    sql = _FENCE_SQL.format(attempt=Attempt._meta.db_table, run=Run._meta.db_table, assignment=Assignment._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(sql, [attempt_id, node_id])
        fetched = cursor.fetchone()
    if fetched is None:
        raise NotFound(f"attempt {attempt_id} is not assigned to this node")
    row = _FenceRow._make(fetched)
    _fence(attempt_id=attempt_id, number=number, found=row.number, latest=row.latest_number, run_id=row.run_id,
           run_status=row.run_status, allow_finished=allow_finished)
    return row.run_id, row.number


def _fence(*, attempt_id: int, number: int | None, found: int, latest: int | None, run_id: int, run_status: str,
           allow_finished: bool) -> None:
    if number is not None and found != number:
        raise Conflict(f"attempt {attempt_id} is number {found}, not {number}", code="stale_attempt")
    if latest != found:
        raise Conflict(f"attempt {found} of run {run_id} was superseded by attempt {latest}", code="stale_attempt")
    if not allow_finished and run_status in FINISHED_STATUSES:
        raise Conflict(f"run {run_id} is already {run_status}", code="run_finished")


# A rate measured over less than this is mostly report jitter.
MIN_RATE_SPAN_S = 1.0


def run_live_rate(*, run: Run, started_at: datetime, resumed_from_step: int | None = None, settled: bool = True,
                  min_span_s: float = MIN_RATE_SPAN_S) -> float | None:
    """Steps per second of the run's current attempt (started at `started_at`), or None before
    it reports progress.

    Measured from the attempt's first progress report, which leaves start-up out: counted from
    the start, a 40,000-step run five seconds in reads many times too slow, and so would every
    queue estimate behind it. Until a later report is a second or more past the first there is
    no rate (callers fall back on history), unless `settled` is False: then, as for runs from
    before the anchor existed, the rate since the start (to show, not to predict with).
    `min_span_s` asks for a longer measurement (the scheduler's, while a run warms up)."""
    return run_live_measure(run=run, started_at=started_at, resumed_from_step=resumed_from_step, settled=settled,
                            min_span_s=min_span_s)[0]


def run_live_measure(*, run: Run, started_at: datetime, resumed_from_step: int | None = None, settled: bool = True,
                     min_span_s: float = MIN_RATE_SPAN_S) -> tuple[float | None, float]:
    """`run_live_rate` and the seconds it was measured over: the time since the attempt's first
    report, or infinite when counted from the start (no anchor), which meets any span asked for."""
    if run.progress_at is None or run.progress_at <= started_at:
        return None, math.inf
    first_at, first_step = run.progress_from_at, run.progress_from_step
    if first_at is not None and first_step is not None and first_at >= started_at:
        span = (run.progress_at - first_at).total_seconds()
        if span >= max(MIN_RATE_SPAN_S, min_span_s) and run.steps_done > first_step:
            return (run.steps_done - first_step) / span, span
        if settled:
            return None, span
    done = run.steps_done - (resumed_from_step or 0)
    return (done / max(1e-3, (run.progress_at - started_at).total_seconds()) if done > 0 else None), math.inf


def run_live_eta_s(*, run: Run, started_at: datetime, resumed_from_step: int | None = None) -> float | None:
    """Seconds the run has left at its live rate ("about N seconds left" on the run page), or
    None without a rate or a step count still ahead. The queue's estimates for runs waiting on
    this one's devices start from the same figure, so the two pages agree."""
    rate = run_live_rate(run=run, started_at=started_at, resumed_from_step=resumed_from_step)
    if not rate or not run.total_steps or run.total_steps <= run.steps_done:
        return None
    return (run.total_steps - run.steps_done) / rate
