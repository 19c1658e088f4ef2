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
import time
from typing import Any

from celery import signature
from django.db import transaction
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


# By name: the task is apps.scheduling.tasks.scheduling_pass, in the layer above every app that
# asks for a pass (runs, nodes, fleet), none of which may import the scheduler.
SCHEDULING_PASS_TASK = "scheduling.pass"


def request_scheduling_pass() -> None:
    """Ask for a scheduling pass once the current transaction commits (coalesced by the task)."""
    # enqueue: with Redis down the beat's periodic pass places the run once Redis returns.
    # The request time lets the task skip itself when a later pass already saw this commit.
    transaction.on_commit(lambda: enqueue(signature(SCHEDULING_PASS_TASK), args=[time.time()], what="scheduling pass"))
