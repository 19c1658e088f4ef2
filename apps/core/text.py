"""Figures in words for pages and messages, shared by every app."""

from __future__ import annotations


def fmt_duration(seconds: float) -> str:
    """A length of time as people say it: "1 second", "40 seconds", "12 minutes", "3.5 hours", "2.0 days"."""
    seconds = abs(seconds)
    if seconds < 90:
        return plural(round(seconds), "second")
    if seconds < 5400:
        return plural(round(seconds / 60), "minute")
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} hours"
    return f"{seconds / 86400:.1f} days"


def hours_minutes(seconds: float) -> str:
    """A length of time to the minute, as a clock-reader says it: "45 min", "2 h", "3 h 10 min"
    ("40 s" under a minute)."""
    if abs(seconds) < 59.5:
        return f"{round(abs(seconds))} s"
    minutes = int(round(abs(seconds) / 60))
    hours, minutes = divmod(minutes, 60)
    if hours and minutes:
        return f"{hours} h {minutes} min"
    return f"{hours} h" if hours else f"{minutes} min"


def plural(count: int, noun: str) -> str:
    """ "1 device", "2 devices", "0 devices"."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def is_id(text: str) -> bool:
    """Whether text is a plain decimal number that can be a row's id ("41").

    ASCII only: str.isdigit() also accepts "³", which int() refuses (a 500 where a 400 or 404 was
    due), and str.isdecimal() accepts "٣", which would quietly read as run 3. And no larger than a
    64-bit primary key: a foreign-key filter with a bigger number overflows the database driver.
    """
    return text.isascii() and text.isdecimal() and len(text) <= MAX_ID_DIGITS and int(text) <= MAX_ID


MAX_ID = 2**63 - 1  # the largest BigAutoField value, on PostgreSQL and SQLite alike
MAX_ID_DIGITS = len(str(MAX_ID))


def run_label(*, pk: int, name: str) -> str:
    """A run as every page names it: "#41 digits-a", or "#41" alone when it has no name (a
    made-up "run 41" beside the other pages' "#41" read as a different run)."""
    return f"#{pk} {name}" if name else f"#{pk}"
