"""Checks of agent message fields that both the agent views (apps.fleet.api.views) and the agent
fast path (apps.fleet.fastpath) make, so that a body one takes the other takes too."""

from __future__ import annotations

from typing import Any

from apps.core.errors import FieldError


def int_field(data: Any, field: str, *, minimum: int = 0, maximum: int = 2**62, default: int | None = None) -> int:
    """data[field] as an integer from minimum to maximum (a bool is not one), else FieldError naming both."""
    value = data.get(field, default) if isinstance(data, dict) else default
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        raise FieldError(field, f"an integer from {minimum} to {maximum}")
    return value
