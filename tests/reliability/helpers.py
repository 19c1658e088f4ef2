"""Shared parts of the fault-injection tests: a stack with short timeouts, a resumable tiny job,
fault tools (a TCP proxy to cut, a private Redis to kill, a database write lock to hold a task
mid-flight) and the invariants every scenario must leave behind."""

from __future__ import annotations

import os
import select
import signal
import socket
import sqlite3
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from cryptography.fernet import Fernet

from tests.fixtures.live import PYTHON, ROOT, LiveStack
from tests.fixtures.services import free_port, redis_server_binary, wait_for_port

# Resumable: restarts from the latest checkpoint, logs each step's metric and one log line, and
# leaves a marker when it completes, so a test can tell which attempt ran to the end.
JOB = """
import os, sys, time, trainyard
steps, delay, every = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
attempt = os.environ["TRAINYARD_ATTEMPT"]
start = 0
ckpt = trainyard.latest_checkpoint()
if ckpt is not None:
    start = ckpt.step + 1
    print(f"resumed from step {ckpt.step}", flush=True)
open(os.path.join(os.environ["TRAINYARD_RUN_DIR"], "pid"), "w").write(str(os.getpid()))
trainyard.set_total_steps(steps)
for step in range(start, steps):
    trainyard.log(step, loss=1.0 / (step + 1))
    print(f"line {step}", flush=True)
    if every and step % every == every - 1:
        with trainyard.checkpoint(step) as path:
            open(path, "wb").write(b"step %d" % step)
    time.sleep(delay)
if len(sys.argv) > 4:
    open(os.path.join(sys.argv[4], f"done-{os.environ['TRAINYARD_RUN_ID']}-a{attempt}"), "w").write(str(os.getpid()))
"""

TERMINAL = {"succeeded", "failed", "cancelled"}
ENDED = ("succeeded", "failed", "cancelled", "preempted", "lost", "aborted")
HOLDING = ("pending", "claimed", "started")


def job_file(directory: Path) -> Path:
    path = directory / "job.py"
    if not path.exists():
        path.write_text(JOB)
    return path


def make_stack(tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch, *, node_timeout: int = 4,
               visibility_timeout: int = 600, database_url: str | None = None) -> LiveStack:
    """A migrated, seeded stack (web not started) whose processes use short timeouts."""
    monkeypatch.setenv("TRAINYARD_NODE_TIMEOUT_S", str(node_timeout))
    if database_url is not None:
        monkeypatch.setenv("DATABASE_URL", database_url)
    stack = LiveStack(tmp_path, redis_url)
    stack.env["TRAINYARD_CELERY_VISIBILITY_TIMEOUT_S"] = str(visibility_timeout)
    stack.env["TRAINYARD_SECRET_KEYS"] = Fernet.generate_key().decode()
    return stack


def submit(stack: LiveStack, job: Path, *, steps: int, delay: float = 0.05, every: int = 10, marker: Path | None = None,
           max_restarts: int = 3, entrypoint: str | None = None) -> int:
    command = entrypoint or f"python {job} {steps} {delay} {every}" + (f" {marker}" if marker else "")
    out = stack.manage("debug_run", "submit", "--entrypoint", command, "--grace", "5", "--max-restarts", str(max_restarts))
    return int(out.stdout.strip().splitlines()[-1])


def status(stack: LiveStack, run_id: int) -> str:
    return str(stack.query("SELECT status FROM runs_run WHERE id=?", (run_id,))[0][0])


def wait_status(stack: LiveStack, run_id: int, wanted: set[str], timeout: float) -> str:
    return str(stack.wait_for(lambda: (s := status(stack, run_id)) in wanted and s, timeout, f"run {run_id} in {sorted(wanted)}"))


def attempts(stack: LiveStack, run_id: int) -> list[tuple[int, str]]:
    return [(int(n), str(s)) for n, s in stack.query("SELECT number, status FROM runs_attempt WHERE run_id=? ORDER BY number",
                                                     (run_id,))]


def attempt_node(stack: LiveStack, run_id: int, number: int) -> str:
    rows = stack.query("SELECT n.hostname FROM runs_assignment a JOIN runs_attempt t ON a.attempt_id=t.id "
                       "JOIN nodes_node n ON a.node_id=n.id WHERE t.run_id=? AND t.number=?", (run_id, number))
    return str(rows[0][0]) if rows else ""


def job_pid(stack: LiveStack, agent: str, run_id: int, number: int) -> int:
    path = stack.workdir / f"agent-{agent}" / "runs" / str(run_id) / f"a{number}-r0" / "job" / "pid"
    stack.wait_for(path.exists, 30, f"the pid file of run {run_id} attempt {number}")
    return int(path.read_text())


def steps_done(stack: LiveStack, run_id: int) -> int:
    return int(stack.query("SELECT steps_done FROM runs_run WHERE id=?", (run_id,))[0][0] or 0)


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


# --- invariants --------------------------------------------------------------------------------

def accrue(stack: LiveStack) -> None:
    """Run the accrual pass now (the beat runs it every 30 s): ended attempts get their close."""
    stack.manage("shell", "-c", "from apps.billing.services import accrual_run; accrual_run()")


