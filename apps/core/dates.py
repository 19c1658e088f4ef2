"""Date-times from users' input, checked against what the databases can compare them with.

Python accepts a UTC offset up to +-23:59; PostgreSQL only +-15:59, so ``+19:56`` in a filter was
a DataError and a 500 there. Offsets past that, and instants that leave years 1-9999 once
turned into UTC, are a 400 naming the field; everything else is handed on in UTC.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, tzinfo

from apps.core.errors import FieldError

MAX_UTC_OFFSET = timedelta(hours=15, minutes=59)


def _offset_text(offset: timedelta) -> str:
    sign = "-" if offset < timedelta(0) else "+"
    minutes = int(abs(offset).total_seconds() // 60)
    return f"{sign}{minutes // 60:02d}:{minutes % 60:02d}"


def datetime_utc(value: datetime, *, field: str, naive_tz: tzinfo = UTC) -> datetime:
    """`value` as an aware UTC date-time (naive means `naive_tz`); FieldError naming `field`
    when its offset is beyond +-15:59 or it is out of range."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=naive_tz)
    offset = value.utcoffset()
    if offset is not None and abs(offset) > MAX_UTC_OFFSET:
        raise FieldError(field, f"UTC offset {_offset_text(offset)} is out of range: use one from -15:59 to +15:59, or Z")
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise FieldError(field, "out of range: it must fall within the years 0001 to 9999 in UTC") from None
