"""Acceptance 2 and 4: kill -9 of an agent mid-run (lost, requeued, resumed from the latest
checkpoint on the restarted agent) and a 2-rank gloo gang across two agents (all or nothing)."""

from __future__ import annotations

import shutil
import signal
import time
from pathlib import Path

import pytest

from tests.agents.helpers import alive, kill9, requeue_reasons, start_agent, submit, wait_status, write
from tests.fixtures.live import LiveStack

pytestmark = pytest.mark.live

RESUMABLE = """
import os, time, trainyard
start = 0
ckpt = trainyard.latest_checkpoint()
if ckpt is not None:
    start = ckpt.step + 1
    print(f"resumed from step {ckpt.step}", flush=True)
open(os.path.join(os.environ["TRAINYARD_RUN_DIR"], "pid"), "w").write(str(os.getpid()))
trainyard.set_total_steps(40)
for step in range(start, 40):
    trainyard.log(step, loss=1.0 / (step + 1))
    if step % 5 == 4:
        with trainyard.checkpoint(step) as path:
            open(path, "wb").write(b"step %d" % step)
    time.sleep(0.15)
"""

GANG = """
import os, torch, torch.distributed as dist, trainyard
dist.init_process_group("gloo", timeout=__import__("datetime").timedelta(seconds=60))
t = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(t)
trainyard.log(0, total=float(t.item()), world=float(dist.get_world_size()))
print(f"rank {dist.get_rank()} sum {t.item()}", flush=True)
dist.destroy_process_group()
"""


def metric_steps(stack: LiveStack, run_id: int) -> list[int]:
    return [s for (s,) in stack.query("SELECT step FROM tracking_metricpoint WHERE run_id=? AND key='loss' ORDER BY step", (run_id,))]


def test_kill9_agent_requeues_and_resumes_from_checkpoint(live_stack: LiveStack, tmp_path: Path) -> None:
    stack = live_stack
    stack.start_worker()
    agent = start_agent(stack, "node-a")
    run = submit(stack, f"python {write(tmp_path / 'job.py', RESUMABLE)}")
    wait_status(stack, run, {"running"}, 60)
    stack.wait_for(lambda: stack.query("SELECT count(*) FROM runs_checkpoint WHERE run_id=? AND stored_path != '' AND step >= 9",
                                       (run,))[0][0], 30, "two checkpoints stored on the server")
    job_pid = int(next((stack.workdir / "agent-node-a" / "runs" / str(run)).glob("a1-r0/job/pid")).read_text())
    kill9(agent)
    t0 = time.monotonic()
    stack.wait_for(lambda: stack.query("SELECT status FROM runs_attempt WHERE run_id=? AND number=1", (run,))[0][0] == "lost",
                   8 + 10, "attempt 1 to be lost")
    assert time.monotonic() - t0 <= 18
    assert not alive(job_pid), "the job died with its agent"
    status, restarts = stack.query("SELECT status, restarts FROM runs_run WHERE id=?", (run,))[0]
    assert status == "queued" and restarts == 1
    [reason] = requeue_reasons(stack, run)
    assert reason.startswith("node node-a lost (silent past "), reason
    # Resume on the restarted agent; without its local copy it must fetch the checkpoint from the server.
    shutil.rmtree(stack.workdir / "agent-node-a" / "runs" / str(run) / "checkpoints")
    start_agent(stack, "node-a")
    final = wait_status(stack, run, {"succeeded", "failed"}, 60)
    assert final["status"] == "succeeded", final
    logs = "".join(t for (t,) in stack.query("SELECT text FROM runs_logchunk WHERE run_id=?", (run,)))
    resumed = int(logs.split("resumed from step ")[1].split()[0])
    assert resumed >= 9
    assert stack.query("SELECT number, resumed_from_step FROM runs_attempt WHERE run_id=? ORDER BY number", (run,)) == [
        (1, None), (2, resumed)]
    # Steps logged by attempt 1 after its last checkpoint were logged again by attempt 2: one point each.
    stack.wait_for(lambda: metric_steps(stack, run) == list(range(40)), 10, "every step exactly once")
    values = dict(stack.query("SELECT step, value FROM tracking_metricpoint WHERE run_id=? AND key='loss'", (run,)))
    assert all(abs(values[s] - 1.0 / (s + 1)) < 1e-9 for s in range(40))


def test_gang_of_two_agents_all_or_nothing(live_stack: LiveStack, tmp_path: Path) -> None:
    stack = live_stack
    stack.env["TRAINYARD_GANG_START_TIMEOUT_S"] = "6"
    stack.start_worker()
    start_agent(stack, "node-a")
    b = start_agent(stack, "node-b")
    stack.wait_for(lambda: stack.query("SELECT count(*) FROM nodes_node WHERE state='ready'")[0][0] == 2, 30, "two nodes")
    job = write(tmp_path / "gang.py", GANG)
    run = submit(stack, f"python {job}", nodes=2)
    row = wait_status(stack, run, {"succeeded", "failed"}, 90)
    assert row["status"] == "succeeded", row
    logs = "".join(t for (t,) in stack.query("SELECT text FROM runs_logchunk WHERE run_id=?", (run,)))
    assert "rank 0 sum 3.0" in logs and "rank 1 sum 3.0" in logs

    # Freeze node-b: the gang is placed on both nodes, rank 0 starts, rank 1 never does.
    b.send_signal(signal.SIGSTOP)
    try:
        run2 = submit(stack, f"python {job}", nodes=2)
        stack.wait_for(lambda: stack.query("SELECT count(*) FROM runs_attempt WHERE run_id=? AND status='aborted'",
                                           (run2,))[0][0] or stack.query("SELECT count(*) FROM runs_attempt WHERE run_id=? "
                                                                         "AND status='lost'", (run2,))[0][0], 40,
                       "the half-started gang to be aborted")
        assert stack.query("SELECT count(*) FROM runs_assignment a JOIN runs_attempt t ON a.attempt_id=t.id "
                           "WHERE t.run_id=? AND a.state IN ('pending','claimed','started')", (run2,))[0][0] == 0
        pid_files = list((stack.workdir / "agent-node-a" / "runs" / str(run2)).glob("a1-r0"))
        assert pid_files, "rank 0 had started on node-a"
        stack.wait_for(lambda: not [p for p in Path("/proc").iterdir() if p.name.isdigit() and _cmd(p).endswith(str(job))
                                    and f"/{run2}/" in _cwd(p)], 15, "rank 0 of the aborted gang to be killed")
    finally:
        b.send_signal(signal.SIGCONT)
    row = wait_status(stack, run2, {"succeeded", "failed"}, 90)
    assert row["status"] == "succeeded", row


def _cmd(p: Path) -> str:
    try:
        return (p / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return ""


def _cwd(p: Path) -> str:
    try:
        return str((p / "cwd").resolve())
    except OSError:
        return ""
