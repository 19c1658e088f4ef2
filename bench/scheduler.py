"""Scheduler throughput on the Django side: how fast one pass applies placements on PostgreSQL.

Starts PostgreSQL (DATABASE_URL's server, else a private cluster), creates a database with the
app's tables, registers --nodes nodes with --devices devices each (fresh heartbeats), queues
--runs one-device runs, and times a scheduling pass. The figure is placements per second of the
apply phase (conditional updates, Attempt/Assignment rows, audit events, estimate errors); the
load, core and queue-writing phases are reported beside it. A second pass with the pool full and
the same number of runs still waiting measures the queue phase (reasons, positions, and the
forward-replay estimates). The pure core's figure (bench/scheduler_core.py, if present) is
included for comparison.

    python bench/scheduler.py [--runs 2000] [--nodes 500] [--devices 4] [--repeats 3]

Writes bench/results/scheduler.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
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

TARGET_PLACEMENTS_PER_S = 500.0


def _django(db: str) -> None:
    env = {**os.environ, "DATABASE_URL": db, "DJANGO_SETTINGS_MODULE": "portal.settings.base", "TRAINYARD_DEBUG": "false"}
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    os.environ.update(DATABASE_URL=db, DJANGO_SETTINGS_MODULE="portal.settings.base", TRAINYARD_DEBUG="false")
    import django

    django.setup()


def _setup(*, runs: int, nodes: int, devices: int, tag: str) -> None:
    from django.contrib.auth.models import User
    from django.utils import timezone

    from apps.jobtemplates.models import JobTemplate
    from apps.nodes.models import Device, Node, NodePool
    from apps.runs.models import Run
    from apps.tenants.models import Project, Team

    now = timezone.now()
    team, _ = Team.objects.get_or_create(slug="bench", defaults={"name": "Bench"})
    project, _ = Project.objects.get_or_create(team=team, slug="bench", defaults={"name": "Bench"})
    user, _ = User.objects.get_or_create(username="bench")
    template, _ = JobTemplate.objects.get_or_create(slug="bench", version=1, defaults={"title": "bench", "kind": "custom",
                                                                                      "entrypoint": "true"})
    pool = NodePool.objects.create(name=f"bench-{tag}")
    made = Node.objects.bulk_create([
        Node(pool=pool, hostname=f"{tag}-n{i:04d}", agent_uid=f"{tag}-{i}", address=f"10.0.{i // 250}.{i % 250}",
             last_heartbeat_at=now, registered_at=now) for i in range(nodes)])
    Device.objects.bulk_create([Device(node=n, index=d, kind="gpu") for n in made for d in range(devices)])
    Run.objects.bulk_create([
        Run(project=project, template=template, submitted_by=user, pool=pool, entrypoint="true", name=f"r{i}", priority="normal",
            max_runtime_s=600 + (i % 7) * 300, queued_at=now) for i in range(runs)], batch_size=1000)


def _clean() -> None:
    from django.db import connection

    with connection.cursor() as cur:
        # Bench data only: a fresh start per repeat (the audit table refuses deletes through the ORM).
        for table in ("scheduling_queueestimate", "scheduling_utilizationsample", "runs_assignment", "runs_attempt",
                      "runs_run", "nodes_device", "nodes_node", "nodes_nodepool", "audit_auditevent", "scheduling_schedulerstate"):
            cur.execute(f"DELETE FROM {table}")


def _one(*, runs: int, nodes: int, devices: int, tag: str) -> dict[str, Any]:
    from apps.runs.models import Run, RunStatus
    from apps.scheduling.services import scheduling_pass

    _clean()
    _setup(runs=runs, nodes=nodes, devices=devices, tag=tag)
    started = time.perf_counter()
    result = scheduling_pass()
    wall = time.perf_counter() - started
    placed = len(result.placed)
    assert placed == min(runs, nodes * devices), (placed, runs, nodes * devices)
    assert Run.objects.filter(status=RunStatus.SCHEDULED).count() == placed
    apply_s = result.timings_ms["apply"] / 1000
    return {"placed": placed, "apply_s": apply_s, "placements_per_s": placed / apply_s if apply_s else None,
            "pass_wall_s": wall, "phases_ms": {k: round(v, 1) for k, v in result.timings_ms.items()},
            "waiting_after": result.waiting}


def _waiting(*, runs: int, nodes: int, devices: int, tag: str) -> dict[str, Any]:
    """The pool already full: every run waits, so the pass is reasons, positions and estimates."""
    from django.utils import timezone

    from apps.jobtemplates.models import JobTemplate
    from apps.runs.models import Run, RunStatus
    from apps.scheduling.services import scheduling_pass
    from apps.tenants.models import Project

    _clean()
    _setup(runs=runs, nodes=nodes, devices=devices, tag=tag)
    first = scheduling_pass()  # fills the pool
    Run.objects.filter(status=RunStatus.SCHEDULED).update(status=RunStatus.RUNNING, started_at=timezone.now())
    pool = Run.objects.filter(status=RunStatus.RUNNING).first().pool  # type: ignore[union-attr]
    project = Project.objects.get(slug="bench")
    template = JobTemplate.objects.get(slug="bench")
    Run.objects.bulk_create([Run(project=project, template=template, pool=pool, entrypoint="true", name=f"w{i}",
                                 max_runtime_s=600 + (i % 7) * 300, queued_at=timezone.now()) for i in range(runs)],
                            batch_size=1000)
    started = time.perf_counter()
    result = scheduling_pass()
    wall = time.perf_counter() - started
    estimated = Run.objects.filter(status=RunStatus.QUEUED, estimated_start__isnull=False).count()
    return {"filled_first_pass_placed": len(first.placed), "waiting": result.waiting, "estimated": estimated,
            "pass_wall_s": wall, "phases_ms": {k: round(v, 1) for k, v in result.timings_ms.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--devices", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    with postgres_server() as server:
        db = create_database(server, "ty_bench_scheduler")
        _django(db)
        from django.db import connection

        trials = [_one(runs=args.runs, nodes=args.nodes, devices=args.devices, tag=f"t{i}") for i in range(args.repeats)]
        for i, t in enumerate(trials):
            print(f"trial {i + 1}: placed {t['placed']} in {t['apply_s']:.3f} s apply "
                  f"({t['placements_per_s']:.0f}/s); whole pass {t['pass_wall_s']:.2f} s {t['phases_ms']}")
        waiting = _waiting(runs=args.runs, nodes=args.nodes, devices=args.devices, tag="w")
        print(f"full pool, {waiting['waiting']} waiting: pass {waiting['pass_wall_s']:.2f} s {waiting['phases_ms']}, "
              f"{waiting['estimated']} with an estimated start")
        server_version = getattr(connection, "pg_version", None)
        connection.close()

    rates = [t["placements_per_s"] for t in trials if t["placements_per_s"]]
    median = statistics.median(rates)
    core_path = HERE / "results" / "scheduler_core.json"
    core = json.loads(core_path.read_text()) if core_path.exists() else None
    out = {
        "benchmark": "scheduler apply phase (Django + PostgreSQL)",
        "runs": args.runs, "nodes": args.nodes, "devices_per_node": args.devices, "repeats": args.repeats,
        "placements_per_s_median": round(median, 1),
        "placements_per_s": [round(r, 1) for r in rates],
        "target_placements_per_s": TARGET_PLACEMENTS_PER_S,
        "meets_target": median >= TARGET_PLACEMENTS_PER_S,
        "trials": trials,
        "full_pool_pass": waiting,
        "core": core,
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "postgres": server_version},
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    write_result("scheduler", out)
    verdict = "meets" if out["meets_target"] else "MISSES"
    print(f"median {median:.0f} placements/s ({verdict} the {TARGET_PLACEMENTS_PER_S:.0f}/s target); "
          "wrote bench/results/scheduler.json")


if __name__ == "__main__":
    main()
