"""PostgreSQL unavailable for 30 s mid-run (TRAINYARD_TEST_PG_OUTAGE_S to change it): the web
answers 503 with a JSON body, whether the failure comes from a view, token authentication, or
the session and user loaded by middleware; the agent buffers and replays; afterwards nothing
is missing or duplicated.

PostgreSQL only (CI's PostgreSQL pass, or TRAINYARD_TEST_PG_OUTAGE=1 with Debian's postgresql
installed): the test stops and starts a private cluster of its own, never DATABASE_URL's server.
"""

from __future__ import annotations

import http.cookiejar
import json
import os
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.agents.helpers import start_agent
from tests.fixtures.live import LiveStack
from tests.reliability.helpers import PrivatePostgres, assert_invariants, attempts, job_file, make_stack, submit, wait_status

OUTAGE_S = float(os.environ.get("TRAINYARD_TEST_PG_OUTAGE_S", "30"))
pytestmark = [
    pytest.mark.live,
    pytest.mark.postgres,
    pytest.mark.skipif(not (os.environ.get("DATABASE_URL", "").startswith("postgres") or os.environ.get("TRAINYARD_TEST_PG_OUTAGE")),
                       reason="PostgreSQL only: set DATABASE_URL (CI) or TRAINYARD_TEST_PG_OUTAGE=1"),
]


def _browser(stack: LiveStack) -> urllib.request.OpenerDirector:
    """A signed-in session (cookie), so requests load the session and the user in middleware."""
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    page = opener.open(stack.url + "/login/", timeout=30).read().decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
    assert token is not None
    form = urllib.parse.urlencode({"username": "alice", "password": "trainyard-demo", "csrfmiddlewaretoken": token.group(1)}).encode()
    request = urllib.request.Request(stack.url + "/login/", data=form, headers={"Referer": stack.url + "/login/"})
    opener.open(request, timeout=30).read()
    assert any(c.name == "sessionid" for c in jar), "signed in"
    return opener


def _get(opener: urllib.request.OpenerDirector, url: str, headers: dict[str, str] | None = None) -> tuple[int, str, str]:
    try:
        with opener.open(urllib.request.Request(url, headers=headers or {}), timeout=30) as response:
            return response.status, response.headers.get("Content-Type", ""), response.read().decode(errors="replace")
    except urllib.error.HTTPError as err:
        return err.code, err.headers.get("Content-Type", ""), err.read().decode(errors="replace")


def _assert_503_json(status: int, content_type: str, body: str, what: str) -> None:
    assert status == 503, f"{what}: {status} {body[:300]}"
    assert "json" in content_type, f"{what}: {content_type}"
    error: dict[str, Any] = json.loads(body)["error"]
    assert error["code"] == "database_unavailable" and "retry" in error["message"].lower(), what


def test_postgres_unavailable_gives_503_then_nothing_is_lost(tmp_path: Path, redis_url: str,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    pg = PrivatePostgres()
    stack: LiveStack | None = None
    try:
        # The node timeout outlasts the outage: heartbeats cannot land while the database is down.
        stack = make_stack(tmp_path, redis_url, monkeypatch, node_timeout=int(OUTAGE_S) + 30, database_url=pg.url)
        stack.start_web()
        stack.start_worker()
        start_agent(stack, "node-a")
        token = stack.token("alice")
        browser = _browser(stack)
        steps = int((OUTAGE_S + 15) * 10)
        run = submit(stack, job_file(tmp_path), steps=steps, delay=0.1, every=20)
        wait_status(stack, run, {"running"}, 60)
        stack.wait_for(lambda: stack.query("SELECT steps_done FROM runs_run WHERE id=?", (run,))[0][0] >= 10, 30, "progress")

        pg.stop()
        started = time.monotonic()
        plain = urllib.request.build_opener()
        _assert_503_json(*_get(plain, stack.url + "/api/v1/runs/", {"Authorization": f"Token {token}"}), "token API request")
        _assert_503_json(*_get(browser, stack.url + "/api/v1/runs/"), "session API request")
        _assert_503_json(*_get(plain, stack.url + "/api/v1/agent/heartbeat/", {"Authorization": "Node tyn_x"}), "agent request")
        status, _, body = _get(browser, stack.url + "/runs/")
        assert status == 503 and "database is unavailable" in body, f"HTML page: {status} {body[:300]}"
        time.sleep(max(0.0, OUTAGE_S - (time.monotonic() - started)))
        pg.start()
        # The web's pool starts afresh for a waiting request (portal.settings.base): it answers
        # within seconds, not after the backoff of its failed connects (as long again as the outage).
        runs = (stack.url + "/api/v1/runs/", {"Authorization": f"Token {token}"})
        stack.wait_for(lambda: _get(plain, *runs)[0] == 200, 20, "the web to answer once the database is back")

        assert wait_status(stack, run, {"succeeded", "failed", "cancelled", "queued"}, steps / 10 + 90) == "succeeded"
        assert attempts(stack, run) == [(1, "succeeded")], "no requeue: the outage was the server's, not the node's"
        text = "".join(t for (t,) in stack.query("SELECT text FROM runs_logchunk WHERE run_id=? ORDER BY seq", (run,)))
        lines = Counter(line for line in text.splitlines() if line.startswith("line "))
        assert lines == Counter({f"line {i}": 1 for i in range(steps)})
        assert_invariants(stack, [run], steps={run: steps})
    finally:
        if stack is not None:
            stack.close()
        pg.close()
