"""What one idle agent costs the web, in-process: CPU µs and SQL statements per heartbeat and per
claim round trip (wait_s 0: authentication and the pending check, as a claim does before it waits
on Redis), through the web's WSGI application as gunicorn calls it (portal.wsgi: the agent fast
path in front of Django's handler, with its per-request connection checkout) on PostgreSQL.

    python bench/heartbeat_cost.py [--agents 50] [--repeat 400] [--profile heartbeat|claim]

A private PostgreSQL cluster (or DATABASE_URL's server) gets a fresh database, migrated and set up
like bench/load.py --idle-agents (_setup_idle.py). The agents are visited round-robin, so every
request authenticates a node other than the previous one (as 1,000 agents do); the per-process
credential cache (apps.nodes.auth) is then warm for all of them, as it is in a web process under
load. The first round (cold cache) is reported apart; the claims run after the heartbeats, so
theirs is warm too. CPU time is this process's (Django +
psycopg), not the database server's. Writes bench/results/heartbeat_cost.json.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import json
import os
import pstats
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

from _pgcluster import create_database, postgres_server  # noqa: E402
from _results import write_result  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--agents", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=400, help="requests measured per kind")
    parser.add_argument("--profile", default="", help="cProfile this kind (heartbeat, claim) and print its top")
    args = parser.parse_args()
    with postgres_server() as server:
        db = create_database(server, "ty_bench_heartbeat")
        env = {**os.environ, "DATABASE_URL": db, "DJANGO_SETTINGS_MODULE": "portal.settings.base", "TRAINYARD_DEBUG": "false",
               "TRAINYARD_LOG_LEVEL": "WARNING", "BENCH_AGENTS": str(args.agents)}
        py = sys.executable
        subprocess.run([py, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
        out = subprocess.run([py, "manage.py", "shell", "-c", (HERE / "_setup_idle.py").read_text()], cwd=ROOT, env=env,
                             check=True, capture_output=True, text=True)
        setup = json.loads(out.stdout.strip().splitlines()[-1])
        os.environ.update({k: v for k, v in env.items() if k != "BENCH_AGENTS"})
        figures = measure(args, setup["agents"])
    if args.profile:
        print("not written to bench/results: the profiler inflates the CPU times")
        return 0
    path = write_result("heartbeat_cost", figures)
    print(f"wrote {path}")
    return 0


def measure(args: argparse.Namespace, agents: list[dict[str, Any]]) -> dict[str, Any]:
    import django

    django.setup()
    from django.core.handlers.wsgi import WSGIHandler
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from apps.fleet.fastpath import AgentFastPath

    app = AgentFastPath(WSGIHandler())  # what portal.wsgi serves, without its pulse thread

    def post(path: str, body: dict[str, Any], agent: dict[str, Any]) -> int:
        data = json.dumps(body).encode()
        environ = {"REQUEST_METHOD": "POST", "PATH_INFO": path, "QUERY_STRING": "", "SCRIPT_NAME": "",
                   "SERVER_NAME": "127.0.0.1", "SERVER_PORT": "80", "HTTP_HOST": "127.0.0.1", "SERVER_PROTOCOL": "HTTP/1.1",
                   "wsgi.url_scheme": "http", "wsgi.input": io.BytesIO(data), "wsgi.errors": sys.stderr,
                   "CONTENT_TYPE": "application/json", "CONTENT_LENGTH": str(len(data)),
                   "HTTP_AUTHORIZATION": f"Node {agent['secret']}"}
        status: list[str] = []
        result = app(environ, lambda line, headers: status.append(line))
        b"".join(result)
        getattr(result, "close", lambda: None)()  # as the server does: Django's request_finished
        return int(status[0].split()[0])

    def heartbeat(agent: dict[str, Any]) -> Any:
        # What bench/_idle_agents.py sends: an idle node, one device, nothing running.
        beat = {"session": agent["session"], "running": [], "devices": [{"index": 0, "utilization": 0.0, "power_w": 0.0}]}
        return post("/api/v1/agent/heartbeat/", beat, agent)

    def claim(agent: dict[str, Any]) -> Any:
        return post("/api/v1/agent/claim/", {"session": agent["session"], "wait_s": 0, "free_devices": [0]}, agent)

    kinds = {"heartbeat": heartbeat, "claim": claim}
    figures: dict[str, Any] = {"config": {"agents": args.agents, "repeat": args.repeat}, "kinds": {}}
    print(f"\n{'kind':<10} {'sql':>5} {'cpu µs':>8} {'p90 µs':>8} {'cold sql':>9} {'cold µs':>8}"
          f"   (median over {args.repeat} requests, round-robin over {len(agents)} agents; cold: first round)")
    for name, fn in kinds.items():
        rows = []
        profiler = cProfile.Profile(time.process_time) if name == args.profile else None  # CPU, not wall
        total = len(agents) + args.repeat
        for i in range(total):
            agent = agents[i % len(agents)]
            with CaptureQueriesContext(connection) as ctx:
                if profiler and i >= len(agents):
                    profiler.enable()
                c0 = time.process_time()
                response = fn(agent)
                cpu = time.process_time() - c0
                if profiler:
                    profiler.disable()
            if response != 200:
                raise SystemExit(f"{name}: HTTP {response}")
            rows.append((cpu, len(ctx.captured_queries)))
        cold, warm = rows[:len(agents)], rows[len(agents):]
        cpus = sorted(c for c, _ in warm)
        row = {"sql": statistics.median(q for _, q in warm), "sql_max": max(q for _, q in warm),
               "cpu_us": round(statistics.median(cpus) * 1e6), "cpu_p90_us": round(cpus[int(0.9 * (len(cpus) - 1))] * 1e6),
               "cold_sql": statistics.median(q for _, q in cold), "cold_cpu_us": round(statistics.median(c for c, _ in cold) * 1e6)}
        figures["kinds"][name] = row
        print(f"{name:<10} {row['sql']:>5} {row['cpu_us']:>8} {row['cpu_p90_us']:>8} {row['cold_sql']:>9} {row['cold_cpu_us']:>8}")
        if profiler:
            text = io.StringIO()
            pstats.Stats(profiler, stream=text).sort_stats(os.environ.get("PROFILE_SORT", "cumulative")).print_stats(40)
            with contextlib.suppress(BrokenPipeError):
                print(text.getvalue())
    return figures


if __name__ == "__main__":
    raise SystemExit(main())