def metric_steps(stack: LiveStack, run_id: int, key: str = "loss") -> list[int]:
    return [int(s) for (s,) in stack.query("SELECT step FROM tracking_metricpoint WHERE run_id=? AND key=? ORDER BY step",
                                           (run_id, key))]


def assert_invariants(stack: LiveStack, runs: list[int], *, steps: dict[int, int] | None = None) -> None:
    """What every fault must leave behind for the test's runs (the seeded demo runs are not
    ours): correct states, devices released, each attempt billed exactly once for its own time,
    each metric step exactly once."""
    accrue(stack)
    problems: list[str] = []
    marks = ",".join("?" * len(runs))
    for run_id, run_status, finished_at in stack.query(f"SELECT id, status, finished_at FROM runs_run WHERE id IN ({marks}) "
                                                       "ORDER BY id", tuple(runs)):
        rows = stack.query("SELECT number, status FROM runs_attempt WHERE run_id=? ORDER BY number", (run_id,))
        live = [n for n, s in rows if s not in ENDED]
        if len(live) > 1:
            problems.append(f"run {run_id}: attempts {live} are all live")
        if run_status in TERMINAL:
            if finished_at is None:
                problems.append(f"run {run_id} is {run_status} without finished_at")
            if live:
                problems.append(f"run {run_id} is {run_status} but attempt {live} is live")
        if run_status == "queued" and live:
            problems.append(f"run {run_id} is queued but attempt {live} is live")
        if run_status in ("scheduled", "running") and (not rows or rows[-1][0] not in live):
            problems.append(f"run {run_id} is {run_status} without a live latest attempt")
        if run_status == "succeeded" and rows[-1][1] != "succeeded":
            problems.append(f"run {run_id} succeeded but its last attempt is {rows[-1][1]}")
    held = stack.query("SELECT a.id, t.run_id, t.number, t.status FROM runs_assignment a JOIN runs_attempt t ON a.attempt_id=t.id "
                       "WHERE a.state IN ('pending','claimed','started') AND t.status IN "
                       "('succeeded','failed','cancelled','preempted','lost','aborted')")  # every run: devices are shared
    problems += [f"assignment {a} still holds devices for ended attempt {n} of run {r} ({s})" for a, r, n, s in held]
    problems += _billing_problems(stack, runs)
    for run_id, total in (steps or {}).items():
        got = metric_steps(stack, run_id)
        if got != list(range(total)):
            missing = sorted(set(range(total)) - set(got))[:10]
            problems.append(f"run {run_id}: metric steps {len(got)} rows, missing {missing}, duplicates {len(got) - len(set(got))}")
    assert not problems, "\n".join(problems)


def _seconds(value: Any) -> float:
    if isinstance(value, str):
        from datetime import datetime

        value = datetime.fromisoformat(value)
    return float(value.timestamp())


def _billing_problems(stack: LiveStack, runs: list[int]) -> list[str]:
    problems = []
    marks = ",".join("?" * len(runs))
    for attempt_id, started, ended, number, run_id in stack.query(
            f"SELECT id, started_at, ended_at, number, run_id FROM runs_attempt WHERE run_id IN ({marks}) ORDER BY id", tuple(runs)):
        entries = stack.query("SELECT kind, period_start, period_end, devices, device_seconds FROM billing_usageentry "
                              "WHERE attempt_id=? ORDER BY period_start, id", (attempt_id,))
        closes = [e for e in entries if e[0] == "close"]
        label = f"run {run_id} attempt {number}"
        if started is None:
            if entries:
                problems.append(f"{label} never started but was billed")
            continue
        if ended is not None and len(closes) != 1:
            problems.append(f"{label} ended with {len(closes)} close entries (want exactly 1)")
        if ended is None and closes:
            problems.append(f"{label} is live but closed")
        accruals = [e for e in entries if e[0] == "accrual"]
        for before, after in zip(accruals, accruals[1:], strict=False):
            if _seconds(after[1]) < _seconds(before[2]) - 1e-3:
                problems.append(f"{label}: accrual periods overlap (double charge): {before[1]}..{before[2]} and {after[1]}")
        if ended is not None:
            devices = max((int(e[3]) for e in accruals), default=1) or 1
            charged = sum(Decimal(str(e[4])) for e in entries if e[0] in ("accrual", "correction"))
            expected = Decimal(str(round((_seconds(ended) - _seconds(started)) * devices, 3)))
            if abs(charged - expected) > Decimal("1.0") * devices:
                problems.append(f"{label}: billed {charged} device-seconds for {expected} of use")
    return problems


# --- fault tools -------------------------------------------------------------------------------

