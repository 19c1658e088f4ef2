"""Drains under a real agent: an admin drain (POST /api/v1/nodes/<id>/drain/) past its deadline,
then SIGTERM to the agent. Either way the job is told to stop (SIGTERM), checkpoints, and the
run goes back to the queue with the reason recorded, never succeeded or failed by that exit;
the next attempt resumes from the checkpoint. The SIGTERM'd agent stops claiming, waits out
--drain-timeout, preempts what still runs, says it is going offline and exits 0."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from tests.agents.helpers import requeue_reasons, start_agent, submit, wait_status, write
from tests.fixtures.live import LiveStack

pytestmark = [pytest.mark.live, pytest.mark.process]

JOB = """
import sys, time, trainyard
start = 0
ckpt = trainyard.latest_checkpoint()
if ckpt is not None:
    start = ckpt.step + 1
trainyard.set_total_steps(1000)
for step in range(start, 1000):
    trainyard.log(step, loss=1.0 / (step + 1))
    if trainyard.should_stop():
        with trainyard.checkpoint(step) as path:
            open(path, "wb").write(b"step %d" % step)
        print(f"stopping at step {step}", flush=True)
        sys.exit(0)
    time.sleep(0.05)
"""


def logs(stack: LiveStack, run: int, number: int) -> str:
    return "".join(t for (t,) in stack.query("SELECT c.text FROM runs_logchunk c JOIN runs_attempt a ON c.attempt_id=a.id "
                                             "WHERE a.run_id=? AND a.number=? ORDER BY c.seq", (run, number)))


def attempts(stack: LiveStack, run: int) -> list[tuple[int, str, int | None]]:
    return list(stack.query("SELECT number, status, resumed_from_step FROM runs_attempt WHERE run_id=? ORDER BY number", (run,)))


def test_admin_drain_past_deadline_then_agent_sigterm(live_stack: LiveStack, tmp_path: Path) -> None:
    stack = live_stack
    stack.start_worker()
    agent = start_agent(stack, "node-a", extra=["--drain-timeout", "2"])
    run = submit(stack, f"python {write(tmp_path / 'job.py', JOB)}", grace=10)
    wait_status(stack, run, {"running"}, 60)
    stack.wait_for(lambda: stack.query("SELECT steps_done FROM runs_run WHERE id=?", (run,))[0][0] >= 5, 20, "some progress")
    [(node_id,)] = stack.query("SELECT id FROM nodes_node")
    admin, alice = stack.token("admin"), stack.token("alice")
    stack.api("POST", f"/api/v1/nodes/{node_id}/drain/", {"deadline_s": 1}, token=alice, expect=403)
    assert stack.api("POST", f"/api/v1/nodes/{node_id}/drain/", {"deadline_s": 1}, token=admin)["state"] == "draining"

    # Past the deadline the sweep asks the agent to stop the job: it checkpoints and is requeued.
    row = wait_status(stack, run, {"queued", "succeeded", "failed"}, 5 + 10)
    assert row["status"] == "queued" and row["restarts"] == 0, row
    admin_drain = "node drained by an administrator; its drain deadline passed"
    assert requeue_reasons(stack, run) == [admin_drain]
    assert stack.query("SELECT reason FROM runs_attempt WHERE run_id=? AND number=1", (run,)) == [(admin_drain,)]
    stopped = int(stack.wait_for(lambda: logs(stack, run, 1).partition("stopping at step ")[2].split(), 10, "the job's last words")[0])
    assert attempts(stack, run) == [(1, "preempted", None)]
    time.sleep(1.5)  # a scheduling pass ran on the requeue: the draining node took nothing
    assert len(attempts(stack, run)) == 1

    # Undrained, the node takes the run back; attempt 2 resumes from the drain checkpoint.
    assert stack.api("POST", f"/api/v1/nodes/{node_id}/undrain/", token=admin)["state"] == "ready"
    wait_status(stack, run, {"running"}, 20)
    assert attempts(stack, run) == [(1, "preempted", None), (2, "running", stopped)]
    stack.wait_for(lambda: stack.query("SELECT steps_done FROM runs_run WHERE id=?", (run,))[0][0] >= stopped + 5, 20,
                   "progress after resuming")

    # SIGTERM to the agent: no more claims, the job gets --drain-timeout (2 s), then it is preempted.
    t0 = time.monotonic()
    agent.send_signal(signal.SIGTERM)
    row = wait_status(stack, run, {"queued", "succeeded", "failed"}, 2 + 10)
    assert row["status"] == "queued", row
    assert requeue_reasons(stack, run) == [admin_drain, "the node's agent shut down (drain timeout passed)"]
    assert agent.wait(20) == 0
    assert time.monotonic() - t0 < 15
    assert stack.query("SELECT state FROM nodes_node") == [("offline",)]
    assert [a[:2] for a in attempts(stack, run)] == [(1, "preempted"), (2, "preempted")]
    actions = {a for (a,) in stack.query("SELECT action FROM audit_auditevent WHERE object_type='runs.run' AND object_id=?",
                                         (str(run),))}
    assert "run.requeued" in actions and not actions & {"run.succeeded", "run.failed", "run.cancelled"}
    # Every logged step reached the tracking store exactly once, across both attempts.
    last = int(logs(stack, run, 2).partition("stopping at step ")[2].split()[0])
    steps = [s for (s,) in stack.query("SELECT step FROM tracking_metricpoint WHERE run_id=? AND key='loss' ORDER BY step", (run,))]
    assert steps == list(range(last + 1))
