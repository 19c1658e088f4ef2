"""Live-stack helpers for the submission end-to-end tests: a stack with a Celery worker, agents
started as real subprocesses, runs submitted through the public API as alice."""

from __future__ import annotations

import json
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.agents.helpers import start_agent
from tests.fixtures.live import LiveStack

TAGS = {"task": "classification", "dataset": "sklearn-digits", "candidate": "baseline", "family": "e2e"}
# Small and fast: a few seconds of CPU per run.
SMALL = {"steps": 30, "eval_every": 10, "batch_size": 32, "hidden": 32, "warmup_steps": 2}


@pytest.fixture
def recipe_stack(tmp_path: Path, redis_url: str) -> Iterator[LiveStack]:
    stack = LiveStack(tmp_path, redis_url)
    try:
        stack.start_web()
        stack.start_worker()
        yield stack
    finally:
        stack.close()


def agent(stack: LiveStack, name: str, slots: int = 1) -> None:
    start_agent(stack, name, extra=["--slots", str(slots)])


def submit(stack: LiveStack, token: str, template: str, params: dict[str, Any], **extra: Any) -> dict[str, Any]:
    body = {"project": "vision/digits", "template": template, "params": params, "tags": {**TAGS, **extra.pop("tags", {})}, **extra}
    return dict(stack.api("POST", "/api/v1/runs/", body, token=token, expect=201))


def wait_finished(stack: LiveStack, token: str, run_id: int, timeout: float = 180) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        run = stack.api("GET", f"/api/v1/runs/{run_id}/", token=token)
        return run if run["status"] in ("succeeded", "failed", "cancelled") else None

    return dict(stack.wait_for(done, timeout, f"run {run_id} to finish", interval=1.0))


def assert_recorded(stack: LiveStack, run_id: int, *, metrics: bool = True, checkpoints: bool = True) -> None:
    if metrics:
        points = stack.query("SELECT COUNT(*) FROM tracking_metricpoint WHERE run_id=?", (run_id,))[0][0]
        assert points > 0, f"run {run_id} recorded no metrics"
    if checkpoints:
        count = stack.query("SELECT COUNT(*) FROM runs_checkpoint WHERE run_id=?", (run_id,))[0][0]
        assert count > 0, f"run {run_id} recorded no checkpoints"
    lineage = stack.query("SELECT lineage FROM runs_attempt WHERE run_id=? ORDER BY number DESC LIMIT 1", (run_id,))
    value = lineage[0][0] if lineage else None
    # SQLite hands JSON columns back as text, PostgreSQL (jsonb) as objects.
    assert value and (json.loads(value) if isinstance(value, str) else value), f"run {run_id} recorded no lineage"


def upload_snapshot(stack: LiveStack, token: str, data: bytes, git_commit: str) -> dict[str, Any]:
    boundary = uuid.uuid4().hex
    parts = []
    for name, value in (("project", b"vision/digits"), ("git_commit", git_commit.encode())):
        parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n'.encode() + value + b"\r\n")
    parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="code.tar.gz"\r\n'
                 "Content-Type: application/gzip\r\n\r\n".encode() + data + b"\r\n")
    payload = b"".join(parts) + f"--{boundary}--\r\n".encode()
    headers = {"Authorization": f"Token {token}", "Content-Type": f"multipart/form-data; boundary={boundary}"}
    request = urllib.request.Request(stack.url + "/api/v1/code-snapshots/", data=payload, method="POST", headers=headers)
    with urllib.request.urlopen(request, timeout=30) as response:
        return dict(json.loads(response.read()))
