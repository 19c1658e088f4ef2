"""Gangs through real agents, web, worker and PyTorch processes (gloo on CPU slots): one process per
device, one outcome per gang, and a rendezvous port that steps aside.

- ddp-train on 2 agents x 2 CPU slots runs ranks 0-3 (world size 4) and ends where a 1-process
  run with the same global batch ends.
- SIGKILL of one rank stops every rank on both nodes; the run is requeued as an infrastructure
  failure and resumes from its checkpoint with every metric step logged exactly once.
- A Python exception in one rank fails the run with its exit code and traceback.
- With the port rank 0 would pick first already taken, the gang still starts.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import time
from pathlib import Path
from typing import Any

import pytest

from apps.runs.services.placement import master_port_for
from tests.agents.helpers import run_row, wait_status
from tests.agents.helpers import submit as submit_raw
from tests.fixtures.live import LiveStack
from tests.runs.live_helpers import agent, recipe_stack, submit, wait_finished

__all__ = ["recipe_stack"]
pytestmark = [pytest.mark.live, pytest.mark.slow, pytest.mark.process]

# dropout 0: the ranks' dropout masks are their own, so only without dropout does the gang match one process.
PARAMS = {"steps": 30, "eval_every": 10, "batch_size": 64, "hidden": 32, "warmup_steps": 2, "dropout": 0.0}
GANG = {"nodes": 2, "devices_per_node": 2}


def _environ(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)


def rank_pids(stack: LiveStack, run_id: int, attempt: int) -> dict[int, int]:
    """Global rank -> pid of this attempt's rank processes (the launchers carry no RANK), on this
    stack's agents only (under xdist another stack may run a gang with the same ids)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        env = _environ(int(entry.name))
        if (env.get("TRAINYARD_RUN_ID") == str(run_id) and env.get("TRAINYARD_ATTEMPT") == str(attempt) and "RANK" in env
                and env.get("TRAINYARD_RUN_DIR", "").startswith(str(stack.workdir))):
            found[int(env["RANK"])] = int(entry.name)
    return found


def final_metrics(stack: LiveStack, run_id: int) -> dict[str, float]:
    """The last step's figures, less the wall-clock ones (throughput), which no two runs share."""
    rows = stack.query("SELECT key, step, value FROM tracking_metricpoint WHERE run_id=? ORDER BY step", (run_id,))
    last = max(step for _, step, _ in rows)
    return {key: value for key, step, value in rows if step == last and "throughput" not in key and "time" not in key}


def attempt_lineage(stack: LiveStack, run_id: int) -> dict[str, Any]:
    value = stack.query("SELECT lineage FROM runs_attempt WHERE run_id=? ORDER BY number DESC LIMIT 1", (run_id,))[0][0]
    return dict(json.loads(value) if isinstance(value, str) else value)


def test_ddp_on_two_nodes_of_two_slots_runs_four_ranks_and_matches_one_process(recipe_stack: LiveStack) -> None:
    stack = recipe_stack
    agent(stack, "node-a", slots=2)
    agent(stack, "node-b", slots=2)
    token = stack.token("alice")
    gang = submit(stack, token, "ddp-train", PARAMS, resources=GANG)
    done = wait_finished(stack, token, gang["id"], timeout=300)
    assert done["status"] == "succeeded", done
    assert attempt_lineage(stack, gang["id"])["world_size"] == 4
    rows = stack.query("SELECT a.node_rank, a.ranks FROM runs_assignment a JOIN runs_attempt t ON t.id = a.attempt_id "
                       "WHERE t.run_id=? ORDER BY a.node_rank", (gang["id"],))
    ranks = {node: sorted(r["rank"] for r in (json.loads(v) if isinstance(v, str) else v)) for node, v in rows}
    assert ranks == {0: [0, 1], 1: [2, 3]}, "two processes per node, ranks 0-3"
    tagged = {r for (r,) in stack.query("SELECT DISTINCT rank FROM runs_logchunk WHERE run_id=?", (gang["id"],))}
    assert tagged == {0, 1, 2, 3}, "every rank's log lines arrive tagged with its rank"
    text = "".join(t for (t,) in stack.query("SELECT text FROM runs_logchunk WHERE run_id=? AND rank=3", (gang["id"],)))
    assert "rank 3]" in text, text[:500]

    single = submit(stack, token, "ddp-train", PARAMS, resources={"nodes": 1, "devices_per_node": 1})
    alone = wait_finished(stack, token, single["id"], timeout=300)
    assert alone["status"] == "succeeded", alone
    assert attempt_lineage(stack, single["id"])["world_size"] == 1
    ours, theirs = final_metrics(stack, gang["id"]), final_metrics(stack, single["id"])
    assert ours.keys() == theirs.keys() and "loss" in ours
    for key in ours:
        assert ours[key] == pytest.approx(theirs[key], rel=1e-3, abs=1e-4), key


