"""Queueing a Celery task without letting a broker outage fail the request that asked for it.

The database is the source of truth and Redis carries only wake-ups (DESIGN.md): every task
queued from a request has a periodic counterpart on the beat that derives the same work from
the database (the scheduling pass, the lost-node sweep, accrual, the webhook sweep). So when
Redis is down, a failed publish is logged and dropped; the beat's next run after Redis returns
does the work. Raising instead would turn an already-committed submission into a 500, and a
client retry into a duplicate.
"""

from __future__ import annotations

import logging
from typing import Any

from kombu.exceptions import OperationalError as BrokerError
from redis.exceptions import RedisError

log = logging.getLogger(__name__)

BROKER_ERRORS: tuple[type[BaseException], ...] = (BrokerError, RedisError, ConnectionError, TimeoutError)


def enqueue(task: Any, *, args: list[Any] | None = None, what: str = "", **options: Any) -> bool:
    """apply_async that logs and returns False when the broker is unreachable."""
    try:
        task.apply_async(args=args or [], **options)
    except BROKER_ERRORS as exc:
        log.warning("broker unavailable, %s not queued (the periodic pass will redo it): %s", what or task.name, exc)
        return False
    return True
