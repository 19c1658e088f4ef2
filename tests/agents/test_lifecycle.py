"""In-process: how exits, drains, retention and energy reports change runs and attempts."""

from __future__ import annotations

import hashlib
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import transaction
from django.utils import timezone
from rest_framework.test import APIClient

from apps.audit.models import AuditEvent
from apps.fleet.services import nodes_sweep
from apps.nodes.models import Node, NodePool, SweepWatch
from apps.nodes.services import node_drain, node_lost_mark, web_pulse
from apps.runs.models import Attempt, Checkpoint, EnergySample, Run
from apps.scheduling.services import placement_pass
from tests.agents.server import A, claim, make_run, register


@pytest.fixture
def pool(db: Any) -> NodePool:
    return NodePool.objects.create(name="local")


def start(client: APIClient, session: int, **extra: Any) -> dict[str, Any]:
    """Place, claim and start the next attempt on this (only) node; the base of its reports."""
    placement_pass()
    [spec] = claim(client, session)
    base = {"attempt_id": spec["attempt_id"], "number": spec["number"], "node_rank": 0, "time": 0}
    assert client.post(A + "events/", {**base, "event": "started", **extra}, format="json").status_code == 200
    return base


def exited(client: APIClient, base: dict[str, Any], **body: Any) -> None:
    resp = client.post(A + "events/", {**base, "event": "exited", **body}, format="json")
    assert resp.status_code == 200, resp.content


def test_oom_kill_is_retried_up_to_max_restarts_then_fails(cast: Any, pool: NodePool) -> None:
    client, reg = register(pool, "n1")
    run = make_run(cast, pool, max_restarts=1)
    base = start(client, reg["session"])
    exited(client, base, exit_code=None, signal=9, log_tail="step 7")  # the kernel's OOM killer
    run.refresh_from_db()
    assert (run.status, run.restarts, run.reason_code) == ("queued", 1, "oom_killed")
    assert "killed by signal 9 (out of memory?)" in run.status_reason
    assert Attempt.objects.get(pk=base["attempt_id"]).status == "failed"
    # The same again, seen through a shell wrapper (exit 137): past max_restarts the run fails.
    base = start(client, reg["session"])
    assert base["number"] == 2
    exited(client, base, exit_code=137, signal=None)
    run.refresh_from_db()
    assert run.status == "failed" and run.restarts == 2
    assert "exit code 137 (out of memory?)" in run.status_reason and "gave up after 1 restarts" in run.status_reason


def test_max_runtime_fails_the_run_even_after_a_clean_exit(cast: Any, pool: NodePool) -> None:
    client, reg = register(pool, "n1")
    run = make_run(cast, pool, max_runtime_s=5)
    base = start(client, reg["session"])
    exited(client, base, exit_code=0, signal=None, stop_kind="max_runtime")  # the job checkpointed on SIGTERM
    run.refresh_from_db()
    assert (run.status, run.status_reason, run.reason_code, run.restarts) == ("failed", "exceeded max runtime of 5 s",
                                                                             "max_runtime", 0)
    resp = client.post(A + "events/", {**base, "event": "exited", "stop_kind": "timeout"}, format="json")
    assert resp.status_code == 400 and "stop_kind" in resp.json()["error"]["fields"]


def test_agent_shutdown_and_admin_drain_requeue_with_their_reasons(cast: Any, pool: NodePool) -> None:
    client, reg = register(pool, "n1")
    run = make_run(cast, pool)
    base = start(client, reg["session"])
    # The agent got SIGTERM and its drain timeout passed: it stopped the job itself.
    exited(client, base, exit_code=0, signal=None, stop_kind="drain")
    run.refresh_from_db()
    assert (run.status, run.reason_code, run.restarts) == ("queued", "preempted", 0)
    assert run.status_reason == "the node's agent shut down (drain timeout passed)"
    # An admin drains the node with a deadline; past it, the sweep asks the agent to stop the job.
    base = start(client, reg["session"], resumed_from_step=9)
    assert Attempt.objects.get(pk=base["attempt_id"]).resumed_from_step == 9
    node = Node.objects.get(agent_uid="n1")
    node_drain(node=node, user=cast.admin, deadline_s=60)
    hb = {"session": reg["session"], "draining": False, "devices": [], "running": [{**base, "node_rank": 0}]}
    assert client.post(A + "heartbeat/", hb, format="json").json() == {"stop": [], "kill": [], "drain": True}
    Node.objects.filter(pk=node.pk).update(drain_deadline=timezone.now() - timedelta(seconds=1))
    assert nodes_sweep()["drained"] == 1
    assert client.post(A + "heartbeat/", hb, format="json").json()["stop"] == [
        {"attempt_id": base["attempt_id"], "kind": "drain", "grace_period_s": 30}]
    exited(client, base, exit_code=0, signal=None, stop_kind="drain")
    run.refresh_from_db()
    assert run.status == "queued" and run.status_reason == "node drained by an administrator; its drain deadline passed"
    assert placement_pass() == 0, "a draining node takes no new work"
    actions = set(AuditEvent.objects.filter(object_type="runs.run", object_id=str(run.pk)).values_list("action", flat=True))
    assert "run.requeued" in actions and not actions & {"run.succeeded", "run.failed"}
    # A clean agent exit says "offline": the node is neither lost nor given work.
    hb["offline"] = True
    assert client.post(A + "heartbeat/", hb, format="json").status_code == 200
    Node.objects.filter(pk=node.pk).update(last_heartbeat_at=timezone.now() - timedelta(hours=1))
    assert nodes_sweep()["lost"] == 0 and Node.objects.get(pk=node.pk).state == "offline"


