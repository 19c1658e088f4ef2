"""Every path that writes both a run and its attempt takes the run's row first.

Two transactions taking the same two rows in opposite orders deadlock on PostgreSQL: a user's
cancel (run, then attempt) once met an agent's energy report (attempt, then run), and the user
got a 500. These tests record the SQL of each path and check the order of the row locks and
writes. SQLite has no row locks (and no FOR UPDATE to see), so the paths are checked on
PostgreSQL, which CI's first pass runs.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from apps.nodes.models import NodePool
from apps.runs.models import Run
from apps.runs.services.lifecycle import run_cancel, run_preempt
from apps.scheduling.services import placement_pass
from tests.agents.server import claim, make_run, register

A = "/api/v1/agent/"
TABLES = ("runs_run", "runs_attempt")


def rows_touched(sql: str) -> set[str]:
    """The run/attempt tables whose rows this statement writes or locks."""
    update = re.match(r'\s*UPDATE "(\w+)"', sql)
    if update:
        return {update.group(1)} & set(TABLES)
    lock = re.search(r"FOR (NO KEY )?UPDATE( OF (.*))?$", sql.strip())
    if not lock:
        return set()
    if lock.group(3):
        # OF names aliases or tables; Django writes the table names.
        return {t for t in TABLES if f'"{t}"' in lock.group(3)}
    return {t for t in TABLES if re.search(rf'(FROM|JOIN) "{t}"', sql)}


def first_touch(queries: list[dict[str, Any]]) -> dict[str, int]:
    first: dict[str, int] = {}
    for i, query in enumerate(queries):
        for table in rows_touched(query["sql"]):
            first.setdefault(table, i)
    return first


needs_postgres = pytest.mark.skipif(connection.vendor != "postgresql", reason="needs PostgreSQL (set DATABASE_URL)")


def assert_run_first(action: Callable[[], Any]) -> None:
    with CaptureQueriesContext(connection) as captured:
        action()
    first = first_touch(captured.captured_queries)
    assert "runs_attempt" in first, "the path writes the attempt"
    assert "runs_run" in first, "the path writes or locks the run"
    assert first["runs_run"] < first["runs_attempt"], [q["sql"][:160] for q in captured.captured_queries]


@pytest.fixture
def running(cast: Any, db: Any) -> tuple[APIClient, Run, dict[str, Any]]:
    pool = NodePool.objects.create(name="local")
    client, reg = register(pool, "n1")
    run = make_run(cast, pool)
    placement_pass()
    [spec] = claim(client, reg["session"])
    base = {"attempt_id": spec["attempt_id"], "number": 1}
    assert client.post(A + "events/", {**base, "node_rank": 0, "event": "started", "time": 0}, format="json").status_code == 200
    return client, run, base


def test_the_classifier_sees_joined_locks() -> None:
    # The old attempt lock joined the run and locked both in one statement: not "run first".
    joined = 'SELECT * FROM "runs_attempt" INNER JOIN "runs_run" ON (1) WHERE "runs_attempt"."id" = 1 FOR UPDATE'
    assert rows_touched(joined) == {"runs_attempt", "runs_run"}
    only = 'SELECT * FROM "runs_attempt" INNER JOIN "runs_run" ON (1) FOR UPDATE OF "runs_attempt"'
    assert rows_touched(only) == {"runs_attempt"}
    assert rows_touched('UPDATE "runs_run" SET "energy_j" = 1') == {"runs_run"}
    assert rows_touched('SELECT * FROM "runs_run"') == set()


@pytest.mark.postgres
@needs_postgres
def test_energy_report_writes_the_run_before_the_attempt(running: tuple[APIClient, Run, dict[str, Any]]) -> None:
    client, run, base = running
    body = {**base, "samples": [{"at": 1_700_000_000, "energy_j": 5.0, "device_index": 0, "estimated": True}]}
    assert_run_first(lambda: client.post(A + "energy/", body, format="json"))
    run.refresh_from_db()
    assert run.energy_j == 5.0 and run.energy_estimated


@pytest.mark.postgres
@needs_postgres
def test_cancel_locks_the_run_before_the_attempt(cast: Any, running: tuple[APIClient, Run, dict[str, Any]]) -> None:
    _, run, _ = running
    assert_run_first(lambda: run_cancel(run=run, user=cast.alice))


@pytest.mark.postgres
@needs_postgres
def test_preempt_locks_the_run_before_the_attempt(running: tuple[APIClient, Run, dict[str, Any]]) -> None:
    _, run, _ = running
    assert_run_first(lambda: run_preempt(run=run, reason="test"))


@pytest.mark.postgres
@needs_postgres
def test_exit_report_locks_the_run_before_the_attempt(running: tuple[APIClient, Run, dict[str, Any]]) -> None:
    client, run, base = running
    exited = {**base, "node_rank": 0, "event": "exited", "exit_code": 0, "time": 1}
    assert_run_first(lambda: client.post(A + "events/", exited, format="json"))
    run.refresh_from_db()
    assert run.status == "succeeded"
