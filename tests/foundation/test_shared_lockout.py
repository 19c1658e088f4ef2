"""Login lockouts and the token throttle (issue 27, part 4): counted in Redis, shared by every
web process (per-process counting let 2 gunicorn workers allow 20 guesses instead of 10), and
counting failed password checks only, so a burst of correct logins behind one address locks
nobody out. A Redis outage costs the counting, never a login."""

from __future__ import annotations

import http.cookiejar
import os
import re
import subprocess
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.cache import cache
from django.test import Client, override_settings
from rest_framework.test import APIClient

from apps.accounts.api.views import TokenThrottle
from apps.accounts.services import LOGIN_LIMIT
from tests.fixtures.live import PYTHON, ROOT, LiveStack
from tests.fixtures.services import free_port, wait_for_port

PASSWORD = "trainyard-demo"


@pytest.fixture(autouse=True)
def _fresh_cache() -> Iterator[None]:
    cache.clear()
    yield
    cache.clear()


def _token(username: str, password: str) -> Any:
    return APIClient().post("/api/v1/auth/token/", {"username": username, "password": password}, format="json")


def test_token_throttle_counts_failures_not_successful_logins(cast: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(TokenThrottle, "rate", "3/min", raising=False)
    # A burst of correct logins from one address (a CI fleet behind one NAT) is not throttled...
    for _ in range(6):
        assert _token("alice", "pw-alice-123456").status_code == 201
    assert _token("bob", "pw-bob-1234567").status_code == 201
    # ...failures are: after three, the address waits, correct password or not.
    for user in ("alice", "bob", "nobody"):
        assert _token(user, "wrong").status_code == 400
    throttled = _token("bob", "pw-bob-1234567")
    assert throttled.status_code == 429 and throttled.json()["error"]["code"] == "throttled"


def test_every_deployment_shape_counts_in_the_shared_redis_cache() -> None:
    """make run and the live tests use base settings, compose the production ones: both Redis."""
    from portal.settings import base

    assert base.CACHES["default"]["BACKEND"] == "apps.core.cache.SharedCache"
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "portal.settings.production", "TRAINYARD_SECRET_KEY": "k" * 64,
           "TRAINYARD_DEBUG": "false", "REDIS_URL": "redis://10.9.8.7:6390/3"}
    code = "import django; django.setup(); from django.conf import settings as s; print(s.CACHES['default'])"
    out = subprocess.run([PYTHON, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True).stdout
    assert "'BACKEND': 'apps.core.cache.SharedCache'" in out and "'LOCATION': 'redis://10.9.8.7:6390/3'" in out


def test_lockout_counts_survive_across_cache_clients_on_one_redis(cast: Any, redis_url: str) -> None:
    """Each Django process has its own cache client: a count made through one is seen by a fresh one."""
    from django.core.cache import caches

    settings = {"default": {"BACKEND": "apps.core.cache.SharedCache", "LOCATION": redis_url, "KEY_PREFIX": uuid.uuid4().hex}}
    with override_settings(CACHES=settings):
        for attempt in range(LOGIN_LIMIT):
            if attempt == LOGIN_LIMIT // 2:
                _new_cache_client(caches)
            assert Client().post("/login/", {"username": "alice", "password": "wrong"}).status_code == 200
        _new_cache_client(caches)
        locked = Client().post("/login/", {"username": "alice", "password": "pw-alice-123456"})
        assert locked.status_code == 429 and "Too many failed attempts" in locked.content.decode()


def _new_cache_client(caches: Any) -> None:
    """Drop this thread's cache object: the next use builds a new client, as another process has."""
    first = caches["default"]
    del caches["default"]
    assert caches["default"] is not first


def test_redis_down_costs_the_counting_not_the_login(cast: Any) -> None:
    dead = f"redis://127.0.0.1:{free_port()}/0"
    with override_settings(CACHES={"default": {"BACKEND": "apps.core.cache.SharedCache", "LOCATION": dead,
                                               "OPTIONS": {"socket_connect_timeout": 0.2, "socket_timeout": 0.2}}}):
        for _ in range(LOGIN_LIMIT + 2):
            assert Client().post("/login/", {"username": "alice", "password": "wrong"}).status_code == 200
        assert Client().post("/login/", {"username": "alice", "password": "pw-alice-123456"}).status_code == 302
        assert _token("alice", "wrong").status_code == 400
        assert _token("alice", "pw-alice-123456").status_code == 201


# --- live: two web processes, one Redis -------------------------------------------------------

class Browser:
    """Posts the login form as a browser does: the page first (CSRF cookie and field), then the form."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))

    def login(self, username: str, password: str) -> tuple[int, str]:
        page = self.opener.open(self.base + "/login/", timeout=30).read().decode()
        match = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
        assert match, page[:500]
        data = urllib.parse.urlencode({"username": username, "password": password, "csrfmiddlewaretoken": match.group(1)})
        request = urllib.request.Request(self.base + "/login/", data=data.encode(), headers={"Referer": self.base + "/login/"})
        try:
            with self.opener.open(request, timeout=30) as response:
                return response.status, response.geturl()
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode(errors="replace")


@pytest.mark.live
@pytest.mark.process
def test_lockout_is_shared_by_two_web_processes(tmp_path: Path, redis_url: str) -> None:
    stack = LiveStack(tmp_path, redis_url)
    try:
        stack.start_web()  # gunicorn, 2 workers
        other_port = free_port()
        stack.spawn("web2", [PYTHON, "-m", "gunicorn", "portal.wsgi:application", "-b", f"127.0.0.1:{other_port}",
                             "-w", "2", "--timeout", "120", "--graceful-timeout", "5"])
        wait_for_port(other_port, 60)
        first, second = Browser(stack.url), Browser(f"http://127.0.0.1:{other_port}")
        # Half the guesses on each server: counted per process, neither would reach the limit.
        for attempt in range(LOGIN_LIMIT):
            status, _ = (first if attempt % 2 else second).login("alice", "wrong")
            assert status == 200, attempt
        for browser in (first, second):
            status, body = browser.login("alice", PASSWORD)
            assert status == 429 and "Too many failed attempts" in body
        # The token endpoint shares the lockout, and bob (same address) is not locked out.
        assert stack.request("POST", "/api/v1/auth/token/", {"username": "alice", "password": PASSWORD})[0] == 429
        status, landed = first.login("bob", PASSWORD)
        assert status == 200 and not landed.endswith("/login/")
        # A burst of correct logins behind one address (past the token rate of 10 a minute) all succeed.
        for _ in range(12):
            assert stack.request("POST", "/api/v1/auth/token/", {"username": "carol", "password": PASSWORD})[0] == 201
    finally:
        stack.close()
