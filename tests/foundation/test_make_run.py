"""`make run` itself (portal.launch): up on the embedded defaults, and Ctrl-C while a run trains.

Ctrl-C must leave no training process behind: the agent drains, the job checkpoints on SIGTERM
and goes back in the queue to resume on the next start. Before, the launcher gave the agent 20 s
while the agent gave its jobs 60 s, so the launcher killed the agent and the job ran on, orphaned,
until the next start killed it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from trainyard import Client

from portal.launch import ROOT
from tests.fixtures.services import free_port

pytestmark = pytest.mark.live


def _pids(keep: Callable[[Path], bool]) -> list[int]:
    """Processes whose /proc entry passes `keep`; those that vanish or refuse a read are skipped."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and keep(proc):
                found.append(int(proc.name))
        except OSError:
            continue
    return found


def _job_processes(var: Path) -> list[int]:
    """Training processes started by this launcher's agent (their cwd is under its var dir)."""
    return _pids(lambda proc: b"recipes." in (proc / "cmdline").read_bytes() and os.readlink(proc / "cwd").startswith(str(var)))


def _stop_everything(launcher: subprocess.Popen[str], var: Path) -> None:
    """After a failure too: the launcher stops its services (each in a session of its own, so
    killing the launcher alone would orphan them); whatever outlives it is killed by its env."""
    if launcher.poll() is None:
        launcher.send_signal(signal.SIGTERM)
        try:
            launcher.wait(timeout=120)
        except subprocess.TimeoutExpired:
            launcher.kill()
            launcher.wait(5)
    mine = f"TRAINYARD_VAR_DIR={var}".encode()
    for pid in _pids(lambda proc: mine in (proc / "environ").read_bytes().split(b"\0")):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


class _Output:
    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        assert proc.stdout is not None
        stream = proc.stdout
        threading.Thread(target=lambda: self.lines.extend(iter(stream.readline, "")), daemon=True).start()

    def wait_for(self, text: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not any(text in line for line in self.lines):
            assert time.monotonic() < deadline, f"no {text!r} within {timeout:.0f}s:\n{''.join(self.lines)}"
            time.sleep(0.2)


def test_ctrl_c_checkpoints_and_requeues_a_running_job(tmp_path: Path) -> None:
    var = tmp_path / "var"
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE")}
    env.update(TRAINYARD_VAR_DIR=str(var), TRAINYARD_PORT=str(port), TRAINYARD_REDIS_PORT=str(free_port()))
    launcher = subprocess.Popen([sys.executable, "-m", "portal.launch"], cwd=ROOT, env=env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    out = _Output(launcher)
    try:
        out.wait_for("Trainyard is up", 240)
        client = Client.login(f"http://127.0.0.1:{port}", "alice", "trainyard-demo")
        run = client.submit(project="vision/digits", template="digits-classifier", params={"steps": 100_000},
                            name="stopped by ctrl-c", tags={"task": "digits", "dataset": "sklearn-digits",
                                                            "candidate": "baseline", "family": "make-run-stop"})
        deadline = time.monotonic() + 180
        while not (client.run(run["id"])["status"] == "running" and client.checkpoints(run["id"])):
            assert time.monotonic() < deadline, f"run never got going: {client.run(run['id'])}"
            time.sleep(0.5)
        assert _job_processes(var), "the training process should be running now"

        stop_asked = time.monotonic()
        launcher.send_signal(signal.SIGINT)
        launcher.wait(timeout=120)
        took = time.monotonic() - stop_asked
    finally:
        _stop_everything(launcher, var)
    text = "".join(out.lines)
    assert launcher.returncode == 0, text
    assert [line.split()[1] for line in out.lines if line.startswith("  stopped ")] == ["agent", "beat", "worker", "web", "redis"]
    assert took < 60, f"stopping took {took:.0f}s:\n{text}"
    assert "agent: running jobs get" in text, "a job was running: the launcher should say what the drain does"
    assert not _job_processes(var), "Ctrl-C left a training process running"
    assert not list((var / "agent").rglob("jobs/*.json")), "the agent left a job record: it did not see its job end"

    db = sqlite3.connect(var / "trainyard.sqlite3")
    status, reason = db.execute("SELECT status, reason_code FROM runs_run WHERE id = ?", (run["id"],)).fetchone()
    attempts: list[Any] = db.execute("SELECT status FROM runs_attempt WHERE run_id = ? ORDER BY number", (run["id"],)).fetchall()
    checkpoints = db.execute("SELECT COUNT(*) FROM runs_checkpoint WHERE run_id = ?", (run["id"],)).fetchone()[0]
    # Back in the queue with its checkpoints, to resume on the next start; its attempt was preempted
    # by the drain, not lost.
    assert status == "queued", (status, reason, attempts)
    assert [a[0] for a in attempts] == ["preempted"] and checkpoints >= 1
