"""A run's start-up, step by step, for the run page: placed on a node, claimed by its agent,
process started, first metric. Between placement and the first report a run shows no steps,
rate or ETA; these say where the time goes (environment, imports, data loading)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.db.models import Min
from django.utils import timezone

from apps.core.text import hours_minutes
from apps.runs.models import ATTEMPT_ENDED, Attempt, Run
from apps.tracking.models import MetricSummary

# (key, label, what the page says while it waits for the step)
START_STEPS = (
    ("placed", "Placed on node", "waiting to be placed"),
    ("claimed", "Claimed by its agent", "waiting for the node's agent to claim it"),
    ("started", "Process started", "waiting for the process to start"),
    ("first_report", "First metric", "waiting for the first metric"),
)


def _first_report_at(*, run: Run, began: datetime) -> datetime | None:
    """When the attempt that began at `began` first reported: its first progress report (which
    run.progress_from_at holds once this attempt has sent one) or its first metric point,
    whichever came first. Summaries span all attempts, so theirs counts only if it is later
    than `began` (a retry's first point is found through its progress report)."""
    candidates = []
    if run.progress_from_at is not None and run.progress_from_at >= began:
        candidates.append(run.progress_from_at)
    first_wall = MetricSummary.objects.filter(run=run, first_wall__gt=0).aggregate(m=Min("first_wall"))["m"]
    if first_wall is not None and first_wall >= began.timestamp():
        candidates.append(datetime.fromtimestamp(first_wall, tz=UTC))
    return min(candidates) if candidates else None


def _claimed_at(attempt: Attempt) -> datetime | None:
    """When the last node of the gang claimed its share (the gang is claimed once all have)."""
    times = [a.claimed_at or a.started_at for a in attempt.assignments.all()]
    if not times or any(t is None for t in times):
        return None
    return max(t for t in times if t is not None)


def run_starting(*, run: Run, attempt: Attempt | None = None, now: datetime | None = None) -> dict[str, Any] | None:
    """The current attempt's start-up steps with their times (datetimes: the page's `when`
    filter and the API's encoder write them), the step it waits for, and a
    sentence for the page ("Starting: process started 4 s ago, waiting for the first metric").
    None for a run never placed. `attempt`: the current one, if the caller read it (with its
    assignments and nodes)."""
    now = now or timezone.now()
    if attempt is None:
        attempt = Attempt.objects.filter(run=run).prefetch_related("assignments__node").order_by("-number").first()
        if attempt is None:
            return None
    nodes = sorted({a.node.hostname for a in attempt.assignments.all()})
    times = {
        "placed": attempt.created_at,
        "claimed": _claimed_at(attempt),
        "started": attempt.started_at,
        "first_report": _first_report_at(run=run, began=min(attempt.created_at, attempt.started_at or attempt.created_at)),
    }
    # A later step implies the earlier ones (a report after a restart of the agent, say).
    for i in range(len(START_STEPS) - 2, -1, -1):
        key, later = START_STEPS[i][0], START_STEPS[i + 1][0]
        if times[key] is None and times[later] is not None:
            times[key] = times[later]
    steps: list[dict[str, Any]] = []
    previous: datetime | None = None
    for key, label, _ in START_STEPS:
        at = times[key]
        after_s = (at - previous).total_seconds() if at is not None and previous is not None else None
        if key == "placed" and len(nodes) != 1:
            # A gang names its nodes; demo attempts (seed_demo) have none to name.
            label = "Placed on nodes" if nodes else "Placed"
        steps.append({"key": key, "title": label, "at": at,
                      "after_s": None if after_s is None else max(0.0, after_s),
                      "detail": ", ".join(nodes) if key == "placed" else ""})
        previous = at or previous
    waiting = next((i for i, (key, _, _) in enumerate(START_STEPS) if times[key] is None), None)
    ended = attempt.status in ATTEMPT_ENDED or run.is_finished
    starting = waiting is not None and not ended
    return {"attempt": attempt.number, "steps": steps, "starting": starting,
            "waiting_for": START_STEPS[waiting][0] if starting and waiting is not None else None,
            "text": _words(times, waiting, ended=ended, attempt=attempt, now=now)}


def _words(times: dict[str, datetime | None], waiting: int | None, *, ended: bool, attempt: Attempt, now: datetime) -> str:
    label = {key: words for key, words, _ in START_STEPS}
    if waiting is None:
        placed, started, first = times["placed"], times["started"], times["first_report"]
        assert placed is not None and first is not None
        took = f"first metric {hours_minutes((first - placed).total_seconds())} after placement"
        if started is not None:
            took += f", {hours_minutes((first - started).total_seconds())} after the process started"
        return f"Attempt {attempt.number} started: {took}."
    if ended and attempt.status == "succeeded":
        return f"Attempt {attempt.number} succeeded without reporting a metric."
    if ended:
        done = [key for key, _, _ in START_STEPS if times[key] is not None]
        last = label[done[-1]].lower() if done else "placed"
        return f"Attempt {attempt.number} ended ({attempt.status}) before its first metric; last step: {last}."
    key, _, wait = START_STEPS[waiting]
    if waiting == 0:
        return f"Starting: {wait}."
    previous_key = START_STEPS[waiting - 1][0]
    at = times[previous_key]
    assert at is not None
    ago = hours_minutes(max(0.0, (now - at).total_seconds()))
    return f"Starting: {label[previous_key].lower()} {ago} ago, {wait}."
