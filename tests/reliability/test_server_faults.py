"""Server-side faults: the web server restarted three times mid-run, the Celery worker killed
-9 mid-task, Redis killed -9 and started empty. The database is the source of truth: after each,
the queue and the runs are as they were, nothing is charged or placed twice, nothing is lost."""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from tests.agents.helpers import start_agent
from tests.fixtures.live import LiveStack
from tests.reliability.helpers import (
    PrivateRedis,
    assert_invariants,
    attempts,
    celery_call,
    database_write_lock,
    job_file,
    kill9_group,
    make_stack,
    status,
    submit,
    wait_status,
)

pytestmark = [pytest.mark.live, pytest.mark.process]


def _snapshot(stack: LiveStack, token: str) -> dict[str, Any]:
    runs = stack.api("GET", "/api/v1/runs/?project=vision/digits&page_size=200", token=token)
    rows = runs["results"] if isinstance(runs, dict) else runs
    queue_status, queue = stack.request("GET", "/api/v1/queue/", token=token)
    order = None
    if queue_status == 200 and isinstance(queue, dict):
        # Each pool's waiting runs in scheduling order (estimates move with time; order must not).
        order = [(p.get("pool"), [((e.get("run") or {}).get("id"), e.get("position")) for e in p.get("queue", [])])
                 for p in queue.get("pools", [])]
    return {"runs": sorted((r["id"], r["status"]) for r in rows), "queue": order}


def _wait_log(stack: LiveStack, name: str, pattern: str, timeout: float) -> re.Match[str]:
    return stack.wait_for(lambda: re.search(pattern, stack.log(name)), timeout, f"{pattern!r} in the {name} log")  # type: ignore[no-any-return]


