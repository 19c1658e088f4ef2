"""Filters for the run page: one way to show a time, and parameter values as JSON."""

from __future__ import annotations

from datetime import datetime

from django import template
from django.utils import timezone
from django.utils.dateformat import format as date_format
from django.utils.html import format_html
from django.utils.safestring import SafeString

register = template.Library()

# The server's rendering of a time, in its own zone (named); static/tracking/run.js rewrites
# every <time> on the page in the viewer's zone with the same pattern ("Nov 24, 2026, 11:20:09 PM").
WHEN_FORMAT = "M j, Y, g:i:s A T"


@register.filter
def when(at: datetime | None) -> SafeString | str:
    if at is None:
        return "–"
    local = timezone.localtime(at) if timezone.is_aware(at) else at
    return format_html('<time datetime="{}" title="{}">{}</time>', at.isoformat(), at.isoformat(), date_format(local, WHEN_FORMAT))
