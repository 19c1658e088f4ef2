"""The request's actor and address, so services record them without being handed the request."""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class AuditContext:
    user: Any = None
    label: str = ""
    ip: str | None = None


_current: contextvars.ContextVar[AuditContext] = contextvars.ContextVar("audit_context", default=AuditContext(label="system"))  # noqa: B039 (frozen, so safe to share)


def current() -> AuditContext:
    return _current.get()


@contextmanager
def acting_as(*, user: Any = None, label: str = "", ip: str | None = None) -> Iterator[None]:
    token = _current.set(AuditContext(user=user, label=label, ip=ip))
    try:
        yield
    finally:
        _current.reset(token)
