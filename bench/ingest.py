"""Metric ingestion throughput: Trainyard's endpoint vs the MLflow tracking server.

Starts PostgreSQL (DATABASE_URL's server, else a private cluster), serves the Django app with
gunicorn against it the way `make run` does on a 2-core machine (2 workers, gthread), and has
several client processes, one agent's run each, POST 10,000-point batches in the agent's wire
format. Then it runs `mlflow server` (same worker count) on the same PostgreSQL, in a separate
database, and sends the same points with MlflowClient.log_batch (1,000 metrics per call,
MLflow's limit). Each side is measured --repeats times on fresh runs; the medians are compared.

Clients build all their requests before the clock starts, so what is measured is the server
(and the database); every process's CPU and the whole machine's are recorded too, because on a
shared machine other work can slow a run down (see other_processes_cpu_s in the JSON).

    python bench/ingest.py [--clients 4] [--batches 25] [--repeats 3] [--workers 2] [--threads 4]

MLflow comes from bench/.venv-mlflow, created on first use from requirements-bench.txt; only if
that cannot be done is the MLflow half reported as skipped. Writes bench/results/ingest.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

from _pgcluster import create_database, postgres_server, postmaster_pid  # noqa: E402
from _procstat import Window  # noqa: E402
from _results import write_result  # noqa: E402

from tests.mlflow.venv import MLFLOW_VENV, REQUIREMENTS, VENV_PYTHON, mlflow_python, python_imports  # noqa: E402

BATCH = 10_000
MLFLOW_BATCH = 1_000
CLIENT = HERE / "_ingest_client.py"
# The MLflow server side also needs PostgreSQL's driver.
MLFLOW_MODULES = ("mlflow", "psycopg2")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_http(url: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url, timeout=2).read()
            return
        except OSError:
            time.sleep(0.3)
    raise TimeoutError(url)


def _drive(python: str, configs: list[dict[str, Any]], window: Window) -> dict[str, Any]:
    """Start one client process per config, wait until all have built their requests, let them
    go together; throughput is all points over first start to last finish."""
    procs = [subprocess.Popen([python, str(CLIENT), json.dumps(cfg)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
             for cfg in configs]
    try:
        for p in procs:
            assert p.stdout is not None
            if p.stdout.readline().strip() != "ready":
                raise RuntimeError("a client failed while preparing its requests")
        window.start()
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        results = []
        for p in procs:
            out, _ = p.communicate(timeout=1800)
            if p.returncode != 0:
                raise RuntimeError(f"a client failed: {out[-500:]}")
            results.append(json.loads(out.strip().splitlines()[-1]))
        cpu = window.stop(extra={"clients": sum(r["cpu_s"] for r in results)})
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    points = sum(r["points"] for r in results)
    seconds = max(r["end"] for r in results) - min(r["start"] for r in results)
    return {"points": points, "seconds": round(seconds, 3), "points_per_s": round(points / seconds), **cpu}


def bench_trainyard(server: str, args: argparse.Namespace) -> dict[str, Any]:
    db = create_database(server, "ty_bench_ingest")
    env = {**os.environ, "DATABASE_URL": db, "DJANGO_SETTINGS_MODULE": "portal.settings.base", "TRAINYARD_DEBUG": "false",
           "TRAINYARD_LOG_LEVEL": "WARNING", "BENCH_RUNS": str(args.clients * args.repeats + 1)}
    py = sys.executable
    subprocess.run([py, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    out = subprocess.run([py, "manage.py", "shell", "-c", (HERE / "_setup_run.py").read_text()], cwd=ROOT, env=env, check=True,
                         capture_output=True, text=True)
    runs = json.loads(out.stdout.strip().splitlines()[-1])["runs"]
    port = _free_port()
    worker = ["-k", "gthread", "--threads", str(args.threads)] if args.threads > 1 else ["-k", "sync"]
    web = subprocess.Popen([py, "-m", "gunicorn", "portal.wsgi:application", "-b", f"127.0.0.1:{port}", "-w", str(args.workers),
                            *worker, "--timeout", "300", "--log-level", "warning"], cwd=ROOT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_http(f"{url}/healthz")
        # Warm-up on a run of its own: imports, database connections, the session temp table.
        warm = runs.pop()
        _drive(py, [{"kind": "trainyard", "url": url, "attempt": warm["attempt"], "secret": warm["secret"], "batches": 2,
                     "batch_points": BATCH} for _ in range(args.clients)], Window({}))
        repeats = []
        for r in range(args.repeats):
            mine = runs[r * args.clients:(r + 1) * args.clients]
            window = Window({"server": web.pid, "database": postmaster_pid(server)})
            result = _drive(py, [{"kind": "trainyard", "url": url, "attempt": m["attempt"], "secret": m["secret"],
                                  "batches": args.batches, "batch_points": BATCH} for m in mine], window)
            repeats.append(result)
            print(f"  trainyard #{r + 1}: {result['points']:,} points in {result['seconds']}s = {result['points_per_s']:,}/s "
                  f"(load {result['loadavg_before'][0]}, other processes used {result['other_processes_cpu_s']} CPU-s)", flush=True)
    finally:
        os.killpg(web.pid, 15)
        web.wait(30)
    return _summary(repeats, clients=args.clients, gunicorn_workers=args.workers, gunicorn_threads=args.threads,
                    batch_points=BATCH)


def bench_mlflow(server: str, python: str, args: argparse.Namespace) -> dict[str, Any]:
    db = create_database(server, "ty_bench_mlflow")
    port = _free_port()
    workdir = Path(os.environ.get("TMPDIR", "/tmp")) / f"ty-mlflow-{port}"
    workdir.mkdir(parents=True, exist_ok=True)
    log_path = workdir / "server.log"
    log = log_path.open("wb")
    proc = subprocess.Popen([python, "-m", "mlflow", "server", "--backend-store-uri", "postgresql+psycopg2://" + db.split("://", 1)[1],
                             "--default-artifact-root", str(workdir), "--host", "127.0.0.1", "--port", str(port),
                             "--workers", str(args.workers)],
                            start_new_session=True, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        try:
            _wait_http(f"{url}/health", 300)
        except TimeoutError:
            # Say why: the server's own last lines (it migrates a fresh database on first start).
            log.flush()
            tail = log_path.read_text(errors="replace").splitlines()[-20:]
            raise SystemExit(f"mlflow server did not answer {url}/health in 300 s; its log ends:\n" + "\n".join(tail)) from None
        setup = ("import sys; from mlflow.tracking import MlflowClient; c = MlflowClient(tracking_uri=sys.argv[1]); "
                 "e = c.create_experiment('bench'); print(' '.join(c.create_run(e).info.run_id for _ in range(int(sys.argv[2]))))")
        run_ids = subprocess.run([python, "-c", setup, url, str(args.clients * args.repeats + 1)], check=True, capture_output=True,
                                 text=True).stdout.strip().splitlines()[-1].split()
        warm = run_ids.pop()
        _drive(python, [{"kind": "mlflow", "url": url, "run_id": warm, "batches": 2, "batch_points": MLFLOW_BATCH}
                        for _ in range(args.clients)], Window({}))
        repeats = []
        for r in range(args.repeats):
            mine = run_ids[r * args.clients:(r + 1) * args.clients]
            window = Window({"server": proc.pid, "database": postmaster_pid(server)})
            result = _drive(python, [{"kind": "mlflow", "url": url, "run_id": m, "batches": args.mlflow_batches,
                                      "batch_points": MLFLOW_BATCH} for m in mine], window)
            repeats.append(result)
            print(f"  mlflow #{r + 1}: {result['points']:,} points in {result['seconds']}s = {result['points_per_s']:,}/s "
                  f"(load {result['loadavg_before'][0]}, other processes used {result['other_processes_cpu_s']} CPU-s)", flush=True)
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(30)
        log.close()
        shutil.rmtree(workdir, ignore_errors=True)
    return _summary(repeats, clients=args.clients, workers=args.workers, batch_points=MLFLOW_BATCH,
                    mlflow_version=_mlflow_version(python))


def _summary(repeats: list[dict[str, Any]], **setup: Any) -> dict[str, Any]:
    rates = [r["points_per_s"] for r in repeats]
    per_million = [{k: round(v * 1e6 / r["points"], 1) for k, v in r["cpu_s"].items()} for r in repeats]
    return {"points_per_s_median": round(statistics.median(rates)), "points_per_s": rates,
            "cpu_s_per_million_points_median": {k: statistics.median(p[k] for p in per_million) for k in per_million[0]},
            **setup, "repeats": repeats}


def _mlflow_version(python: str) -> str:
    out = subprocess.run([python, "-c", "import mlflow; print(mlflow.__version__)"], capture_output=True, text=True)
    return out.stdout.strip()


def _mlflow_python(explicit: str | None) -> tuple[str | None, str]:
    """An interpreter with MLflow: --mlflow-python, else bench/.venv-mlflow (created from
    requirements-bench.txt when missing, by the helper the tests use). Returns (python or None, why not)."""
    if explicit:
        return (explicit, "") if python_imports(explicit, MLFLOW_MODULES) else (None, f"{explicit} cannot import mlflow and psycopg2")
    if not python_imports(VENV_PYTHON, MLFLOW_MODULES):
        print(f"creating {MLFLOW_VENV} from {REQUIREMENTS.name} (one time, a few minutes)...", flush=True)
    try:
        return mlflow_python(MLFLOW_MODULES), ""
    except (RuntimeError, subprocess.SubprocessError) as exc:
        return None, str(exc)[-300:]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=4, help="concurrent senders, one run each")
    parser.add_argument("--batches", type=int, default=25, help="10,000-point batches per client per repeat")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2, help="server worker processes (both servers)")
    parser.add_argument("--threads", type=int, default=4, help="gunicorn threads per worker (1 = sync worker)")
    parser.add_argument("--mlflow-batches", type=int, default=10, help="log_batch calls of 1,000 metrics per client per repeat")
    parser.add_argument("--mlflow-python", default=None, help="an interpreter with mlflow and psycopg2 (default: bench/.venv-mlflow)")
    parser.add_argument("--skip-mlflow", action="store_true")
    parser.add_argument("--skip-trainyard", action="store_true", help="MLflow only (checking the MLflow setup)")
    args = parser.parse_args()
    result: dict[str, Any] = {"cpu_count": os.cpu_count(), "targets": {"points_per_s": 100_000, "vs_mlflow": 10},
                              "loadavg_at_start": [round(x, 2) for x in os.getloadavg()], "time": time.time()}
    with postgres_server() as server:
        ty: dict[str, Any] | None = None
        if not args.skip_trainyard:
            print("trainyard:", flush=True)
            result["trainyard"] = ty = bench_trainyard(server, args)
            print(f"trainyard: median {ty['points_per_s_median']:,} points/s over {args.repeats} repeats "
                  f"(CPU-s per million points: {ty['cpu_s_per_million_points_median']})", flush=True)
        python, why = (None, "--skip-mlflow") if args.skip_mlflow else _mlflow_python(args.mlflow_python)
        if python is None:
            result["mlflow"] = {"skipped": why}
            print(f"mlflow: SKIPPED: {why}")
        else:
            print("mlflow:", flush=True)
            result["mlflow"] = ml = bench_mlflow(server, python, args)
            print(f"mlflow {ml['mlflow_version']}: median {ml['points_per_s_median']:,} points/s "
                  f"(CPU-s per million points: {ml['cpu_s_per_million_points_median']})")
            if ty is not None:
                result["ratio"] = round(ty["points_per_s_median"] / ml["points_per_s_median"], 1)
                # The two halves run minutes apart on a possibly shared machine; server plus
                # database CPU per point does not depend on what else was running.
                per_point = {name: side["cpu_s_per_million_points_median"] for name, side in (("ty", ty), ("ml", ml))}
                if all(p.get("database") for p in per_point.values()):
                    cost = {name: p["server"] + p["database"] for name, p in per_point.items()}
                    result["ratio_by_server_and_database_cpu"] = round(cost["ml"] / cost["ty"], 1)
                print(f"ratio: {result['ratio']}x by throughput (target 10x); "
                      f"{result.get('ratio_by_server_and_database_cpu', '?')}x by server + database CPU per point")
        if ty is not None:
            print(f"trainyard target 100,000 points/s: {'met' if ty['points_per_s_median'] >= 100_000 else 'NOT met'}")
    result["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    write_result("ingest", result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
