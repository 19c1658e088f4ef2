"""In-process: a gang has one outcome. The rendezvous port is rank 0's to report, a failure is
classed as the user's (fail) or the infrastructure's (requeue), and a communication error waits
for the other nodes' reports, since a peer's crash may be its cause."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from apps.audit.models import AuditEvent
from apps.jobtemplates.models import JobTemplate
from apps.nodes.models import Node, NodePool
from apps.runs.models import Assignment, Attempt, Run
from apps.runs.services.failures import INFRA, USER, classify_exit, gang_cause
from apps.scheduling.services import placement_pass
from tests.agents.server import A, make_run, register

GLOO_RESET = "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [127.0.0.1]:4242"
TRACEBACK = 'Traceback (most recent call last):\n  File "train.py", line 9, in <module>\nValueError: bad batch'


@pytest.fixture
def pool(db: Any) -> NodePool:
    return NodePool.objects.create(name="local")


def claim(client: APIClient, session: int, free: list[int]) -> dict[str, Any]:
    resp = client.post(A + "claim/", {"session": session, "wait_s": 0, "free_devices": free}, format="json")
    assert resp.status_code == 200, resp.content
    [spec] = resp.json()["assignments"]
    return dict(spec)


def two_node_gang(cast: Any, pool: NodePool, **fields: Any) -> tuple[Run, list[tuple[APIClient, dict[str, Any]]]]:
    """A 2 nodes x 2 devices run, placed, claimed and started on both nodes."""
    nodes = [register(pool, f"n{i}", slots=2) for i in range(2)]
    run = make_run(cast, pool, nodes=2, devices_per_node=2, **fields)
    placement_pass()
    out = []
    for client, reg in nodes:
        spec = claim(client, reg["session"], [0, 1])
        base = {"attempt_id": spec["attempt_id"], "number": spec["number"], "node_rank": spec["node_rank"], "time": 0}
        assert client.post(A + "events/", {**base, "event": "started"}, format="json").status_code == 200
        out.append((client, {**base, "spec": spec}))
    out.sort(key=lambda item: item[1]["node_rank"])
    return run, out


def exited(client: APIClient, base: dict[str, Any], **body: Any) -> None:
    payload = {k: v for k, v in base.items() if k != "spec"}
    resp = client.post(A + "events/", {**payload, "event": "exited", **body}, format="json")
    assert resp.status_code == 200, resp.content


def test_world_size_counts_processes_one_per_device(cast: Any, pool: NodePool) -> None:
    run, gang = two_node_gang(cast, pool)
    specs = [base["spec"] for _, base in gang]
    assert [(s["node_rank"], s["nnodes"], s["local_world_size"], s["world_size"], s["launch"]) for s in specs] == [
        (0, 2, 2, 4, "per_device"), (1, 2, 2, 4, "per_device")]


def test_a_per_node_template_gets_one_process_per_node(cast: Any, pool: NodePool) -> None:
    JobTemplate.objects.create(slug="t", version=1, title="t", kind="custom", entrypoint="x", launch="per_node")
    _, gang = two_node_gang(cast, pool)
    assert {(b["spec"]["local_world_size"], b["spec"]["world_size"]) for _, b in gang} == {(1, 2)}


def test_rendezvous_port_is_rank_zeros_to_report(cast: Any, pool: NodePool) -> None:
    run, [(c0, b0), (c1, b1)] = two_node_gang(cast, pool)
    ask = {"attempt_id": b1["attempt_id"], "number": b1["number"], "node_rank": 1}
    assert c1.post(A + "rendezvous/", ask, format="json").json() == {"master_addr": "127.0.0.1", "master_port": None}
    report = {"attempt_id": b0["attempt_id"], "number": b0["number"], "node_rank": 0, "master_port": 41234}
    assert c0.post(A + "rendezvous/", report, format="json").json()["master_port"] == 41234
    assert c1.post(A + "rendezvous/", ask, format="json").json() == {"master_addr": "127.0.0.1", "master_port": 41234}
    bad = c0.post(A + "rendezvous/", {**report, "master_port": 70000}, format="json")
    assert bad.status_code == 400 and "master_port" in bad.json()["error"]["fields"]
    stale = c1.post(A + "rendezvous/", {**ask, "number": 2}, format="json")
    assert stale.status_code == 409


def test_user_error_on_one_node_fails_the_run_even_after_a_peers_communication_error(cast: Any, pool: NodePool) -> None:
    run, [(c0, b0), (c1, b1)] = two_node_gang(cast, pool)
    # Node 0's ranks lose their peers first and say so; that alone decides nothing.
    exited(c0, b0, exit_code=1, signal=None, failed_rank=0, log_tail=GLOO_RESET,
           ranks=[{"rank": 0, "local_rank": 0, "exit_code": 1, "signal": None, "seconds": 3.0}])
    run.refresh_from_db()
    attempt = Attempt.objects.get(pk=b0["attempt_id"])
    assert run.status == "running" and attempt.status == "running" and attempt.stop_kind == "abort"
    # Node 1 reports the cause: rank 3 raised.
    exited(c1, b1, exit_code=1, signal=None, failed_rank=3, log_tail=TRACEBACK, stop_kind="abort")
    run.refresh_from_db()
    assert (run.status, run.reason_code, run.restarts) == ("failed", "exit_code", 0)
    assert run.status_reason.startswith("rank 3 failed with exit code 1") and "ValueError: bad batch" in run.status_reason
    rows = dict(Assignment.objects.filter(attempt_id=attempt.pk).values_list("node_rank", "failure_code"))
    assert rows == {0: "comm_error", 1: "exit_code"}
    assert Assignment.objects.get(attempt_id=attempt.pk, node_rank=0).ranks[0]["rank"] == 0


def test_communication_error_alone_requeues_once_every_node_has_stopped(cast: Any, pool: NodePool) -> None:
    run, [(c0, b0), (c1, b1)] = two_node_gang(cast, pool)
    exited(c1, b1, exit_code=1, signal=None, failed_rank=2, log_tail=GLOO_RESET)
    assert Run.objects.get(pk=run.pk).status == "running"
    exited(c0, b0, exit_code=None, signal=15, stop_kind="abort")  # stopped by the gang's SIGTERM
    run.refresh_from_db()
    assert (run.status, run.reason_code, run.restarts) == ("queued", "comm_error", 1)
    assert "rank 2 failed with exit code 1: a communication error between ranks" in run.status_reason
    assert AuditEvent.objects.filter(action="run.requeued", object_id=str(run.pk)).exists()


def test_a_rank_killed_from_outside_requeues_at_once(cast: Any, pool: NodePool) -> None:
    run, [(c0, b0), (c1, b1)] = two_node_gang(cast, pool)
    exited(c1, b1, exit_code=None, signal=9, failed_rank=3)
    run.refresh_from_db()
    assert (run.status, run.reason_code) == ("queued", "oom_killed")
    assert Attempt.objects.get(pk=b0["attempt_id"]).stop_kind == "abort", "node 0's ranks are told to stop"
    exited(c0, b0, exit_code=1, signal=None, failed_rank=0, log_tail=GLOO_RESET, stop_kind="abort")
    assert Run.objects.get(pk=run.pk).status == "queued", "a late report changes nothing"


@pytest.mark.parametrize(("exit_code", "signal", "tail", "cls", "code"), [
    (1, None, TRACEBACK, USER, "exit_code"),
    (None, 11, "", USER, "crashed"),
    (None, 9, "", INFRA, "oom_killed"),
    (137, None, "", INFRA, "oom_killed"),
    (None, 15, "", INFRA, "killed"),
    (1, None, GLOO_RESET, INFRA, "comm_error"),
    (1, None, "torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. "
              "port: 29500, useIpv6: 0, code: -98, name: EADDRINUSE, message: address already in use", INFRA, "port_in_use"),
    (1, None, "RuntimeError: CUDA error: uncorrectable ECC error encountered", INFRA, "device_error"),
    (1, None, "NCCL WARN Call to recv from 10.0.0.2<45123> failed : Connection reset by peer", INFRA, "comm_error"),
])
def test_failure_classes(exit_code: int | None, signal: int | None, tail: str, cls: str, code: str) -> None:
    failure = classify_exit(rank=2, exit_code=exit_code, signal=signal, log_tail=tail)
    assert (failure.cls, failure.code) == (cls, code), failure
    assert failure.words.startswith("rank 2 ")


def test_gang_cause_prefers_a_ranks_own_failure_to_its_peers_reaction() -> None:
    comm = classify_exit(rank=0, exit_code=1, signal=None, log_tail=GLOO_RESET)
    user = classify_exit(rank=3, exit_code=1, signal=None, log_tail=TRACEBACK)
    killed = classify_exit(rank=1, exit_code=None, signal=9)
    assert gang_cause([comm, user]) == user
    assert gang_cause([comm, killed]) == killed
    assert gang_cause([comm]) == comm and gang_cause([]) is None


def test_an_infrastructure_failure_backs_off_and_avoids_the_suspect_node(cast: Any, pool: NodePool, settings: Any) -> None:
    settings.TRAINYARD_RETRY_BACKOFF_S = 60
    run, [(c0, b0), (c1, b1)] = two_node_gang(cast, pool)
    third_client, third = register(pool, "n2", slots=2)
    node1 = Assignment.objects.get(attempt_id=b1["attempt_id"], node_rank=1).node_id
    exited(c1, b1, exit_code=None, signal=9, failed_rank=3)  # node 1's rank was killed: node 1 is suspect
    run.refresh_from_db()
    assert run.status == "queued" and run.avoid_nodes == [node1]
    assert 55 <= (run.retry_at - timezone.now()).total_seconds() <= 60
    exited(c0, b0, exit_code=None, signal=15, stop_kind="abort")
    placement_pass()
    run.refresh_from_db()
    assert run.status == "queued", "not placed during its backoff"
    assert run.reason_code == "retrying_after_failure" and "retried in" in run.status_reason, run.status_reason
    # Once the backoff is over it goes to the two nodes that are not suspect.
    Run.objects.filter(pk=run.pk).update(retry_at=timezone.now() - timedelta(seconds=1))
    placement_pass()
    second = Attempt.objects.get(run=run, number=2)
    assert sorted(Assignment.objects.filter(attempt=second).values_list("node_id", flat=True)) == sorted(
        n for n in Node.objects.filter(pool=pool).values_list("pk", flat=True) if n != node1)
    # A second infrastructure failure doubles the backoff.
    spec = claim(third_client, third["session"], [0, 1])
    base = {"attempt_id": spec["attempt_id"], "number": spec["number"], "node_rank": spec["node_rank"], "time": 0}
    exited(third_client, base, exit_code=1, signal=None, log_tail="RuntimeError: CUDA error: uncorrectable ECC error encountered")
    run.refresh_from_db()
    assert run.restarts == 2 and 115 <= (run.retry_at - timezone.now()).total_seconds() <= 120
    assert third["node_id"] in run.avoid_nodes and node1 in run.avoid_nodes
