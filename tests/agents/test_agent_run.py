"""Acceptance 1: a job runs to success under a real agent; a failure carries its exit code and
last log lines; cancel ends the whole process tree within the grace period + 5 s."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.agents.helpers import alive, start_agent, submit, wait_status, write
from tests.fixtures.live import LiveStack

pytestmark = [pytest.mark.live, pytest.mark.process]

JOB_OK = """
import time, trainyard
t = time.process_time()
while time.process_time() - t < 0.5:  # some CPU for the energy estimate to see
    pass
trainyard.set_total_steps(20)
trainyard.record_lineage(dataset="synthetic")
for step in range(20):
    trainyard.log(step, loss=1.0 / (step + 1))
    if step % 10 == 9:
        with trainyard.checkpoint(step, metrics={"loss": 0.5}) as path:
            open(path, "wb").write(b"state %d" % step)
print("done training")
"""

JOB_FAIL = """
import sys
for i in range(50):
    print(f"line {i}")
print("boom: the data loader exploded", file=sys.stderr)
sys.exit(3)
"""

# The job ignores SIGTERM; its child starts a grandchild that leaves the process group (setsid).
JOB_TREE = """
import os, signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
pids = os.path.join(os.environ["TRAINYARD_RUN_DIR"], "pids")
child = subprocess.Popen([sys.executable, "-c", '''
import os, signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
g = subprocess.Popen([sys.executable, "-c", "import signal,time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"],
                     start_new_session=True)
open(sys.argv[1], "a").write(f"{os.getpid()} {g.pid}\\\\n")
time.sleep(600)
''', pids])
open(pids, "a").write(f"{os.getpid()}\\n")
time.sleep(600)
"""


@pytest.fixture
def stack(live_stack: LiveStack) -> LiveStack:
    live_stack.start_worker()
    start_agent(live_stack, "node-a")
    return live_stack


def test_success_failure_and_cancel(stack: LiveStack, tmp_path: Path) -> None:
    ok = submit(stack, f"python {write(tmp_path / 'ok.py', JOB_OK)}")
    row = wait_status(stack, ok, {"succeeded", "failed"}, 60)
    assert row["status"] == "succeeded", row
    stack.wait_for(lambda: stack.query("SELECT count(*) FROM runs_logchunk WHERE run_id=? AND text LIKE '%done training%'", (ok,))[0][0],
                   10, "the job's output as log chunks")
    assert stack.query("SELECT count(*) FROM runs_checkpoint WHERE run_id=? AND stored_path != ''", (ok,))[0][0] == 2
    stack.wait_for(lambda: stack.query("SELECT steps_done, total_steps FROM runs_run WHERE id=?", (ok,))[0] == (19, 20), 10,
                   "progress")
    lineage = stack.query("SELECT lineage FROM runs_attempt WHERE run_id=?", (ok,))[0][0]
    assert (json.loads(lineage) if isinstance(lineage, str) else lineage) == {"dataset": "synthetic"}
    # Energy: the final sample at exit makes the attempt's total its last cumulative sample.
    [(attempt_j,)] = stack.query("SELECT energy_j FROM runs_attempt WHERE run_id=?", (ok,))
    last_j = stack.query("SELECT s.energy_j FROM runs_energysample s JOIN runs_attempt a ON s.attempt_id=a.id "
                         "WHERE a.run_id=? ORDER BY s.at DESC LIMIT 1", (ok,))[0][0]
    assert attempt_j == last_j == row["energy_j"] and attempt_j >= 0.5 * (10 if row["energy_estimated"] else 0), row
    audit = {a for (a,) in stack.query("SELECT action FROM audit_auditevent WHERE object_id=? AND object_type='runs.run'", (str(ok),))}
    assert {"run.scheduled", "run.running", "run.succeeded"} <= audit

    bad = submit(stack, f"python {write(tmp_path / 'bad.py', JOB_FAIL)}")
    row = wait_status(stack, bad, {"succeeded", "failed"}, 60)
    assert row["status"] == "failed"
    assert "exit code 3" in row["status_reason"]
    assert "boom: the data loader exploded" in row["status_reason"] and "line 49" in row["status_reason"]

    tree = submit(stack, f"python {write(tmp_path / 'tree.py', JOB_TREE)}", grace=2)
    wait_status(stack, tree, {"running"}, 60)
    pid_file = stack.wait_for(lambda: next((p for p in (stack.workdir / "agent-node-a" / "runs").glob(f"{tree}/*/job/pids")
                                            if len(p.read_text().split()) == 3), None), 20, "the job tree")
    pids = [int(x) for x in pid_file.read_text().split()]
    assert all(alive(p) for p in pids)
    t0 = time.monotonic()
    assert stack.manage("debug_run", "cancel", str(tree)).stdout.strip() == "running"
    row = wait_status(stack, tree, {"cancelled", "failed", "succeeded"}, 2 + 5 + 5)
    assert row["status"] == "cancelled", row
    stack.wait_for(lambda: not any(alive(p) for p in pids), max(0.5, 2 + 5 - (time.monotonic() - t0)), "the whole tree to die")
