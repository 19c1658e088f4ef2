"""Helpers for agent tests: start agents against a live stack, submit raw-entrypoint runs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

from tests.fixtures.live import PYTHON, LiveStack


def join_token(stack: LiveStack, pool: str = "local") -> str:
    return stack.manage("agent_join_token", "--pool", pool).stdout.strip()


def start_agent(stack: LiveStack, name: str, *, token: str | None = None, extra: list[str] | None = None,
                env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    workdir = stack.workdir / f"agent-{name}"
    argv = [PYTHON, "-m", "agents", "--server", stack.url, "--join-token", token or join_token(stack), "--pool", "local",
            "--workdir", str(workdir), "--name", name, "--heartbeat", "1", "--claim-wait", "5", "--drain-timeout", "1",
            "--energy-interval", "1", *(extra or [])]
    # Jobs run as this user unless a test asks for isolation (the suite's conftest says the same;
    # benches that borrow this helper run outside it).
    proc = stack.spawn(name, argv, env={"TRAINYARD_AGENT_NO_GPU": "1", "TRAINYARD_AGENT_ISOLATION": "none",
                                        "TRAINYARD_AGENT_SINGLE_TENANT": "1", **(env or {})})
    # Teardown stops processes in this order: agents first, so they drain against a live server
    # instead of waiting out their flush timeout against a stopped one.
    stack.procs = {name: stack.procs.pop(name), **stack.procs}
    return proc


def submit(stack: LiveStack, entrypoint: str, *, nodes: int = 1, grace: int = 30, every_steps: int = 0, keep: int = 0,
           params: str = "{}", devices: int = 1) -> int:
    out = stack.manage("debug_run", "submit", "--entrypoint", entrypoint, "--nodes", str(nodes), "--grace", str(grace),
                       "--devices-per-node", str(devices),
                       "--checkpoint-every-steps", str(every_steps), "--checkpoint-keep", str(keep), "--params", params)
    return int(out.stdout.strip().splitlines()[-1])


def run_row(stack: LiveStack, run_id: int) -> dict[str, Any]:
    rows = stack.query("SELECT status, status_reason, steps_done, total_steps, energy_j, energy_estimated, restarts "
                       "FROM runs_run WHERE id=?", (run_id,))
    keys = ["status", "status_reason", "steps_done", "total_steps", "energy_j", "energy_estimated", "restarts"]
    return dict(zip(keys, rows[0], strict=True))


def assert_resumes_after_preemption(stack: LiveStack, run_id: int, timeout: float) -> None:
    """A preempted run finishes: it succeeds on its second attempt, which resumed from a
    checkpoint, and the preemption did not count as a failure."""
    final = stack.wait_for(lambda: (r := run_row(stack, run_id))["status"] in {"succeeded", "failed"} and r, timeout,
                           "the preempted run to finish")
    assert final["status"] == "succeeded", final
    attempts = stack.query("SELECT number, status, resumed_from_step FROM runs_attempt WHERE run_id=? ORDER BY number", (run_id,))
    assert [a[1] for a in attempts] == ["preempted", "succeeded"], attempts
    assert attempts[1][2] and attempts[1][2] > 0, "the second attempt resumed from a checkpoint"
    assert final["restarts"] == 0, "a preemption is not a failure"


def wait_status(stack: LiveStack, run_id: int, statuses: set[str], timeout: float) -> dict[str, Any]:
    return stack.wait_for(lambda: (r := run_row(stack, run_id))["status"] in statuses and r, timeout,
                          f"run {run_id} to become one of {sorted(statuses)}")


def requeue_reasons(stack: LiveStack, run: int) -> list[str]:
    """Why the run went back to the queue, from the audit (its status_reason soon says why it waits)."""
    rows = stack.query("SELECT after FROM audit_auditevent WHERE object_type='runs.run' AND object_id=? AND action='run.requeued' "
                       "ORDER BY id", (str(run),))
    return [(json.loads(a) if isinstance(a, str) else a)["reason"] for (a,) in rows]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def kill9(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path