def test_resumed_from_step_only_for_rank0_of_later_attempts(cast: Any, pool: NodePool) -> None:
    client, reg = register(pool, "n1")
    make_run(cast, pool)
    base = start(client, reg["session"], resumed_from_step=3)
    assert Attempt.objects.get(pk=base["attempt_id"]).resumed_from_step is None  # attempt 1 starts fresh
    resp = client.post(A + "events/", {**base, "event": "started", "resumed_from_step": -1}, format="json")
    assert resp.status_code == 400 and "resumed_from_step" in resp.json()["error"]["fields"]


def test_checkpoint_retention_marks_records_deleted_and_frees_the_file(cast: Any, pool: NodePool, settings: Any,
                                                                        tmp_path: Path) -> None:
    settings.MEDIA_ROOT = tmp_path
    client, reg = register(pool, "n1")
    run = make_run(cast, pool)
    base = {k: v for k, v in start(client, reg["session"]).items() if k in ("attempt_id", "number")}
    stored = []
    for step in (4, 9):
        data = b"state %d" % step
        rec = {**base, "step": step, "file": f"ckpt-{step:010d}.pt", "size": len(data),
               "sha256": hashlib.sha256(data).hexdigest(), "metrics": {}}
        ckpt_id = client.post(A + "checkpoints/", rec, format="json").json()["id"]
        put = client.generic("PUT", f"{A}checkpoints/{ckpt_id}/file/", data, content_type="application/octet-stream")  # type: ignore[arg-type]
        assert put.status_code == 200, put.content
        stored.append(tmp_path / Checkpoint.objects.get(pk=ckpt_id).stored_path)
    gone = {**base, "step": 4, "file": "ckpt-0000000004.pt"}
    assert client.post(A + "checkpoints/deleted/", gone, format="json").json() == {"deleted": 1}
    assert client.post(A + "checkpoints/deleted/", gone, format="json").json() == {"deleted": 0}  # a replay
    first, second = Checkpoint.objects.filter(run=run).order_by("step")
    assert first.deleted_at is not None and second.deleted_at is None  # the record stays
    assert not stored[0].exists() and stored[1].exists()
    assert client.get(f"{A}checkpoints/{first.pk}/file/").status_code == 404
    assert client.get(f"{A}checkpoints/{second.pk}/file/").status_code == 200
    bad = client.post(A + "checkpoints/deleted/", {**gone, "file": "../etc/passwd"}, format="json")
    assert bad.status_code == 400 and "file" in bad.json()["error"]["fields"]


def test_attempt_energy_is_its_last_cumulative_sample(cast: Any, pool: NodePool) -> None:
    client, reg = register(pool, "n1")
    run = make_run(cast, pool, max_restarts=3)
    totals = []
    for number, samples in ((1, [(100.0, 5.0), (101.0, 12.5)]), (2, [(200.0, 3.0), (201.0, 7.25), (201.0, 7.25)])):
        base = {k: v for k, v in start(client, reg["session"]).items() if k in ("attempt_id", "number")}
        assert base["number"] == number
        body = {**base, "samples": [{"device_index": -1, "at": at, "energy_j": e, "power_w": None, "utilization": None,
                                     "estimated": True} for at, e in samples]}
        assert client.post(A + "energy/", body, format="json").status_code == 200
        assert client.post(A + "energy/", body, format="json").status_code == 200  # replays change nothing
        attempt = Attempt.objects.get(pk=base["attempt_id"])
        last = EnergySample.objects.filter(attempt=attempt).order_by("-at").first()
        assert last is not None and attempt.energy_j == last.energy_j == samples[-1][1]
        totals.append(attempt.energy_j)
        exited(client, {**base, "node_rank": 0, "time": 0}, exit_code=None, signal=9)  # OOM: retried
    run = Run.objects.get(pk=run.pk)
    assert run.energy_j == sum(totals) == 12.5 + 7.25 and run.energy_estimated


