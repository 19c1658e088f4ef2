"""The shared cache: Django's Redis cache, answering as an empty cache while Redis is down.

Login lockouts and API throttles are counted here, in one place for every web process (a
per-process cache let each gunicorn worker count alone: 2 workers, 20 guesses instead of 10).
Redis carries no state that must survive (DESIGN.md), so an outage must not turn a login into
a 500: until it is back, nothing is counted and nothing is locked out, and the log says so.
"""

from __future__ import annotations

import logging
from typing import Any

import redis
from django.core.cache.backends.redis import RedisCache, RedisCacheClient

log = logging.getLogger(__name__)

UNREACHABLE = (redis.ConnectionError, redis.TimeoutError)


def _unreachable(operation: str, exc: Exception) -> None:
    log.warning("shared cache unreachable (%s): %s; counting nothing until it is back", operation, exc)


class TolerantRedisCacheClient(RedisCacheClient):
    def add(self, key: Any, value: Any, timeout: Any) -> bool:
        try:
            return bool(super().add(key, value, timeout))
        except UNREACHABLE as exc:
            _unreachable("add", exc)
            return False

    def get(self, key: Any, default: Any) -> Any:
        try:
            return super().get(key, default)
        except UNREACHABLE as exc:
            _unreachable("get", exc)
            return default

    def set(self, key: Any, value: Any, timeout: Any) -> None:
        try:
            super().set(key, value, timeout)
        except UNREACHABLE as exc:
            _unreachable("set", exc)

    def touch(self, key: Any, timeout: Any) -> bool:
        try:
            return bool(super().touch(key, timeout))
        except UNREACHABLE as exc:
            _unreachable("touch", exc)
            return False

    def delete(self, key: Any) -> bool:
        try:
            return bool(super().delete(key))
        except UNREACHABLE as exc:
            _unreachable("delete", exc)
            return False

    def get_many(self, keys: Any) -> dict[Any, Any]:
        try:
            return dict(super().get_many(keys))
        except UNREACHABLE as exc:
            _unreachable("get_many", exc)
            return {}

    def has_key(self, key: Any) -> bool:
        try:
            return bool(super().has_key(key))
        except UNREACHABLE as exc:
            _unreachable("has_key", exc)
            return False

    def incr(self, key: Any, delta: int) -> Any:
        try:
            return super().incr(key, delta)
        except UNREACHABLE as exc:
            _unreachable("incr", exc)
            raise ValueError("the shared cache is unreachable") from exc  # as for a missing key

    def set_many(self, data: Any, timeout: Any) -> None:
        try:
            super().set_many(data, timeout)
        except UNREACHABLE as exc:
            _unreachable("set_many", exc)

    def delete_many(self, keys: Any) -> None:
        try:
            super().delete_many(keys)
        except UNREACHABLE as exc:
            _unreachable("delete_many", exc)

    def clear(self) -> bool:
        try:
            return bool(super().clear())
        except UNREACHABLE as exc:
            _unreachable("clear", exc)
            return False


class SharedCache(RedisCache):
    """settings.CACHES["default"]["BACKEND"] for every deployment shape (make run, compose)."""

    def __init__(self, server: str, params: dict[str, Any]) -> None:
        super().__init__(server, params)
        self._class = TolerantRedisCacheClient
