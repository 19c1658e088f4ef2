"""Pages and API lists of a team with real amounts of data: wall time and SQL queries per request.

    python bench/scale_pages.py [--scale 1] [--repeat 3] [--postgres] [--only TEXT] [--out FILE]

Builds a fresh database (SQLite in a temp dir; with --postgres, a private PostgreSQL cluster or
the server DATABASE_URL names), migrates it, runs `seed_demo --history`, then bench/_setup_scale.py
(at --scale 1: 5,000 runs, 3 runs of 200,000 metric points, 500 checkpoints on one run, 50,000
ledger entries, 2,000 audit events, 100 nodes). Then, through Django's test client as alice
(engineer), carol (finance) and admin, each page or endpoint once to warm up and --repeat times
measured: the median wall time and the number of queries of the last.

What to look for: a query count that differs between --scale 0.02 and --scale 1 (a query per
row), and pages over ~300 ms. The machine may be shared: compare counts, and times only taken
together. Writes bench/results/scale_pages.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

from _pgcluster import create_database, postgres_server  # noqa: E402
from _results import write_result  # noqa: E402


def cases(setup: dict[str, Any], project: int) -> list[tuple[str, str, str]]:
    run, compare = setup["checkpoint_run"], ",".join(map(str, setup["compare"]))
    return [
        ("alice", "projects (home)", "/projects/"),
        ("alice", "runs list", "/runs/"),
        ("alice", "runs list, sorted by a metric", "/runs/?sort=-metric:loss"),
        ("alice", "runs list, metric sort + column", "/runs/?sort=metric:val_accuracy&cols=loss"),
        ("alice", "runs list, search", "/runs/?q=lr%3D0.1"),
        ("alice", "runs list, page 50", "/runs/?page=50"),
        ("alice", "run page", f"/runs/{run}/"),
        ("alice", "run page, all 500 checkpoints", f"/runs/{run}/?partial=checkpoints&deleted=1"),
        ("alice", "compare 10 runs", f"/compare/?runs={compare}"),
        ("alice", "new run form", "/runs/new/"),
        ("alice", "queue", "/queue/"),
        ("alice", "nodes", "/nodes/"),
        ("alice", "budgets", "/budgets/"),
        ("alice", "project page", f"/projects/{project}/"),
        ("carol", "finance", "/finance/"),
        ("carol", "finance, all periods", "/finance/?period=all"),
        ("carol", "finance ledger.csv", "/finance/ledger.csv"),
        ("admin", "audit", "/audit/"),
        ("alice", "API runs", "/api/v1/runs/"),
        ("alice", "API run", f"/api/v1/runs/{run}/"),
        ("alice", "API metrics, 500 of 200k points", f"/api/v1/runs/{run}/metrics/?key=loss&max_points=500"),
        ("alice", "API checkpoints", f"/api/v1/runs/{run}/checkpoints/"),
        ("alice", "API compare 10 runs", f"/api/v1/compare/?runs={compare}&max_points=500"),
        ("alice", "API queue", "/api/v1/queue/"),
        ("alice", "API nodes", "/api/v1/nodes/"),
        ("alice", "API project budget", f"/api/v1/projects/{project}/budget/"),
        ("admin", "API audit", "/api/v1/audit/"),
        ("carol", "API finance spend", "/api/v1/finance/spend/"),
        ("carol", "API finance spend, all, by project", "/api/v1/finance/spend/?period=all&group_by=project"),
        ("carol", "API finance ledger.csv", "/api/v1/finance/ledger.csv"),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", type=float, default=1.0, help="1 = 5,000 runs, 50,000 ledger entries, ...")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--postgres", action="store_true", help="PostgreSQL instead of SQLite")
    parser.add_argument("--only", default="", help="measure only cases whose user, label or URL contains this")
    parser.add_argument("--out", default=str(HERE / "results" / "scale_pages.json"))
    args = parser.parse_args()

    with ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="ty-scale-")))
        if args.postgres:
            db = create_database(stack.enter_context(postgres_server()), "ty_bench_scale")
        else:
            db = f"sqlite:///{workdir / 'db.sqlite3'}"
        env = {**os.environ, "DATABASE_URL": db, "DJANGO_SETTINGS_MODULE": "portal.settings.base", "TRAINYARD_DEBUG": "false",
               "TRAINYARD_VAR_DIR": str(workdir / "var"), "TRAINYARD_LOG_LEVEL": "ERROR", "BENCH_SCALE": str(args.scale)}
        py = sys.executable
        started = time.perf_counter()
        subprocess.run([py, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
        subprocess.run([py, "manage.py", "seed_demo", "--history"], cwd=ROOT, env=env, check=True, capture_output=True)
        out = subprocess.run([py, "manage.py", "shell", "-c", (HERE / "_setup_scale.py").read_text()], cwd=ROOT, env=env,
                             check=True, capture_output=True, text=True)
        setup = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"data set built in {time.perf_counter() - started:.0f} s ({'PostgreSQL' if args.postgres else 'SQLite'}, "
              f"scale {args.scale})", flush=True)
        os.environ.update({k: v for k, v in env.items() if k != "BENCH_SCALE"})
        rows = measure(setup, args)
    result = {"scale": args.scale, "database": "postgresql" if args.postgres else "sqlite", "repeat": args.repeat, "pages": rows}
    write_result("scale_pages", result, path=Path(args.out))
    print(f"wrote {args.out}")
    return 0 if all(r["status"] < 400 for r in rows) else 1


def measure(setup: dict[str, Any], args: argparse.Namespace) -> list[dict[str, Any]]:
    import django

    django.setup()
    from django.contrib.auth.models import User
    from django.db import connection
    from django.test import Client

    from apps.tenants.models import Project

    clients = {}
    for name in ("alice", "carol", "admin"):
        clients[name] = Client()
        clients[name].force_login(User.objects.get(username=name))
    project = Project.objects.get(slug="digits").pk

    def get(client: Client, url: str) -> tuple[int, int]:
        response = client.get(url)
        body = b"".join(response.streaming_content) if getattr(response, "streaming", False) else response.content
        return response.status_code, len(body)

    rows = []
    print(f"{'user':6} {'page':38} {'status':>6} {'ms':>7} {'queries':>7} {'KiB':>6}")
    for user, label, url in cases(setup, project):
        if args.only and not any(args.only in text for text in (user, label, url)):
            continue
        client = clients[user]
        get(client, url)
        times, queries = [], 0
        for _ in range(args.repeat):
            # Counted as they run: a query per ledger entry would overflow CaptureQueriesContext's 9,000.
            count = [0]

            def counted(execute: Any, sql: str, params: Any, many: bool, context: Any, count: list[int] = count) -> Any:
                count[0] += 1
                return execute(sql, params, many, context)

            with connection.execute_wrapper(counted):
                t = time.perf_counter()
                status, size = get(client, url)
                times.append((time.perf_counter() - t) * 1000)
            queries = count[0]
        ms = round(statistics.median(times))
        rows.append({"user": user, "page": label, "url": url, "status": status, "ms": ms, "queries": queries, "bytes": size})
        print(f"{user:6} {label:38} {status:>6} {ms:>7} {queries:>7} {size // 1024:>6}", flush=True)
    return rows


if __name__ == "__main__":
    raise SystemExit(main())
