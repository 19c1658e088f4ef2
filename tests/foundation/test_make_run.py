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


    def pid(self, name: str) -> int:
        """The pid the launcher last (re)started `name` with ("  started web  pid 123 ...")."""
        started = [words for words in map(str.split, self.lines) if words[:2] in (["started", name], ["restarted", name])]
        assert started, f"{name} was never started:\n{''.join(self.lines)}"
        words = started[-1]
        return int(words[words.index("pid") + 1])


def _launch(var: Path, port: int, **settings: str) -> tuple[subprocess.Popen[str], _Output]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE")}
    env.update(TRAINYARD_VAR_DIR=str(var), TRAINYARD_PORT=str(port), TRAINYARD_REDIS_PORT=str(free_port()), **settings)
    launcher = subprocess.Popen([sys.executable, "-m", "portal.launch"], cwd=ROOT, env=env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    return launcher, _Output(launcher)


def _wait_until(what: str, check: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what}: not within {timeout:.0f}s"
        time.sleep(0.5)


def test_ctrl_c_checkpoints_and_requeues_a_running_job(tmp_path: Path) -> None:
    var = tmp_path / "var"
    port = free_port()
    launcher, out = _launch(var, port)
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


def _kill_and_see_it_back(out: _Output, name: str, says: str) -> int:
    """kill -9 one component; the launcher must say so and start a new one. Returns the new pid."""
    old = out.pid(name)
    os.kill(old, signal.SIGKILL)
    out.wait_for(f"{name} exited with code -9 (SIGKILL); restarting it in 1 s (restart 1){says}", 15)
    out.wait_for(f"restarted {name} (restart 1) pid", 30)
    new = out.pid(name)
    assert new != old and Path(f"/proc/{new}").exists(), f"{name} did not come back"
    return new


@pytest.mark.process
def test_a_crashed_component_is_restarted_and_the_stack_keeps_working(tmp_path: Path) -> None:
    """kill -9 the agent (while it trains a run), the worker and Redis: each comes back, the web
    answers throughout, the run resumes from its checkpoint, a new run succeeds; Ctrl-C still
    stops everything."""
    var = tmp_path / "var"
    port = free_port()
    # A run requeued after its node failed waits out a backoff (30 s by default) before it resumes.
    launcher, out = _launch(var, port, TRAINYARD_RETRY_BACKOFF_S="1")
    try:
        out.wait_for("Trainyard is up", 240)
        client = Client.login(f"http://127.0.0.1:{port}", "alice", "trainyard-demo")
        tags = {"task": "digits", "dataset": "sklearn-digits", "candidate": "baseline", "family": "make-run-restart"}
        long_run = client.submit(project="vision/digits", template="digits-classifier", params={"steps": 100_000},
                                 name="its agent is killed", tags=tags)["id"]
        _wait_until("the long run trains and checkpoints",
                    lambda: client.run(long_run)["status"] == "running" and bool(client.checkpoints(long_run)), 180)

        # The new agent kills the orphaned job and registers without it: the run is requeued and
        # resumes from its checkpoint on the same (only) node.
        _kill_and_see_it_back(out, "agent", "; its 1 running job(s) are stopped and go back in the queue")
        _wait_until("the long run resumes after the agent's restart",
                    lambda: [a["status"] for a in client.run(long_run)["attempts"]][-1:] == ["running"]
                    and len(client.run(long_run)["attempts"]) == 2, 90)
        client.cancel(long_run)
        _wait_until("the long run is cancelled", lambda: client.run(long_run)["status"] == "cancelled", 60)

        _kill_and_see_it_back(out, "worker", "")
        assert client.run(long_run)["status"] == "cancelled"  # the web still answers
        _kill_and_see_it_back(out, "redis", f"; its data in {var / 'redis'} is kept")
        assert client.run(long_run)["status"] == "cancelled"

        short_run = client.submit(project="vision/digits", template="digits-classifier", params={"steps": 30},
                                  name="after the restarts", tags=tags)["id"]
        _wait_until("a run submitted after the restarts succeeds", lambda: client.run(short_run)["status"] == "succeeded", 120)

        launcher.send_signal(signal.SIGINT)
        launcher.wait(timeout=120)
        mine = f"TRAINYARD_VAR_DIR={var}".encode()
        left = _pids(lambda proc: mine in (proc / "environ").read_bytes().split(b"\0"))
    finally:
        _stop_everything(launcher, var)
    text = "".join(out.lines)
    assert launcher.returncode == 0, text
    assert "keeps crashing" not in text and "stopping (see" not in text, text
    assert [line.split()[1] for line in out.lines if line.startswith("  stopped ")] == ["agent", "beat", "worker", "web", "redis"]
    assert not left, f"Ctrl-C left processes behind: {left}"

    db = sqlite3.connect(var / "trainyard.sqlite3")
    attempts = db.execute("SELECT status, resumed_from_step FROM runs_attempt WHERE run_id = ? ORDER BY number", (long_run,)).fetchall()
    assert [a[0] for a in attempts] == ["lost", "cancelled"], attempts
    assert attempts[1][1], f"the second attempt did not resume from a checkpoint: {attempts}"
