"""Schemathesis against a live server: every operation of the OpenAPI schema, called as a seeded
user of one team (alice) and as an administrator, must answer without a 5xx and with a body that
matches the schema. Two shapes the fuzz found as 500s (issue 27) are sent to every operation
they apply to, so they stay fixed: JSON nested 100,000 levels deep or over the upload limit in
every JSON body, and date-times PostgreSQL cannot hold in every date-time query parameter.

Bounded: a few examples per operation and a time budget. The auth and agent operations run with
a spare token of their own: the fuzz may revoke the token it sends (DELETE /auth/tokens/{pk}/).
Each attempt mints its tokens through `manage.py shell`, not the login: the failed logins the
fuzz sends get the address throttled (a 429 is an answer, not an error), and a retry must not
inherit tokens an earlier attempt revoked.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from apps.core.jsonlimits import JSON_MAX_DEPTH
from tests.fixtures.live import LiveStack

pytestmark = [pytest.mark.live, pytest.mark.process]

SCHEMATHESIS = Path(sys.executable).with_name("schemathesis")
MAX_EXAMPLES = int(os.environ.get("TRAINYARD_FUZZ_EXAMPLES", "5"))
BUDGET_S = int(os.environ.get("TRAINYARD_FUZZ_SECONDS", "60"))
# The auth and agent operations: few, and mostly refusals for a user's token.
GUARDED_BUDGET_S = max(10, BUDGET_S // 3)
# A longer hunt than CI's: TRAINYARD_FUZZ_EXAMPLES=40 TRAINYARD_FUZZ_SECONDS=400 TRAINYARD_FUZZ_SEED=2
# (pytest --timeout 1800).
SEED = os.environ.get("TRAINYARD_FUZZ_SEED", "1")
# Known server bugs this test found, reported to the owners; each entry leaves one operation out
# until it is fixed (delete the entry then). None open.
KNOWN_ISSUES: list[str] = []
ROLES = ("alice", "admin")
GUARDED = "^/api/v1/(agent|auth)/"

DEEP = 100_000
DEEP_BODY = '{"params": ' + "[" * DEEP + "]" * DEEP + "}"
UPLOAD_LIMIT = 2_621_440  # Django's DATA_UPLOAD_MAX_MEMORY_SIZE, which the live stack keeps
HUGE_BODY = '{"params": {"blob": "' + "x" * (UPLOAD_LIMIT + 1024) + '"}}'
BAD_DATETIMES = ("2026-01-01T00:00:00+19:56", "9999-12-31T23:00:00-05:00")
# Operations that read and bound their own body, with a larger limit than Django's; what they
# answer past it is tested with their owners (a 413 once the node is authenticated: tests/tracking).
OWN_BODY_LIMIT = {"/api/v1/agent/metrics/"}
# Date-time query parameters the schema types as plain strings (they take a date too).
DATE_PARAM_NAMES = {"since", "until", "updated_after"}


class FuzzStack:
    def __init__(self, stack: LiveStack) -> None:
        self.stack = stack
        self.admin_token = stack.token("admin")
        with urllib.request.urlopen(f"{stack.url}/api/schema/?format=json", timeout=30) as response:
            self.schema: dict[str, Any] = json.loads(response.read())


@pytest.fixture(scope="module")
def fuzz_stack(tmp_path_factory: pytest.TempPathFactory, redis_url: str) -> Iterator[FuzzStack]:
    stack = LiveStack(tmp_path_factory.mktemp("fuzz-stack"), redis_url)
    try:
        stack.start_web()
        yield FuzzStack(stack)
    finally:
        stack.close()


def _operations(schema: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            if method in ("get", "post", "put", "patch", "delete"):
                yield path, method.upper(), operation


def _send(stack: LiveStack, method: str, path: str, token: str, body: str | None = None) -> tuple[int, Any]:
    headers = {"Authorization": f"Token {token}", "Accept": "application/json"}
    if body is not None:
        headers["Content-Type"] = "application/json"
    request = urllib.request.Request(stack.url + path, data=None if body is None else body.encode(), method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as err:
        raw = err.read()
        try:
            return err.code, json.loads(raw)
        except ValueError:
            return err.code, raw.decode(errors="replace")[:300]


def test_deep_or_huge_json_and_out_of_range_dates_are_400s_on_every_operation(fuzz_stack: FuzzStack) -> None:
    stack, token = fuzz_stack.stack, fuzz_stack.admin_token
    with_body, with_dates, wrong = 0, 0, []
    for path, method, operation in _operations(fuzz_stack.schema):
        url = re.sub(r"\{[^}]+\}", "1", path)  # refused before routing: any object id does
        if any("json" in kind for kind in operation.get("requestBody", {}).get("content", {})):
            with_body += 1
            shapes = [(DEEP_BODY, "too_deep", f"the limit is {JSON_MAX_DEPTH} levels", 400)]
            if path not in OWN_BODY_LIMIT:
                shapes.append((HUGE_BODY, "too_large", f"the limit is {UPLOAD_LIMIT:,} bytes", 413))
            for text, code, limit, expected in shapes:
                status, answer = _send(stack, method, url, token, text)
                error = answer.get("error", {}) if isinstance(answer, dict) else {}
                if status != expected or error.get("code") != code or limit not in error.get("message", ""):
                    wrong.append(f"{method} {path} ({code}): {status} {str(answer)[:300]}")
        names = [p["name"] for p in operation.get("parameters", []) if p.get("in") == "query"
                 and (p.get("schema", {}).get("format") in ("date", "date-time") or p["name"] in DATE_PARAM_NAMES)]
        for name in names:
            with_dates += 1
            for value in BAD_DATETIMES:
                status, answer = _send(stack, method, f"{url}?{name}={quote(value)}", token)
                fields = answer.get("error", {}).get("fields", {}) if isinstance(answer, dict) else {}
                if status != 400 or name not in fields:
                    wrong.append(f"{method} {path}?{name}={value}: {status} {str(answer)[:300]}")
    assert with_body >= 10 and with_dates >= 4, (with_body, with_dates)  # the schema was read as intended
    assert not wrong, "\n".join(wrong)


def test_api_has_no_server_errors_and_matches_its_schema(fuzz_stack: FuzzStack, tmp_path: Path) -> None:
    if not SCHEMATHESIS.exists():
        pytest.skip("schemathesis is not installed (requirements-dev.txt)")
    problems: list[str] = []
    for who, (token, spare) in _mint_tokens(fuzz_stack.stack).items():
        for key, selection, budget in ((token, ["--exclude-path-regex", GUARDED], BUDGET_S),
                                       (spare, ["--include-path-regex", GUARDED], GUARDED_BUDGET_S)):
            done = _schemathesis(fuzz_stack.stack, tmp_path / f"{who}-{len(problems)}-{budget}", key, selection, budget)
            if done.returncode != 0:
                problems.append(f"--- as {who}, {' '.join(selection)} ---\n{done.stdout[-12000:]}{done.stderr[-3000:]}")
    assert not problems, ("schemathesis found problems:\n" + "\n".join(problems)
                          + f"\n--- server errors ---\n{_errors(fuzz_stack.stack.log('web'))}")


MINT = """
import json
from django.contrib.auth import get_user_model
from apps.accounts.services import api_token_create
users = {{u.username: u for u in get_user_model().objects.filter(username__in={roles!r})}}
print(json.dumps({{who: [api_token_create(user=users[who], name="fuzz")[1] for _ in range(2)] for who in {roles!r}}}))
"""


def _mint_tokens(stack: LiveStack) -> dict[str, tuple[str, str]]:
    """Two fresh tokens per role (one for the guarded operations), minted past the login throttle."""
    done = stack.manage("shell", "-c", MINT.format(roles=list(ROLES)))
    minted = json.loads(done.stdout.strip().splitlines()[-1])
    return {who: (keys[0], keys[1]) for who, keys in minted.items()}


def _schemathesis(stack: LiveStack, workdir: Path, token: str, selection: list[str], budget: int) -> subprocess.CompletedProcess[str]:
    workdir.mkdir(parents=True)
    argv = [
        str(SCHEMATHESIS), "run", f"{stack.url}/api/schema/?format=json", "--url", stack.url,
        "-H", f"Authorization: Token {token}",
        "--checks", "not_a_server_error,response_schema_conformance",
        "--max-examples", str(MAX_EXAMPLES), "--max-time", str(budget), "--seed", SEED, "--no-shrink",
        "--phases", "examples,fuzzing", "--workers", "2", "--request-timeout", "20",
        *selection,
        *[arg for regex in KNOWN_ISSUES for arg in ("--exclude-path-regex", regex)],
        "--no-color", "--warnings", "off",
    ]
    return subprocess.run(argv, capture_output=True, text=True, timeout=budget + 60, cwd=workdir,
                          env={**os.environ, "SCHEMATHESIS_HOOKS": ""})


def _errors(log: str, limit: int = 12000) -> str:
    """The log's ERROR records with their tracebacks: what a 500 needs to be chased. The log's tail
    alone is thousands of 404 warnings from the fuzzing, long after the error."""
    blocks: list[str] = []
    for record in re.split(r"\n(?=\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)", log):
        if " ERROR " in record.split("\n", 1)[0]:
            blocks.append(record)
    return "\n".join(blocks)[:limit] or log[-5000:]
