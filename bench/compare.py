"""Compare endpoint latency: 20 runs x 100,000 steps x 3 keys in PostgreSQL.

Loads the points through the ingestion service (binary COPY + append + rollups, one call per
run), then times GET /api/v1/compare/?runs=... in-process through Django's full request
handling (middleware, authentication, DRF view, JSON rendering; no network), which is what
"server time" means here. Checks that every series carries its run's true min and max (a
planted spike per run) both as true_min/true_max and in its bucket min/max. Prints the median
and p95 and the number of SQL queries per request; writes bench/results/compare.json (with the
commit, date and machine: bench/_results.py).

    python bench/compare.py [--runs 20] [--steps 100000] [--repeats 21] [--max-points 200]
"""

from __future__ import annotations

import argparse
import json
import os
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

from _pgcluster import create_database, postgres_server, postmaster_pid  # noqa: E402
from _procstat import Window  # noqa: E402
from _results import write_result  # noqa: E402

KEYS = ("loss", "accuracy", "lr")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument("--max-points", type=int, default=None, help="the view's max_points (default: its own, 200)")
    args = parser.parse_args()
    with postgres_server() as server:
        db = create_database(server, "ty_bench_compare")
        env = {**os.environ, "DATABASE_URL": db, "DJANGO_SETTINGS_MODULE": "portal.settings.base"}
        subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
        os.environ.update(DATABASE_URL=db, DJANGO_SETTINGS_MODULE="portal.settings.base", TRAINYARD_DEBUG="false")
        import django

        django.setup()
        result = run_bench(args, postmaster_pid(server))
    print(json.dumps(result, indent=2))
    print(f"wrote {write_result('compare', result)}")
    return 0 if result["all_extremes_present"] else 1


def run_bench(args: argparse.Namespace, database_pid: int | None) -> dict[str, object]:
    from django.contrib.auth import get_user_model
    from django.db import connection, transaction
    from rest_framework.test import APIClient

    from apps.jobtemplates.models import JobTemplate
    from apps.nodes.models import NodePool
    from apps.runs.models import Run
    from apps.tenants.models import Role
    from apps.tenants.services import membership_set, project_create, team_create
    from apps.tracking.services import PointColumns, metric_points_store

    team = team_create(slug="cmp", name="Compare")
    project = project_create(team=team, slug="bench", name="Bench")
    user = get_user_model().objects.create_user("cmp-user", "c@example.com", "pw-cmp-1234567")
    membership_set(team=team, user=user, role=Role.ADMIN)
    template = JobTemplate.objects.create(slug="cmp", version=1, title="Cmp", kind="train", entrypoint="true")
    pool = NodePool.objects.create(name="cmp")
    run_ids = []
    spikes = {}
    load_start = time.perf_counter()
    for r in range(args.runs):
        run = Run.objects.create(project=project, template=template, pool=pool, entrypoint="true", status="succeeded",
                                 params={"lr": 0.001 * (r + 1), "batch": 64})
        spike_step = (r * 7919) % args.steps
        spikes[run.pk] = (spike_step, 1000.0 + r, -1000.0 - r)
        keys, steps, values, walls = [], [], [], []
        for step in range(args.steps):
            for k, key in enumerate(KEYS):
                value = 1.0 / (step + 1) + k
                if step == spike_step:
                    value = spikes[run.pk][1] if k == 0 else spikes[run.pk][2]
                keys.append(key)
                steps.append(step)
                values.append(value)
                walls.append(1_700_000_000.0 + step)
        with transaction.atomic():
            metric_points_store(run_id=run.pk, attempt=1, points=PointColumns(keys, steps, values, [0] * len(keys), walls))
        run_ids.append(run.pk)
        print(f"loaded run {r + 1}/{args.runs}", flush=True)
    load_s = time.perf_counter() - load_start
    client = APIClient()
    client.force_authenticate(user)
    url = "/api/v1/compare/?runs=" + ",".join(map(str, run_ids))
    if args.max_points:
        url += f"&max_points={args.max_points}"
    queries: list[str] = []

    def count(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        queries.append(sql)
        return execute(sql, params, many, context)

    from apps.tracking import selectors

    fetchall = selectors._fetchall  # series reads go through psycopg directly, past execute_wrapper

    def count_fetch(sql: str, params: Any, row: Any) -> Any:
        queries.append(sql)
        return fetchall(sql, params, row)

    selectors._fetchall = count_fetch  # type: ignore[assignment]
    try:
        with connection.execute_wrapper(count):
            client.get(url)  # warm-up, and the query count
    finally:
        selectors._fetchall = fetchall  # type: ignore[assignment]
    timings = []
    ok = True
    window = Window({"server": os.getpid(), "database": database_pid})
    window.start()
    for _ in range(args.repeats):
        start = time.perf_counter()
        resp = client.get(url)
        timings.append((time.perf_counter() - start) * 1000)
        assert resp.status_code == 200, resp.content[:300]
    machine = window.stop()
    cpu = machine.pop("cpu_s")
    assert isinstance(cpu, dict)
    data = resp.json()
    for key in KEYS:
        for series in data["series"][key]:
            spike = spikes[series["run"]]
            want_max = spike[1] if key == "loss" else (spike[2] if spike[0] != 0 else None)
            if key == "loss" and (series["true_max"] != want_max or max(series["max"]) != want_max):
                ok = False
            if key != "loss" and (series["true_min"] != spike[2] or min(series["min"]) != spike[2]):
                ok = False
    return {"runs": args.runs, "steps": args.steps, "keys": len(KEYS), "points": args.runs * args.steps * len(KEYS),
            "load_seconds": round(load_s, 1), "load_points_per_s": round(args.runs * args.steps * len(KEYS) / load_s),
            "compare_ms_median": round(statistics.median(timings), 1),
            "compare_ms_p95": round(sorted(timings)[int(0.95 * len(timings)) - 1], 1),
            "target_ms": 300, "queries_per_request": len(queries), "timings_ms": [round(t, 1) for t in timings],
            "series": sum(len(v) for v in data["series"].values()), "series_points": len(data["series"]["loss"][0]["x"]),
            "series_level": data["series"]["loss"][0]["level"], "response_bytes": len(resp.content), "all_extremes_present": ok,
            "cpu_s_per_request": {k: round(v / args.repeats, 3) for k, v in cpu.items()}, **machine}


if __name__ == "__main__":
    raise SystemExit(main())