def test_sweeper_back_from_an_outage_gives_silent_nodes_grace(cast: Any, pool: NodePool, settings: Any) -> None:
    """After a gap in sweeps (the sweeper was down, and heartbeats most likely could not land
    either) silent nodes get one node timeout to check in; those that do stay ready, those that
    do not are declared lost once it has passed. Regular sweeps give no grace."""
    settings.TRAINYARD_NODE_TIMEOUT_S, settings.TRAINYARD_SWEEP_GAP_S = 30, 20
    client, reg = register(pool, "n1")
    run = make_run(cast, pool)
    base = start(client, reg["session"])
    register(pool, "n2")  # only now, so the run is on n1 whatever the packing order
    assert nodes_sweep()["lost"] == 0
    # The sweeper is down for ten minutes, and so were the heartbeats.
    SweepWatch.objects.update(last_sweep_at=timezone.now() - timedelta(minutes=10))
    Node.objects.update(last_heartbeat_at=timezone.now() - timedelta(minutes=10))
    counts = nodes_sweep()
    assert (counts["lost"], counts["grace"]) == (0, 2)
    assert set(Node.objects.values_list("state", flat=True)) == {"ready"}
    assert Run.objects.get(pk=run.pk).status == "running"
    # n1 checks in during the grace; n2 does not. Once the grace has passed, only n2 is lost.
    hb = {"session": reg["session"], "draining": False, "devices": [], "running": [{**base, "node_rank": 0}]}
    assert client.post(A + "heartbeat/", hb, format="json").status_code == 200
    SweepWatch.objects.update(grace_until=timezone.now() - timedelta(seconds=1))
    assert nodes_sweep()["lost"] == 1
    assert dict(Node.objects.values_list("agent_uid", "state")) == {"n1": "ready", "n2": "lost"}
    assert Run.objects.get(pk=run.pk).status == "running"
    assert AuditEvent.objects.filter(action="node.lost", object_id=str(Node.objects.get(agent_uid="n2").pk)).exists()


def test_a_run_left_on_a_node_already_lost_is_requeued_by_the_next_sweep(cast: Any, pool: NodePool, settings: Any) -> None:
    """A sweep that died after declaring the node lost but before requeuing its runs (two steps)
    leaves them holding devices there; the next sweep requeues them, naming the node."""
    settings.TRAINYARD_NODE_TIMEOUT_S = 30
    client, reg = register(pool, "n1")
    run = make_run(cast, pool)
    start(client, reg["session"])
    node = Node.objects.get(agent_uid="n1")
    with transaction.atomic():
        node_lost_mark(node_id=node.pk)  # the first step only
    assert Run.objects.get(pk=run.pk).status == "running"
    assert nodes_sweep()["lost"] == 0  # nothing newly lost
    run = Run.objects.get(pk=run.pk)
    assert run.status == "queued" and run.status_reason.startswith("node n1 lost (silent past 30s)"), run.status_reason
    assert nodes_sweep()["lost"] == 0 and Run.objects.get(pk=run.pk).status == "queued"  # nothing twice


def test_regular_sweeps_declare_silent_nodes_lost_at_once(cast: Any, pool: NodePool, settings: Any) -> None:
    settings.TRAINYARD_NODE_TIMEOUT_S, settings.TRAINYARD_SWEEP_GAP_S = 30, 20
    register(pool, "n1")
    assert nodes_sweep()["lost"] == 0
    SweepWatch.objects.update(last_sweep_at=timezone.now() - timedelta(seconds=5))
    Node.objects.update(last_heartbeat_at=timezone.now() - timedelta(minutes=1))
    assert nodes_sweep() == {"lost": 1, "aborted": 0, "drained": 0, "grace": 0}


