"""Per-request cost of what bench/load.py does, without the load: SQL queries and CPU ms per
request for each endpoint class, through Django's test client on PostgreSQL.

    DATABASE_URL=postgres://postgres@127.0.0.1:55432/postgres python bench/_profile_requests.py \
        [--agents 200] [--users 5] [--batches 30] [--repeat 20] [--profile page_run]

A fresh database (ty_bench_profile) is created on the server DATABASE_URL points at (or on a
private cluster, see _pgcluster.py), migrated, seeded like load.py's, and each agent's run gets
--batches metric batches first so pages see the data a few minutes of load leave behind.
--profile CLASS prints the top of a cProfile of that class. Wall time is printed too, but on a
shared machine CPU time (this process: Django + psycopg) and the query count are what to compare.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import json
import os
import pstats
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

from _pgcluster import create_database, postgres_server  # noqa: E402

KEYS = ("loss", "accuracy", "lr", "grad_norm")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--agents", type=int, default=200)
    parser.add_argument("--users", type=int, default=5)
    parser.add_argument("--batches", type=int, default=30, help="metric batches per run sent before measuring")
    parser.add_argument("--points", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=20, help="requests measured per class")
    parser.add_argument("--profile", default="", help="endpoint class to cProfile (heartbeat, metrics, page_run, ...)")
    parser.add_argument("--reuse", action="store_true", help="measure again on the database the last run left (no set-up)")
    parser.add_argument("--out", default=str(HERE / "results" / "profile_requests.json"))
    args = parser.parse_args()
    saved = Path(tempfile.gettempdir()) / "ty_bench_profile_setup.json"  # node credentials: not under bench/results

    with postgres_server() as server:
        db = (server.rsplit("/", 1)[0] + "/ty_bench_profile") if args.reuse else create_database(server, "ty_bench_profile")
        env = {**os.environ, "DATABASE_URL": db, "DJANGO_SETTINGS_MODULE": "portal.settings.base", "TRAINYARD_DEBUG": "false",
               "TRAINYARD_LOG_LEVEL": "WARNING", "BENCH_AGENTS": str(args.agents), "BENCH_USERS": str(args.users)}
        py = sys.executable
        if args.reuse:
            setup = json.loads(saved.read_text())
            args.batches = 0
        else:
            subprocess.run([py, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
            subprocess.run([py, "manage.py", "seed_demo"], cwd=ROOT, env=env, check=True, capture_output=True)
            out = subprocess.run([py, "manage.py", "shell", "-c", (HERE / "_setup_load.py").read_text()], cwd=ROOT, env=env,
                                 check=True, capture_output=True, text=True)
            setup = json.loads(out.stdout.strip().splitlines()[-1])
            saved.parent.mkdir(parents=True, exist_ok=True)
            saved.write_text(json.dumps(setup))
        os.environ.update({k: v for k, v in env.items() if k not in ("BENCH_AGENTS", "BENCH_USERS")})
        result = measure(args, setup)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


def measure(args: argparse.Namespace, setup: dict[str, Any]) -> dict[str, Any]:
    import django

    django.setup()
    from django.db import connection
    from django.db.models import Max
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    agents = setup["agents"]
    from apps.tracking.models import MetricPoint

    # Continue each run's steps where the pre-load (or a previous --reuse run) left them.
    last = {a["attempt"]: 0 for a in agents}
    for run_id, step in MetricPoint.objects.values_list("run_id").annotate(s=Max("step")).values_list("run_id", "s"):
        last.update({a["attempt"]: step + 1 for a in agents if a["run"] == run_id})
    steps = last
    per_key = max(1, args.points // len(KEYS))
    # One client: each Client builds its own handler, which loads the middleware again (WhiteNoise
    # scanning the static files), a cost gunicorn pays once per worker, not per request.
    agent_client = Client()

    def heartbeat(agent: dict[str, Any]) -> Any:
        beat = {"session": agent["session"], "running": [{"attempt_id": agent["attempt"], "number": 1}],
                "devices": [{"index": 0, "utilization": 0.9, "power_w": 40.0}]}
        return agent_client.post("/api/v1/agent/heartbeat/", json.dumps(beat), content_type="application/json",
                                 headers={"Authorization": f"Node {agent['secret']}"})

    def metrics(agent: dict[str, Any]) -> Any:
        step = steps[agent["attempt"]]
        now = time.time()
        points = [[key, step + i, random.random(), now] for i in range(per_key) for key in KEYS]
        steps[agent["attempt"]] = step + per_key
        batch = {"attempt_id": agent["attempt"], "attempt": 1, "points": points}
        return agent_client.post("/api/v1/agent/metrics/", json.dumps(batch), content_type="application/json",
                                 headers={"Authorization": f"Node {agent['secret']}"})

    print(f"pre-loading {args.batches} batches x {len(agents)} runs ...", flush=True)
    for _ in range(args.batches):
        for agent in agents:
            if metrics(agent).status_code != 200:
                raise SystemExit("pre-load batch refused")

    user = Client()
    user.cookies["sessionid"] = setup["users"][0]["session"]
    runs = [a["run"] for a in agents]
    pages = {"page_run": "/runs/{run}/", "page_runs": "/runs/", "queue": "/queue/",
             "api_metrics": "/api/v1/runs/{run}/metrics/?key=loss&max_points=500"}

    def page(template: str) -> Any:
        return lambda _agent: user.get(template.format(run=random.choice(runs)))

    def backend_cpu() -> float:
        """CPU seconds of this connection's PostgreSQL backend (same machine: /proc)."""
        import psutil

        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            pid = cursor.fetchone()[0]
        try:
            t = psutil.Process(pid).cpu_times()
        except (psutil.Error, OSError):
            return float("nan")
        return float(t.user + t.system)

    classes = {"heartbeat": heartbeat, "metrics": metrics, **{k: page(v) for k, v in pages.items()}}
    result: dict[str, Any] = {}
    print(f"\n{'class':<12} {'queries':>8} {'cpu ms':>8} {'min':>6} {'db ms':>6} {'wall ms':>8}  (median of {args.repeat}; min cpu;"
          " database backend CPU per request; max queries)")
    for name, fn in classes.items():
        fn(random.choice(agents))  # warm: imports, template compilation, connection
        cpu, wall, queries = [], [], []
        profiler = cProfile.Profile() if name == args.profile else None
        db0 = backend_cpu()
        for _ in range(args.repeat):
            agent = random.choice(agents)
            with CaptureQueriesContext(connection) as ctx:
                c0, w0 = time.process_time(), time.perf_counter()
                if profiler:
                    profiler.enable()
                response = fn(agent)
                if profiler:
                    profiler.disable()
                cpu.append(time.process_time() - c0)
                wall.append(time.perf_counter() - w0)
            if response.status_code != 200:
                raise SystemExit(f"{name}: HTTP {response.status_code} {response.content[:300]!r}")
            queries.append(len(ctx.captured_queries))
        db_ms = (backend_cpu() - db0) / args.repeat * 1000
        row = {"queries": statistics.median(queries), "queries_max": max(queries),
               "cpu_ms": round(statistics.median(cpu) * 1000, 1), "cpu_min_ms": round(min(cpu) * 1000, 1),
               "db_cpu_ms": round(db_ms, 1), "wall_ms": round(statistics.median(wall) * 1000, 1)}
        result[name] = row
        print(f"{name:<12} {row['queries']:>8} {row['cpu_ms']:>8} {row['cpu_min_ms']:>6} {row['db_cpu_ms']:>6} {row['wall_ms']:>8}"
              f"  (max {row['queries_max']})")
        if profiler:
            text = io.StringIO()
            pstats.Stats(profiler, stream=text).sort_stats(os.environ.get("PROFILE_SORT", "cumulative")).print_stats(45)
            profile_dump = text.getvalue()
        if name == args.profile and profiler:
            with contextlib.suppress(BrokenPipeError):
                print(profile_dump)
        if os.environ.get("PROFILE_SQL"):  # the last request's queries, with their server times
            for q in ctx.captured_queries:
                print("   ", q["time"], q["sql"][:int(os.environ["PROFILE_SQL"])])
    return {"config": {k: v for k, v in vars(args).items() if k != "out"}, "classes": result}


if __name__ == "__main__":
    raise SystemExit(main())
