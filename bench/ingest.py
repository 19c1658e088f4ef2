"""Metric ingestion throughput: Trainyard's endpoint vs the MLflow tracking server.

Starts PostgreSQL (DATABASE_URL's server, else a private cluster), serves the Django app with
gunicorn against it, and has several client processes POST 10,000-point batches (the agent's
wire format) for a fixed number of batches; then runs `mlflow server` on the same PostgreSQL
(a separate database) and sends the same points with MlflowClient.log_batch (1,000 metrics per
call, MLflow's limit). Prints points/s for both and the ratio; writes bench/results/ingest.json.

    python bench/ingest.py [--clients 4] [--batches 12] [--workers 4] [--mlflow-python PATH]

MLflow runs from any interpreter that has it (requirements-bench.txt pins the version); without
one the MLflow half is reported as skipped.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from _pgcluster import create_database, postgres_server  # noqa: E402

BATCH = 10_000
KEYS = ("loss", "accuracy", "lr", "grad_norm")


def _points(client: int, batch: int) -> list[list[Any]]:
    base = (client * 1000 + batch) * (BATCH // len(KEYS))
    out: list[list[Any]] = []
    for i in range(BATCH // len(KEYS)):
        step = base + i
        for k, key in enumerate(KEYS):
            out.append([key, step, 1.0 / (step + 1) + k, 1_700_000_000.0 + step * 0.01])
    return out


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


def _trainyard_client(args: tuple[str, str, int, int, int]) -> int:
    url, secret, attempt, client, batches = args
    sent = 0
    for b in range(batches):
        body = json.dumps({"attempt_id": attempt, "attempt": 1, "points": _points(client, b)}).encode()
        req = urllib.request.Request(f"{url}/api/v1/agent/metrics/", data=body, method="POST",
                                     headers={"Content-Type": "application/json", "Authorization": f"Node {secret}"})
        with urllib.request.urlopen(req, timeout=120) as resp:
            sent += json.loads(resp.read())["accepted"]
    return sent


def bench_trainyard(server: str, clients: int, batches: int, workers: int) -> dict[str, Any]:
    db = create_database(server, "ty_bench_ingest")
    env = {**os.environ, "DATABASE_URL": db, "DJANGO_SETTINGS_MODULE": "portal.settings.base", "TRAINYARD_DEBUG": "false",
           "TRAINYARD_LOG_LEVEL": "WARNING"}
    py = sys.executable
    # Then --run-syncdb: apps still without migrations get their tables from the models (on
    # PostgreSQL only after the migrated tables they point at exist).
    subprocess.run([py, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    subprocess.run([py, "manage.py", "migrate", "--run-syncdb", "-v0"], cwd=ROOT, env=env, check=True)
    out = subprocess.run([py, "manage.py", "shell", "-c", (HERE / "_setup_run.py").read_text()], cwd=ROOT, env=env, check=True,
                         capture_output=True, text=True)
    ids = json.loads(out.stdout.strip().splitlines()[-1])
    port = _free_port()
    web = subprocess.Popen([py, "-m", "gunicorn", "portal.wsgi:application", "-b", f"127.0.0.1:{port}", "-w", str(workers),
                            "--timeout", "300", "--log-level", "warning"], cwd=ROOT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_http(f"{url}/healthz")
        _trainyard_client((url, ids["secret"], ids["attempt"], 999, 1))  # warm-up: connections, temp table
        start = time.perf_counter()
        with mp.Pool(clients) as pool:
            sent = sum(pool.map(_trainyard_client, [(url, ids["secret"], ids["attempt"], c, batches) for c in range(clients)]))
        elapsed = time.perf_counter() - start
    finally:
        web.terminate()
        web.wait(30)
    return {"points": sent, "seconds": round(elapsed, 3), "points_per_s": round(sent / elapsed), "clients": clients,
            "gunicorn_workers": workers, "batch_points": BATCH}


MLFLOW_CLIENT = r"""
import json, sys, time
from mlflow.entities import Metric
from mlflow.tracking import MlflowClient
url, run_id = sys.argv[1], sys.argv[2]
client, batches, batch, keys = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6].split(",")
c = MlflowClient(tracking_uri=url)
sent = 0
for b in range(batches):
    base = (client * 1000 + b) * (batch // len(keys))
    ms = [Metric(key, 1.0 / (base + i + 1) + k, int((1_700_000_000.0 + (base + i) * 0.01) * 1000), base + i)
          for i in range(batch // len(keys)) for k, key in enumerate(keys)]
    for j in range(0, len(ms), 1000):
        c.log_batch(run_id, metrics=ms[j:j + 1000])
    sent += len(ms)
print(sent)
"""


def bench_mlflow(server: str, python: str, clients: int, batches: int, workers: int) -> dict[str, Any]:
    db = create_database(server, "ty_bench_mlflow")
    port = _free_port()
    workdir = Path(os.environ.get("TMPDIR", "/tmp")) / f"ty-mlflow-{port}"
    workdir.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen([python, "-m", "mlflow", "server", "--backend-store-uri", db.replace("postgresql://", "postgresql+psycopg2://"),
                             "--default-artifact-root", str(workdir), "--host", "127.0.0.1", "--port", str(port),
                             "--workers", str(workers)],
                            start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_http(f"{url}/health", 180)
        setup = ("import sys; from mlflow.tracking import MlflowClient; c = MlflowClient(tracking_uri=sys.argv[1]); "
                 "e = c.create_experiment('bench'); print(c.create_run(e).info.run_id)")
        run_id = subprocess.run([python, "-c", setup, url], check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
        start = time.perf_counter()
        procs = [subprocess.Popen([python, "-c", MLFLOW_CLIENT, url, run_id, str(c), str(batches), str(BATCH), ",".join(KEYS)],
                                  stdout=subprocess.PIPE, text=True) for c in range(clients)]
        sent = sum(int(p.communicate()[0].strip().splitlines()[-1]) for p in procs)
        elapsed = time.perf_counter() - start
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(30)
        shutil.rmtree(workdir, ignore_errors=True)
    return {"points": sent, "seconds": round(elapsed, 3), "points_per_s": round(sent / elapsed), "clients": clients, "workers": workers}


def _mlflow_python(explicit: str | None) -> str | None:
    candidates = [explicit] if explicit else [sys.executable, str(ROOT / "bench" / ".venv-mlflow" / "bin" / "python")]
    for python in candidates:
        if python and Path(python).exists() and subprocess.run([python, "-c", "import mlflow"], capture_output=True).returncode == 0:
            return python
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--batches", type=int, default=10, help="batches of 10,000 points per client")
    parser.add_argument("--workers", type=int, default=max(2, os.cpu_count() or 2))
    parser.add_argument("--mlflow-python", default=None)
    parser.add_argument("--mlflow-batches", type=int, default=None, help="batches per client for MLflow (default: same)")
    args = parser.parse_args()
    result: dict[str, Any] = {"cpu_count": os.cpu_count(), "targets": {"points_per_s": 100_000, "vs_mlflow": 10}}
    with postgres_server() as server:
        result["trainyard"] = ty = bench_trainyard(server, args.clients, args.batches, args.workers)
        print(f"trainyard: {ty['points']:,} points in {ty['seconds']}s = {ty['points_per_s']:,} points/s", flush=True)
        python = _mlflow_python(args.mlflow_python)
        if python is None:
            result["mlflow"] = {"skipped": "mlflow is not installed (pip install -r requirements-bench.txt, or --mlflow-python)"}
            print("mlflow: skipped (not installed)")
        else:
            result["mlflow"] = ml = bench_mlflow(server, python, args.clients, args.mlflow_batches or args.batches, args.workers)
            result["ratio"] = round(ty["points_per_s"] / ml["points_per_s"], 1)
            print(f"mlflow: {ml['points']:,} points in {ml['seconds']}s = {ml['points_per_s']:,} points/s; ratio {result['ratio']}x")
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "ingest.json").write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
