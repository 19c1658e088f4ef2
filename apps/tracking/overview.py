"""What is going on with a set of runs, at a glance: the runs card on the home and project pages.

Running runs say how far they are and how long they have left; queued runs say their place in
line and when they should start (the scheduler's estimate); the last few finished runs say how
they ended and how long they took. Every figure is a display string, so the template only reads.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db.models import Case, Count, F, IntegerField, QuerySet, Value, When
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.timesince import timesince

from apps.core.text import fmt_duration
from apps.runs.models import FINISHED_STATUSES, Run, RunStatus
from apps.tracking.selectors import run_progress

ACTIVE = (RunStatus.RUNNING, RunStatus.SCHEDULED, RunStatus.PREEMPTED, RunStatus.LOST, RunStatus.QUEUED)
RECENT_DAYS = 7


def _standing(run: Run, now: datetime) -> str:
    """Where an unfinished run stands, in one line."""
    if run.status == RunStatus.RUNNING:
        progress = run_progress(run=run, now=now)
        if run.total_steps:
            line = f"{run.steps_done:,} of {run.total_steps:,} steps"
            if progress["eta_s"] is not None:
                line += f" · about {fmt_duration(progress['eta_s'])} left"
            return line
        started = run.started_at or run.created_at
        return f"running for {fmt_duration((now - started).total_seconds())}"
    if run.status == RunStatus.SCHEDULED:
        return "placed on a node; starting"
    if run.status == RunStatus.QUEUED:
        where = f"#{run.queue_position} in pool {run.pool.name}" if run.queue_position else f"waiting in pool {run.pool.name}"
        if run.estimated_start is None:
            return f"{where} · {run.status_reason or 'no estimate yet'}"
        if run.estimated_start <= now:
            return f"{where} · should start any moment"
        at = date_format(timezone.localtime(run.estimated_start), "H:i")
        return f"{where} · starts in about {fmt_duration((run.estimated_start - now).total_seconds())} ({at})"
    return run.status_reason or "going back to the queue"


def _ended(run: Run, now: datetime) -> str:
    finished = run.finished_at or run.updated_at
    # timesince says "0 minutes" for the first minute.
    when = "just now" if (now - finished).total_seconds() < 60 else f"{timesince(finished, now)} ago"
    line = f"{run.get_status_display().lower()} {when}"
    if run.started_at:
        line += f" after {fmt_duration((finished - run.started_at).total_seconds())}"
    return line


def _row(run: Run, words: str) -> dict[str, Any]:
    return {
        "pk": run.pk, "name": run.name, "status": run.status, "project": run.project.full_slug,
        "pct": None if run.progress is None or run.status != RunStatus.RUNNING else round(run.progress * 100),
        "words": words, "reason": run.status_reason,
        # Why it waits or failed, as a line of its own (a tooltip is lost to touch and keyboards),
        # unless the words already say it.
        "why": run.status_reason if run.status in (RunStatus.QUEUED, RunStatus.FAILED, RunStatus.LOST, RunStatus.PREEMPTED)
        and run.status_reason not in words else "",
    }


def runs_overview(*, runs: QuerySet[Run], now: datetime | None = None, active_limit: int = 8,
                  recent_limit: int = 5) -> dict[str, Any]:
    """Counts, the unfinished runs (running first, then the queue in order), and the latest finished."""
    now = now or timezone.now()
    runs = runs.select_related("project__team", "pool")
    active = runs.filter(status__in=ACTIVE)
    rank = Case(*(When(status=s, then=Value(i)) for i, s in enumerate(ACTIVE)), output_field=IntegerField())
    shown = active.annotate(rank=rank).order_by("rank", F("queue_position").asc(nulls_last=True), "started_at", "pk")
    counts = dict(active.values_list("status").annotate(n=Count("pk")).values_list("status", "n"))
    finished = runs.filter(status__in=FINISHED_STATUSES)
    lately = dict(finished.filter(finished_at__gte=now - timedelta(days=RECENT_DAYS))
                  .values_list("status").annotate(n=Count("pk")).values_list("status", "n"))
    running = counts.get(RunStatus.RUNNING, 0) + counts.get(RunStatus.SCHEDULED, 0)
    waiting = sum(counts.get(s, 0) for s in (RunStatus.QUEUED, RunStatus.PREEMPTED, RunStatus.LOST))
    return {
        "running": running,
        "waiting": waiting,
        "succeeded": lately.get(RunStatus.SUCCEEDED, 0),
        "failed": lately.get(RunStatus.FAILED, 0),
        "cancelled": lately.get(RunStatus.CANCELLED, 0),
        "recent_days": RECENT_DAYS,
        "active": [_row(run, _standing(run, now)) for run in shown[:active_limit]],
        "more_active": max(0, running + waiting - active_limit),
        "recent": [_row(run, _ended(run, now)) for run in finished.order_by(F("finished_at").desc(nulls_last=True), "-pk")[:recent_limit]],
    }