def test_a_web_outage_is_no_evidence_against_silent_nodes(cast: Any, pool: NodePool, settings: Any) -> None:
    """The web tier was down for a minute (worker and beat up, so sweeps went on): every node went
    silent, and none is declared lost, during the outage or when the web returns. From the web's
    return each node gets a whole node timeout; one that stays silent through it is lost."""
    settings.TRAINYARD_NODE_TIMEOUT_S, settings.TRAINYARD_SWEEP_GAP_S, settings.TRAINYARD_WEB_PULSE_S = 30, 20, 2
    client, reg = register(pool, "n1")
    run = make_run(cast, pool)
    base = start(client, reg["session"])
    register(pool, "n2")
    now = timezone.now()
    # Up for ten minutes, then down for the last 61 s: the nodes' last heartbeats came just before.
    SweepWatch.objects.update_or_create(pk=SweepWatch.SINGLETON, defaults={
        "last_sweep_at": now - timedelta(seconds=5), "web_up_since": now - timedelta(minutes=10),
        "web_pulse_at": now - timedelta(seconds=61)})
    Node.objects.update(last_heartbeat_at=now - timedelta(seconds=62))
    counts = nodes_sweep()
    assert (counts["lost"], counts["grace"]) == (0, 2)
    # The web is back: its up-stretch starts again, and the silence before it counts for nothing.
    web_pulse(now=timezone.now())
    watch = SweepWatch.objects.get()
    assert watch.web_up_since is not None and watch.web_up_since == watch.web_pulse_at and watch.web_up_since > now
    assert (nodes_sweep()["lost"], set(Node.objects.values_list("state", flat=True))) == (0, {"ready"})
    # n1 checks in; n2 stays silent for a whole timeout after the web's return: only n2 is lost.
    hb = {"session": reg["session"], "draining": False, "devices": [], "running": [{**base, "node_rank": 0}]}
    assert client.post(A + "heartbeat/", hb, format="json").status_code == 200
    SweepWatch.objects.update(web_up_since=timezone.now() - timedelta(seconds=31), web_pulse_at=timezone.now())
    Node.objects.filter(agent_uid="n1").update(last_heartbeat_at=timezone.now() - timedelta(seconds=2))
    assert nodes_sweep()["lost"] == 1
    assert dict(Node.objects.values_list("agent_uid", "state")) == {"n1": "ready", "n2": "lost"}
    assert Run.objects.get(pk=run.pk).status == "running"
    assert Attempt.objects.filter(run=run).count() == 1


def test_a_node_silent_while_the_web_was_up_is_lost_even_alone(cast: Any, pool: NodePool, settings: Any) -> None:
    """A fleet of one: no other agent can vouch for the web tier, its own pulse does. Silent for
    a whole timeout while the web was up: lost, also when the web went down afterwards."""
    settings.TRAINYARD_NODE_TIMEOUT_S, settings.TRAINYARD_SWEEP_GAP_S = 30, 20
    client, reg = register(pool, "n1")
    run = make_run(cast, pool)
    start(client, reg["session"])
    now = timezone.now()
    SweepWatch.objects.update_or_create(pk=SweepWatch.SINGLETON, defaults={
        "last_sweep_at": now - timedelta(seconds=5), "web_up_since": now - timedelta(minutes=10),
        "web_pulse_at": now - timedelta(seconds=20)})
    Node.objects.update(last_heartbeat_at=now - timedelta(seconds=55))  # 35 s of silence with the web up
    assert nodes_sweep()["lost"] == 1
    assert Run.objects.get(pk=run.pk).status == "queued"
    # Another node, silent for 25 s of web uptime and 60 s in all: not (yet) lost.
    client, reg = register(pool, "n2")
    Node.objects.filter(agent_uid="n2").update(last_heartbeat_at=now - timedelta(seconds=45))
    SweepWatch.objects.update(web_pulse_at=now - timedelta(seconds=20))
    assert Node.objects.get(agent_uid="n2").state == "ready" and nodes_sweep()["lost"] == 0


def test_the_web_pulse_keeps_its_stretch_and_starts_a_new_one_after_a_break(db: Any, settings: Any) -> None:
    settings.TRAINYARD_WEB_PULSE_S = 2
    t0 = timezone.now()
    for s in (0, 2, 4, 9):  # several web processes, pulses a few seconds apart
        web_pulse(now=t0 + timedelta(seconds=s))
    web_pulse(now=t0 + timedelta(seconds=8))  # a late writer does not move it backwards
    web_pulse(now=t0 + timedelta(seconds=9.5))  # nor does one right after another process's pulse write
    assert SweepWatch.objects.values_list("web_up_since", "web_pulse_at").get() == (t0, t0 + timedelta(seconds=9))
    web_pulse(now=t0 + timedelta(seconds=16))  # more than three pulses missed: the web was down
    assert SweepWatch.objects.values_list("web_up_since", "web_pulse_at").get() == (t0 + timedelta(seconds=16),) * 2