def test_web_restarted_three_times_mid_run(tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Restarts take seconds each: the node timeout is longer than the outage, so nothing is lost.
    stack = make_stack(tmp_path, redis_url, monkeypatch, node_timeout=30)
    try:
        stack.start_web()
        stack.start_worker()
        start_agent(stack, "node-a")
        token = stack.token("alice")
        job = job_file(tmp_path)
        running = submit(stack, job, steps=4000, delay=0.05, every=50)
        wait_status(stack, running, {"running"}, 60)
        queued = [submit(stack, job, steps=20, delay=0.01) for _ in range(2)]
        time.sleep(1)
        before = _snapshot(stack, token)
        assert (running, "running") in before["runs"] and all((q, "queued") in before["runs"] for q in queued)
        for i, sig in enumerate([signal.SIGTERM, signal.SIGKILL, signal.SIGTERM]):
            stack.stop("web", sig)
            time.sleep(1 + i)
            stack.start_web()
            assert _snapshot(stack, token) == before, f"after restart {i + 1}"
        progress = stack.query("SELECT steps_done FROM runs_run WHERE id=?", (running,))[0][0]
        stack.wait_for(lambda: stack.query("SELECT steps_done FROM runs_run WHERE id=?", (running,))[0][0] > progress, 30,
                       "the running job to keep reporting through the new web server")
        assert attempts(stack, running) == [(1, "running")]

        # Cancel still works: the running run stops, the queued ones take its place and finish.
        stack.api("POST", f"/api/v1/runs/{running}/cancel/", token=token)
        assert wait_status(stack, running, {"cancelled", "failed", "succeeded"}, 30) == "cancelled"
        for run in queued:
            assert wait_status(stack, run, {"succeeded", "failed", "cancelled"}, 90) == "succeeded"
        assert_invariants(stack, [running, *queued], steps={q: 20 for q in queued})
    finally:
        stack.close()


def test_worker_killed_mid_task_redoes_it_without_double_work(tmp_path: Path, redis_url: str,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    # A short visibility timeout: an unacknowledged task is redelivered seconds after its worker died.
    stack = make_stack(tmp_path, redis_url, monkeypatch, node_timeout=30, visibility_timeout=3)
    try:
        stack.start_web()
        start_agent(stack, "node-a")
        job = job_file(tmp_path)
        stack.wait_for(lambda: stack.query("SELECT count(*) FROM nodes_node WHERE state='ready'")[0][0], 30, "node-a")

        # 1. The scheduling pass: submitted with no worker, the pass message waits in Redis; the
        # worker takes it and blocks inside the placement transaction; kill -9 it there.
        run = submit(stack, job, steps=120, delay=0.05, every=20)
        with database_write_lock(stack):
            stack.start_worker()
            _wait_log(stack, "worker", r"Task scheduling\.pass\[[0-9a-f-]+\] received", 60)
            time.sleep(1.5)
            kill9_group(stack, "worker")
        assert status(stack, run) == "queued" and attempts(stack, run) == [], "the killed pass committed nothing"
        stack.start_worker("worker2")
        wait_status(stack, run, {"running"}, 60)
        assert len(attempts(stack, run)) == 1
        assert stack.query("SELECT count(*) FROM runs_assignment a JOIN runs_attempt t ON a.attempt_id=t.id WHERE t.run_id=?",
                           (run,))[0][0] == 1, "placed exactly once"

        # 2. Accrual: killed -9 while charging the running attempt; redone by the next worker.
        stack.wait_for(lambda: stack.query("SELECT started_at FROM runs_attempt WHERE run_id=?", (run,))[0][0], 30, "a start")
        kill9_group(stack, "worker2")
        with database_write_lock(stack):
            task_id = celery_call(stack, "billing.accrue")
            stack.start_worker("worker3")
            _wait_log(stack, "worker3", rf"Task billing\.accrue\[{task_id}\] received", 60)
            time.sleep(1.5)
            kill9_group(stack, "worker3")
        assert not stack.query("SELECT count(*) FROM billing_usageentry WHERE run_id=?", (run,))[0][0]
        stack.start_worker("worker4")
        # The very message the killed worker held comes back (late ack) and runs to the end.
        _wait_log(stack, "worker4", rf"Task billing\.accrue\[{task_id}\] succeeded", 60)
        assert stack.query("SELECT count(*) FROM billing_usageentry WHERE run_id=? AND kind='accrual'", (run,))[0][0] >= 1
        assert wait_status(stack, run, {"succeeded", "failed", "cancelled"}, 90) == "succeeded"
        assert_invariants(stack, [run], steps={run: 120})
    finally:
        stack.close()


def test_redis_killed_and_restarted_empty_loses_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    redis = PrivateRedis()
    stack: LiveStack | None = None
    try:
        stack = make_stack(tmp_path, redis.url, monkeypatch, node_timeout=30)
        stack.start_web()
        stack.start_worker()
        start_agent(stack, "node-a")
        token = stack.token("alice")
        job = job_file(tmp_path)
        first = submit(stack, job, steps=60, delay=0.05, every=20)
        wait_status(stack, first, {"running"}, 60)

        redis.kill9()
        # Submitting while Redis is down still works: the run is in the database.
        body = {"project": "vision/digits", "template": "digits-classifier", "params": {"steps": 20},
                "tags": {"task": "t", "dataset": "d", "candidate": "baseline", "family": "redis-down"}}
        code, created = stack.request("POST", "/api/v1/runs/", body, token=token)
        assert code == 201, created
        assert "broker unavailable, scheduling pass not queued" in stack.log("web")
        second = submit(stack, job, steps=20, delay=0.01)
        # The agent talks to the web only: the running job finishes and is recorded.
        assert wait_status(stack, first, {"succeeded", "failed", "cancelled"}, 60) == "succeeded"
        time.sleep(2)
        assert status(stack, second) == "queued" and status(stack, created["id"]) == "queued"

        redis.start()  # empty: every message queued before the crash is gone
        # The beat's periodic pass derives the work from the database: both queued runs run.
        assert wait_status(stack, second, {"succeeded", "failed", "cancelled"}, 120) == "succeeded"
        assert wait_status(stack, created["id"], {"succeeded", "failed", "cancelled"}, 240) == "succeeded"
        assert_invariants(stack, [first, second, created["id"]], steps={first: 60, second: 20})
    finally:
        if stack is not None:
            stack.close()
        redis.close()
