"""Filters for the Nodes page: instants that name their zone, spans of time in words, and the fleet
map's squares and device tables."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django import template
from django.utils import timezone
from django.utils.dateformat import format as date_format
from django.utils.html import format_html
from django.utils.safestring import SafeString

from apps.core.text import fmt_duration

register = template.Library()

# The server writes an instant in its own zone, named ("Nov 25, 2026, 2:54:30 AM UTC");
# static/nodes/nodes.js rewrites each <time> in the viewer's zone, named as well, so a time on
# this page is never a bare clock reading that could be either.
WHEN_FORMAT = "M j, Y, g:i:s A T"


def _instant(at: datetime | str | None) -> datetime | None:
    if at is None or at == "":
        return None
    return datetime.fromisoformat(at) if isinstance(at, str) else at


@register.filter
def when(at: datetime | str | None) -> SafeString | str:
    """A <time> for an instant (a datetime, or the ISO text the selectors give the API)."""
    instant = _instant(at)
    if instant is None:
        return "–"
    local = timezone.localtime(instant) if timezone.is_aware(instant) else instant
    iso = instant.isoformat()
    return format_html('<time datetime="{}" title="{}">{}</time>', iso, iso, date_format(local, WHEN_FORMAT))


@register.filter
def ago(seconds: float | None) -> str:
    """ "40 seconds ago", "12 minutes ago", "3.5 hours ago" (not "12600 s ago")."""
    if seconds is None:
        return ""
    return f"{fmt_duration(max(0.0, float(seconds)))} ago"


@register.filter
def from_now(at: datetime | str | None) -> str:
    """ "in 9 minutes", or "2 minutes ago" for an instant already past."""
    instant = _instant(at)
    if instant is None:
        return ""
    left = (instant - timezone.now()).total_seconds()
    return f"in {fmt_duration(left)}" if left >= 0 else f"{fmt_duration(left)} ago"


@register.filter
def util_level(utilization: float | None) -> str:
    """The colour of a device's square: u0 (under 25 % busy) to u3 (75 % or more; a CPU slot's job
    can use several cores, 240 %), un when nothing is reported."""
    if utilization is None:
        return "un"
    return f"u{min(3, max(0, int(utilization // 25)))}"


def _spans(values: list[Any]) -> list[int]:
    """For each stretch of equal neighbours: its length at its first place, 0 at the others."""
    spans = [0] * len(values)
    start = 0
    for i in range(1, len(values) + 1):
        if i == len(values) or values[i] != values[start]:
            spans[start] = i - start
            start = i
    return spans


@register.filter
def table_rows(devices: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A node's devices as rows of its device table, with how many rows the model cell and the run
    cell of each one span (0: a cell above covers it). A node's devices mostly share one model and
    a run holds several of them: written once per stretch, the fleet's tables are a fraction of
    the page they were when every row repeated them."""
    models = _spans([(d["model"], d["memory_bytes"]) for d in devices])
    # An unhealthy device's cell says so: it is not one of a stretch of free devices.
    runs = _spans([d["run"] if d["run"] or d.get("healthy", True) else ("unhealthy", d["index"]) for d in devices])
    return [{"device": d, "model_rows": m, "run_rows": r} for d, m, r in zip(devices, models, runs, strict=True)]
