"""A run's history for its page: what the audit log holds about the run and its attempts.

Engineers do not see the staff-only audit page, yet "who cancelled this, and when was it
preempted, for whom?" is a question about their own run. The run page is already limited to
the run's team, so its own events can be shown there.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Q

from apps.audit.models import AuditEvent
from apps.runs.models import Attempt, Run

# A run requeued many times has many events; the page shows the latest ones.
HISTORY_LIMIT = 200
# Verbs whose action name reads badly on its own.
VERBS = {"submit": "submitted", "seeded": "written as demo data", "preempt": "preemption ordered", "claimed": "claimed by its node",
         "rerun": "submitted as a rerun", "clone": "submitted as an edited clone", "annotate": "notes or tags changed"}
# Runs a rerun or a clone came from (apps.runs.services.rerun writes these keys).
SOURCES = {"rerun_of": "rerun of run #", "cloned_from": "clone of run #"}
# What a stop request is for (the attempt's stop kind).
STOPS = {"cancel": "to cancel it", "preempt": "to preempt it: it checkpoints and goes back in the queue",
         "drain": "its node is draining", "abort": "to abort it"}


@dataclass(frozen=True, slots=True)
class HistoryRow:
    at: datetime
    actor: str
    what: str
    detail: str


def run_history(*, run: Run, attempts: Iterable[Attempt]) -> tuple[list[HistoryRow], bool]:
    """The run's events oldest first, at most `HISTORY_LIMIT` (the latest), and whether older
    ones were left out."""
    numbers = {str(a.pk): a.number for a in attempts}
    where = Q(object_type="runs.run", object_id=str(run.pk))
    if numbers:
        where |= Q(object_type="runs.attempt", object_id__in=list(numbers))
    events = list(AuditEvent.objects.filter(where).order_by("-at", "-id")[: HISTORY_LIMIT + 1])
    more = len(events) > HISTORY_LIMIT
    rows = [
        HistoryRow(at=e.at, actor=e.actor_label, detail=_detail(e.before, e.after),
                   what=_what(e.action, numbers.get(e.object_id) if e.object_type == "runs.attempt" else None))
        for e in reversed(events[:HISTORY_LIMIT])
    ]
    return rows, more


def _what(action: str, attempt: int | None) -> str:
    verb = action.split(".", 1)[-1]
    verb = VERBS.get(verb, verb.replace("_", " "))
    return f"attempt {attempt}: {verb}" if attempt is not None else verb


def _detail(before: Any, after: Any) -> str:
    """A line from an event's before/after. Each action writes its own shape (a submit's `nodes`
    is a count, a placement's a list of names), so only values of the expected type are read."""
    before = before if isinstance(before, Mapping) else {}
    after = after if isinstance(after, Mapping) else {}
    parts: list[str] = []
    old, new = _text(before.get("status")), _text(after.get("status"))
    if old and new and old != new:
        parts.append(f"{old} → {new}")
    elif new and not old:
        parts.append(new)
    nodes = after.get("nodes")
    names = [str(n) for n in nodes] if isinstance(nodes, list) else [_text(after.get("node"))]
    if any(names):
        parts.append("on " + ", ".join(n for n in names if n))
    kind = _text(after.get("kind"))
    if kind:
        parts.append(STOPS.get(kind, kind))
    if _text(after.get("reason")):
        parts.append(_text(after.get("reason")))
    parts.extend(f"{words}{after[key]}" for key, words in SOURCES.items() if isinstance(after.get(key), int))
    changed = [key for key in ("notes", "tags") if key in after and before.get(key) != after[key]]
    if changed:
        parts.append(" and ".join(changed) + " edited")
    lost = after.get("work_lost_device_s")
    if isinstance(lost, int | float) and not isinstance(lost, bool):
        parts.append(f"work since its last checkpoint: {lost:,.0f} device-seconds")
    return " · ".join(parts)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""
