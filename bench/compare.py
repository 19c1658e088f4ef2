"""Compare endpoint latency: 20 runs x 100,000 steps x 3 keys in PostgreSQL.

Loads the points through the ingestion service (COPY + upsert + rollups), then times
GET /api/v1/compare/?runs=... in-process (server time, no network) and checks that every series
carries its run's true min and max (a planted spike per run). Prints the median and p95;
writes bench/results/compare.json.

    python bench/compare.py [--runs 20] [--steps 100000] [--repeats 21]
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

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

from _pgcluster import create_database, postgres_server  # noqa: E402

KEYS = ("loss", "accuracy", "lr")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=21)
    args = parser.parse_args()
    with postgres_server() as server:
        db = create_database(server, "ty_bench_compare")
        env = {**os.environ, "DATABASE_URL": db, "DJANGO_SETTINGS_MODULE": "portal.settings.base"}
        subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
        subprocess.run([sys.executable, "manage.py", "migrate", "--run-syncdb", "-v0"], cwd=ROOT, env=env, check=True)
        os.environ.update(DATABASE_URL=db, DJANGO_SETTINGS_MODULE="portal.settings.base", TRAINYARD_DEBUG="false")
        import django

        django.setup()
        result = run_bench(args)
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "compare.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    return 0 if result["all_extremes_present"] else 1


def run_bench(args: argparse.Namespace) -> dict[str, object]:
    from django.contrib.auth import get_user_model
    from django.db import transaction
    from rest_framework.test import APIClient

    from apps.jobtemplates.models import JobTemplate
    from apps.nodes.models import NodePool
    from apps.runs.models import Run
    from apps.tenants.models import Role
    from apps.tenants.services import membership_set, project_create, team_create
    from apps.tracking.services import metric_points_store

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
        for chunk in range(0, args.steps, 50_000):
            rows = []
            for step in range(chunk, min(args.steps, chunk + 50_000)):
                for k, key in enumerate(KEYS):
                    value = 1.0 / (step + 1) + k
                    if step == spike_step:
                        value = spikes[run.pk][1] if k == 0 else spikes[run.pk][2]
                    rows.append((key, step, value, 0, 1_700_000_000.0 + step))
            with transaction.atomic():
                metric_points_store(run_id=run.pk, attempt=1, rows=rows)
        run_ids.append(run.pk)
        print(f"loaded run {r + 1}/{args.runs}", flush=True)
    load_s = time.perf_counter() - load_start
    client = APIClient()
    client.force_authenticate(user)
    url = "/api/v1/compare/?runs=" + ",".join(map(str, run_ids))
    timings = []
    ok = True
    for _ in range(args.repeats):
        start = time.perf_counter()
        resp = client.get(url)
        timings.append((time.perf_counter() - start) * 1000)
        assert resp.status_code == 200, resp.content[:300]
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
            "target_ms": 300, "series_points": len(data["series"]["loss"][0]["x"]), "all_extremes_present": ok}


if __name__ == "__main__":
    raise SystemExit(main())
