"""Claims wait on Redis, not the database (apps.nodes.wakeups): woken by a placement, a drain or
a new session within a second; work whose wake-up was lost, or sent while Redis is down, is
still found; and a waiting claim makes no database query."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from apps.fleet import services as fleet_services
from apps.nodes import services, wakeups
from apps.nodes.models import Node, NodePool
from apps.scheduling.services import placement_pass
from tests.agents.server import A, make_run, register
from tests.fixtures.services import free_port


@pytest.fixture
def redis_settings(redis_url: str) -> Iterator[str]:
    with override_settings(REDIS_URL=redis_url):
        yield redis_url


@pytest.fixture
def pool(transactional_db: Any) -> NodePool:
    return NodePool.objects.create(name="local")


class Claim(threading.Thread):
    """One long-poll claim in its own thread (as a web thread holds it), timed from its start."""

    def __init__(self, client: APIClient, session: int, wait_s: float) -> None:
        super().__init__(daemon=True)
        self.client, self.session, self.wait_s = client, session, wait_s
        self.status = 0
        self.body: dict[str, Any] = {}
        self.answered_at = 0.0

    def run(self) -> None:
        try:
            resp = self.client.post(A + "claim/", {"session": self.session, "wait_s": self.wait_s, "free_devices": [0]},
                                    format="json")
            self.status, self.body = resp.status_code, resp.json()
        finally:
            self.answered_at = time.monotonic()
            connection.close()

    def started_waiting(self) -> Claim:
        self.start()
        time.sleep(0.5)  # past its first read of the database: it is blocked on Redis now
        assert self.is_alive(), self.body
        return self

    def answer(self, timeout: float) -> dict[str, Any]:
        self.join(timeout)
        assert not self.is_alive(), f"no answer within {timeout}s"
        return self.body


def test_a_placement_wakes_the_waiting_claim_within_a_second(cast: Any, pool: NodePool, redis_settings: str) -> None:
    client, reg = register(pool, "n1")
    claim = Claim(client, reg["session"], wait_s=20).started_waiting()
    run = make_run(cast, pool)
    assert placement_pass() == 1  # its transaction commits, then the node's wake-up is pushed
    placed_at = time.monotonic()
    body = claim.answer(timeout=5)
    assert claim.status == 200 and [a["run_id"] for a in body["assignments"]] == [run.pk]
    assert claim.answered_at - placed_at < 1.0


def test_work_whose_wake_up_was_lost_is_found_by_the_next_claim(cast: Any, pool: NodePool, redis_settings: str,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    client, reg = register(pool, "n1")
    claim = Claim(client, reg["session"], wait_s=1.5).started_waiting()
    monkeypatch.setattr(wakeups, "claims_wake", lambda *, node_ids: False)  # pushed into a Redis that then lost it
    run = make_run(cast, pool)
    assert placement_pass() == 1
    assert claim.answer(timeout=5)["assignments"] == []  # the wait ran out: nothing woke it
    # The agent claims again at once; that claim reads the database before it waits.
    started = time.monotonic()
    again = Claim(client, reg["session"], wait_s=20)
    again.start()
    assert [a["run_id"] for a in again.answer(timeout=5)["assignments"]] == [run.pk]
    assert again.answered_at - started < 1.0


def test_with_redis_down_a_waiting_claim_reads_the_database_now_and_then(cast: Any, pool: NodePool,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fleet_services, "CLAIM_FALLBACK_POLL_S", 0.5)
    with override_settings(REDIS_URL=f"redis://127.0.0.1:{free_port()}/0"):  # nothing listens there
        client, reg = register(pool, "n1")
        claim = Claim(client, reg["session"], wait_s=20).started_waiting()
        run = make_run(cast, pool)
        assert placement_pass() == 1  # its wake-up is not sent: logged, and the commit stands
        placed_at = time.monotonic()
        assert [a["run_id"] for a in claim.answer(timeout=5)["assignments"]] == [run.pk]
        assert claim.answered_at - placed_at < 0.5 + 1.0


def test_a_drain_and_a_new_session_answer_the_waiting_claim_at_once(cast: Any, pool: NodePool, redis_settings: str) -> None:
    client, reg = register(pool, "n1")
    node = Node.objects.get(agent_uid="n1")
    # An administrator drains the node.
    claim = Claim(client, reg["session"], wait_s=20).started_waiting()
    asked = time.monotonic()
    services.node_drain(node=node, user=cast.admin)
    body = claim.answer(timeout=5)
    assert body == {"assignments": [], "drain": True} and claim.answered_at - asked < 1.0
    services.node_undrain(node=node, user=cast.admin)
    # The agent drains itself (SIGTERM): its heartbeat says so, and its claim answers.
    claim = Claim(client, reg["session"], wait_s=20).started_waiting()
    asked = time.monotonic()
    beat = client.post(A + "heartbeat/", {"session": reg["session"], "draining": True, "devices": [], "running": []},
                       format="json")
    assert beat.status_code == 200, beat.content
    assert claim.answer(timeout=5)["drain"] is True and claim.answered_at - asked < 1.0
    # A restarted agent registers again: the old session's claim is refused at once.
    claim = Claim(client, reg["session"], wait_s=20)
    Node.objects.filter(pk=node.pk).update(state="ready")
    claim.started_waiting()
    asked = time.monotonic()
    register(pool, "n1")
    claim.answer(timeout=5)
    assert claim.status == 409 and claim.answered_at - asked < 1.0


def test_a_waiting_claim_makes_no_database_query(db: Any, redis_settings: str) -> None:
    pool = NodePool.objects.create(name="local")
    client, reg = register(pool, "n1")
    body = {"session": reg["session"], "free_devices": [0]}
    # The first claim puts the node in the credential cache (apps.nodes.auth); both measured use it.
    assert client.post(A + "claim/", {**body, "wait_s": 0}, format="json").status_code == 200
    with CaptureQueriesContext(connection) as at_once:
        assert client.post(A + "claim/", {**body, "wait_s": 0}, format="json").json()["assignments"] == []
    started = time.monotonic()
    with CaptureQueriesContext(connection) as waited:
        assert client.post(A + "claim/", {**body, "wait_s": 1.5}, format="json").json()["assignments"] == []
    assert time.monotonic() - started >= 1.4  # it did wait, on Redis
    # The same read as a claim that does not wait (the credential, state and pending check): none while waiting.
    assert [q["sql"] for q in waited.captured_queries] == [q["sql"] for q in at_once.captured_queries]


def test_long_idle_claims_end_spread_over_the_last_part_of_their_wait() -> None:
    # Agents that started together would otherwise claim again together every wait_s, for ever.
    held = [fleet_services.claim_wait_spread(25.0) for _ in range(2000)]
    assert all(25.0 * (1 - fleet_services.CLAIM_SPREAD) <= h <= 25.0 for h in held)
    assert max(held) - min(held) > 25.0 * fleet_services.CLAIM_SPREAD * 0.8  # spread, not one fixed cut
    # A short wait is held as asked.
    assert fleet_services.claim_wait_spread(1.5) == 1.5
    assert fleet_services.claim_wait_spread(0.0) == 0.0
