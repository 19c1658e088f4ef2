"""Figures in words for pages and messages, shared by every app."""

from __future__ import annotations


def fmt_duration(seconds: float) -> str:
    """A length of time as people say it: "40 seconds", "12 minutes", "3.5 hours", "2.0 days"."""
    seconds = abs(seconds)
    if seconds < 90:
        return f"{round(seconds)} seconds"
    if seconds < 5400:
        return f"{round(seconds / 60)} minutes"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} hours"
    return f"{seconds / 86400:.1f} days"