def test_sigkill_of_one_rank_stops_the_gang_and_it_resumes_from_its_checkpoint(recipe_stack: LiveStack) -> None:
    stack = recipe_stack
    agent(stack, "node-a", slots=2)
    agent(stack, "node-b", slots=2)
    token = stack.token("alice")
    steps = 4000  # long enough to be killed mid-way on a loaded machine (it finished first at 1,500)
    run = submit(stack, token, "ddp-train", {**PARAMS, "steps": steps, "eval_every": 500}, resources=GANG)
    # Wait for a checkpoint on the server (every 100 steps) and all four ranks up.
    stack.wait_for(lambda: stack.query("SELECT COUNT(*) FROM runs_checkpoint WHERE run_id=? AND stored_path != ''",
                                       (run["id"],))[0][0] > 0, 240, "a stored checkpoint")
    pids = stack.wait_for(lambda: len(p := rank_pids(stack, run["id"], 1)) == 4 and p, 30, "four rank processes")
    os.kill(pids[3], signal.SIGKILL)
    killed_at = time.monotonic()
    stack.wait_for(lambda: not any(Path(f"/proc/{pid}").exists() and _environ(pid) for pid in pids.values()), 40,
                   "every rank of attempt 1 to stop")
    grace = 30
    assert time.monotonic() - killed_at <= grace + 5
    done = wait_finished(stack, token, run["id"], timeout=400)
    assert done["status"] == "succeeded", done
    attempts = stack.query("SELECT number, status, reason, resumed_from_step FROM runs_attempt WHERE run_id=? ORDER BY number",
                           (run["id"],))
    assert [a[1] for a in attempts] == ["failed", "succeeded"], attempts
    assert "rank 3 was killed by signal 9" in attempts[0][2], attempts[0][2]
    assert attempts[1][3] and attempts[1][3] > 0, "the second attempt resumed from a checkpoint"
    assert run_row(stack, run["id"])["restarts"] == 1
    reasons = [json.loads(a) if isinstance(a, str) else a for (a,) in stack.query(
        "SELECT after FROM audit_auditevent WHERE action='run.requeued' AND object_id=?", (str(run["id"]),))]
    assert reasons and "killed by signal 9" in reasons[0]["reason"]
    loss_steps = [s for (s,) in stack.query("SELECT step FROM tracking_metricpoint WHERE run_id=? AND key='loss' ORDER BY step",
                                            (run["id"],))]
    assert loss_steps == list(range(1, steps + 1)), "every step exactly once"


RANK2_RAISES = """import os, sys, time
gate = sys.argv[1]
rank = int(os.environ['RANK'])
print('rank', rank, 'of', os.environ['WORLD_SIZE'], flush=True)
open(os.path.join(gate, str(rank)), 'w').close()
if rank == 2:
    end = time.time() + 90
    while len(os.listdir(gate)) < 4 and time.time() < end:
        time.sleep(0.2)
    time.sleep(2)
    raise ValueError('bad batch on rank 2')
time.sleep(120)
"""


def rank2_raises(tmp_path: Path) -> str:
    """Every rank marks itself in a gate folder; rank 2 raises once all four are up, so the test
    sees the whole gang however slowly the second node starts on a loaded machine. The program
    lives in a file: inline, it and the gate's path twice ran past the 500-character entrypoint
    limit once pytest's temp folder numbers reached three digits."""
    gate = tmp_path / "gate"
    gate.mkdir()
    script = tmp_path / "rank2_raises.py"
    script.write_text(RANK2_RAISES)
    return f"python {script} {gate}"


def test_python_exception_in_one_rank_fails_the_gang_with_its_traceback(recipe_stack: LiveStack, tmp_path: Path) -> None:
    stack = recipe_stack
    agent(stack, "node-a", slots=2)
    agent(stack, "node-b", slots=2)
    run_id = submit_raw(stack, rank2_raises(tmp_path), nodes=2, devices=2, grace=10)
    pids = stack.wait_for(lambda: len(p := rank_pids(stack, run_id, 1)) == 4 and p, 90, "four rank processes")
    row = wait_status(stack, run_id, {"failed", "queued", "succeeded"}, 90)
    assert row["status"] == "failed", row
    assert row["status_reason"].startswith("rank 2 failed with exit code 1"), row["status_reason"]
    assert "Traceback (most recent call last)" in row["status_reason"]
    assert "ValueError: bad batch on rank 2" in row["status_reason"]
    assert row["restarts"] == 0
    stack.wait_for(lambda: not any(_environ(pid) for pid in pids.values()), 10 + 5, "every rank to stop")


def test_gang_starts_when_the_first_port_is_taken(recipe_stack: LiveStack) -> None:
    stack = recipe_stack
    prints = "python -c \"import os; print('port', os.environ['MASTER_PORT'], 'rank', os.environ['RANK'], flush=True)\""
    run_id = submit_raw(stack, prints, nodes=2, devices=1)
    hint = master_port_for(run_id=run_id, number=1)
    with socket.socket() as taken:
        try:
            taken.bind(("", hint))
            taken.listen()
        except OSError as err:  # another process on this machine already holds it: taken all the same
            assert err.errno == errno.EADDRINUSE, err
        agent(stack, "node-a")
        agent(stack, "node-b")
        row = wait_status(stack, run_id, {"succeeded", "failed"}, 90)
    assert row["status"] == "succeeded", row
    port = stack.query("SELECT master_port FROM runs_attempt WHERE run_id=?", (run_id,))[0][0]
    assert port != hint
    text = "".join(t for (t,) in stack.query("SELECT text FROM runs_logchunk WHERE run_id=?", (run_id,)))
    assert text.count(f"port {port} rank") == 2, text