class TcpProxy:
    """A loopback TCP proxy the test can cut (close every connection, refuse new ones) and mend:
    a network partition between one agent and the server."""

    def __init__(self, target_port: int) -> None:
        self.target = target_port
        self.port = free_port()
        self.open = threading.Event()
        self.open.set()
        self._stop = threading.Event()
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._thread = threading.Thread(target=self._serve, daemon=True, name="tcp-proxy")
        self._bind()
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _bind(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        listener.settimeout(0.2)
        self._listener = listener

    def _serve(self) -> None:
        while not self._stop.is_set():
            listener = self._listener
            if listener is None or not self.open.is_set():
                time.sleep(0.05)
                continue
            try:
                client, _ = listener.accept()
            except (TimeoutError, OSError):
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target), timeout=5)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._conns += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        try:
            while not self._stop.is_set() and self.open.is_set():
                ready, _, _ = select.select([a, b], [], [], 0.2)
                for src in ready:
                    data = src.recv(65536)
                    if not data:
                        return
                    (b if src is a else a).sendall(data)
        except OSError:
            return
        finally:
            for s in (a, b):
                try:
                    s.close()
                except OSError:
                    pass

    def cut(self) -> None:
        """Drop every connection and stop listening: the agent sees 'connection refused'."""
        self.open.clear()
        with self._lock:
            conns, self._conns = self._conns, []
        for s in conns:
            try:
                s.shutdown(socket.SHUT_RDWR)
                s.close()
            except OSError:
                pass
        if self._listener is not None:
            self._listener.close()
            self._listener = None

    def mend(self) -> None:
        self._bind()
        self.open.set()

    def close(self) -> None:
        self._stop.set()
        self.cut()


class PrivateRedis:
    """A redis-server of our own on a fixed port, to kill -9 and start again (no persistence:
    whatever was queued in it is gone, as after a real crash without AOF)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="ty-redis-rel-")
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen([redis_server_binary(), "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                                      "--appendonly", "no", "--dir", self.dir], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for_port(self.port)

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


@contextmanager
def database_write_lock(stack: LiveStack) -> Iterator[None]:
    """Hold the database so writers block: a task that starts now stops mid-flight, inside its
    transaction, until the lock goes (SQLite: BEGIN IMMEDIATE; PostgreSQL: EXCLUSIVE table locks,
    which still let plain reads through)."""
    if stack.db_url:
        import psycopg

        conn = psycopg.connect(stack.db_url)
        conn.execute("LOCK TABLE runs_run, runs_attempt, billing_usageentry IN EXCLUSIVE MODE")
        try:
            yield
        finally:
            conn.rollback()
            conn.close()
        return
    lite = sqlite3.connect(stack.workdir / "var" / "trainyard.sqlite3", timeout=30, isolation_level=None)
    lite.execute("BEGIN IMMEDIATE")
    try:
        yield
    finally:
        lite.execute("ROLLBACK")
        lite.close()


def worker_pids(stack: LiveStack, name: str = "worker") -> list[int]:
    proc = stack.procs[name]
    pgid = proc.pid
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and _pgid(int(p.name)) == pgid]


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def kill9_group(stack: LiveStack, name: str) -> None:
    """kill -9 a process and all its children (a Celery worker and its pool and beat)."""
    proc = stack.procs.pop(name)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(10)


def celery_call(stack: LiveStack, task: str) -> str:
    """Queue a task by name through the broker (as the beat would); returns its id."""
    out = subprocess.run([PYTHON, "-m", "celery", "-A", "portal", "call", task], cwd=ROOT, env=stack.env, capture_output=True,
                         text=True, check=True)
    return out.stdout.strip().splitlines()[-1]


class PrivatePostgres:
    """A PostgreSQL cluster of our own (initdb + pg_ctl, as bench/_pgcluster.py does; PG_BIN names
    the binaries' directory) that the test
    may stop and start: never the shared server of DATABASE_URL."""

    def __init__(self) -> None:
        self._bin = Path(os.environ.get("PG_BIN", "/usr/lib/postgresql/15/bin"))
        self.workdir = Path(tempfile.mkdtemp(prefix="ty-pg-rel-"))
        self.data = self.workdir / "data"
        self.port = free_port()
        if os.geteuid() == 0:
            import shutil

            shutil.chown(self.workdir, "postgres", "postgres")
        subprocess.run(self._as_owner([str(self._bin / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E",
                                       "UTF8", "--no-sync"]), check=True, capture_output=True)
        self.start()

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    @staticmethod
    def _as_owner(argv: list[str]) -> list[str]:
        # PostgreSQL refuses to run as root (CI runs as root): the cluster belongs to `postgres`.
        return ["runuser", "-u", "postgres", "--", *argv] if os.geteuid() == 0 else argv

    def start(self) -> None:
        opts = (f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={self.workdir} -c fsync=off "
                "-c synchronous_commit=off -c max_connections=100")
        subprocess.run(self._as_owner([str(self._bin / "pg_ctl"), "-D", str(self.data), "-o", opts, "-l", str(self.workdir / "pg.log"),
                                       "-w", "start"]), check=True, capture_output=True)
        wait_for_port(self.port)  # pg_ctl -w waits for "ready" in the pid file; the tests connect over TCP

    def stop(self, mode: str = "fast") -> None:
        subprocess.run(self._as_owner([str(self._bin / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop"]), check=True,
                       capture_output=True)

    def close(self) -> None:
        subprocess.run(self._as_owner([str(self._bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop"]),
                       capture_output=True)
        import shutil

        shutil.rmtree(self.workdir, ignore_errors=True)
