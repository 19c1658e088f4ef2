"""Claim wake-ups: one Redis list per node, pushed when work or a drain is committed for it; a
waiting claim blocks on it (BLPOP) instead of reading the database.

A wake-up is only a hint (DESIGN.md: Redis carries wake-ups, the database the truth): a claim
reads the database before it waits, so one lost with Redis costs at most one claim's wait. A
list, not pub/sub: a wake-up pushed between the claim's read and its BLPOP waits for it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from functools import partial

import redis
from django.conf import settings
from django.db import transaction
from redis.exceptions import RedisError

from agents import protocol

log = logging.getLogger(__name__)

# A wake-up nobody took (no claim was waiting) expires; the next claim reads the database anyway.
WAKE_TTL_S = 60
# Each waiting claim holds a connection of the waiting client (redis-py's default cap is 100).
MAX_WAITING = 10_000
UNREACHABLE: tuple[type[BaseException], ...] = (RedisError, ConnectionError, TimeoutError, OSError)

# While Redis is down every waiting claim notices: say so once a minute, not once a claim.
WARN_EVERY_S = 60.0

_clients: dict[tuple[str, bool], redis.Redis] = {}
_clients_lock = threading.Lock()
_warned_at = -WARN_EVERY_S


def _warn(message: str, *args: object) -> None:
    global _warned_at
    now = time.monotonic()
    if now - _warned_at >= WARN_EVERY_S:
        _warned_at = now
        log.warning(message, *args)


def _client(*, blocking: bool) -> redis.Redis:
    """One client (its own connection pool) per URL and kind, shared by the process's threads.

    Pushes give up within a second, so a committed placement never waits on a dead Redis; the
    waiting client's socket outlives the longest BLPOP.
    """
    key = (str(settings.REDIS_URL), blocking)
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            timeout = protocol.MAX_CLAIM_WAIT_S + 5.0 if blocking else 1.0
            client = _clients[key] = redis.Redis.from_url(key[0], socket_connect_timeout=1.0, socket_timeout=timeout,
                                                          max_connections=MAX_WAITING if blocking else None)
        return client


def _key(node_id: int) -> str:
    return f"{settings.TRAINYARD_REDIS_PREFIX}:claim:{node_id}"


def claims_wake(*, node_ids: Iterable[int]) -> bool:
    """Wake the claims waiting for these nodes; False (logged) when Redis is unreachable."""
    keys = [_key(n) for n in node_ids]
    if not keys:
        return True
    try:
        pipe = _client(blocking=False).pipeline(transaction=False)
        for key in keys:
            pipe.lpush(key, 1)
            pipe.expire(key, WAKE_TTL_S)
        pipe.execute()
    except UNREACHABLE as exc:
        _warn("redis unavailable, %d claim wake-up(s) not sent (the claims find the work by their next read): %s",
              len(keys), exc)
        return False
    return True


def claims_wake_on_commit(*, node_ids: Iterable[int]) -> None:
    """claims_wake once the current transaction commits (at once outside one)."""
    transaction.on_commit(partial(claims_wake, node_ids=sorted(set(node_ids))))


def claim_wakes_clear(*, node_id: int) -> bool:
    """Drop the node's old wake-ups before the claim reads the database (which sees what they announced)."""
    try:
        _client(blocking=False).delete(_key(node_id))
    except UNREACHABLE:
        return False
    return True


def claim_wait(*, node_id: int, timeout: float) -> bool | None:
    """Block until the node is woken (True) or `timeout` seconds pass (False); None: Redis unreachable."""
    try:
        # BLPOP's 0 means forever: wait at least a millisecond.
        return _client(blocking=True).blpop([_key(node_id)], timeout=max(0.001, timeout)) is not None
    except UNREACHABLE as exc:
        _warn("redis unavailable for claim wake-ups, waiting claims read the database instead: %s", exc)
        return None
