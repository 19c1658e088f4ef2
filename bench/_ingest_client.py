"""One load-generating client for bench/ingest.py, run as its own process (for MLflow, by the
MLflow venv's interpreter). It builds every request it will send first, prints "ready", waits
for "go" on stdin, sends them back to back, and prints JSON {"start", "end", "points", "cpu_s"}
(wall clock, so the parent can line the clients up; the CPU this client used while sending).
Only the sending is measured.

    python _ingest_client.py '{"kind": "trainyard"|"mlflow", "url": ..., ...}'
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

KEYS = ("loss", "accuracy", "lr", "grad_norm")


def _point(step: int, k: int) -> tuple[float, float]:
    """(value, wall time) for one point: a decaying curve, one step every 10 ms."""
    return 1.0 / (step + 1) + k, 1_700_000_000.0 + step * 0.01


def trainyard(cfg: dict[str, Any]) -> tuple[float, float, float, int]:
    import http.client
    from urllib.parse import urlsplit

    per_batch = cfg["batch_points"] // len(KEYS)
    bodies = []
    for b in range(cfg["batches"]):
        points = []
        for step in range(b * per_batch, (b + 1) * per_batch):
            for k, key in enumerate(KEYS):
                value, wall = _point(step, k)
                points.append([key, step, value, wall])
        bodies.append(json.dumps({"attempt_id": cfg["attempt"], "attempt": 1, "points": points}).encode())
    where = urlsplit(cfg["url"])
    headers = {"Content-Type": "application/json", "Authorization": f"Node {cfg['secret']}"}
    _ready()
    sent = 0
    start, cpu = time.time(), time.process_time()
    conn = http.client.HTTPConnection(where.hostname, where.port, timeout=300)
    for body in bodies:
        conn.request("POST", "/api/v1/agent/metrics/", body=body, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        if resp.status != 200:
            raise SystemExit(f"HTTP {resp.status}: {data[:300]!r}")
        sent += json.loads(data)["accepted"]
        if resp.will_close:
            conn.close()
            conn = http.client.HTTPConnection(where.hostname, where.port, timeout=300)
    return start, time.time(), time.process_time() - cpu, sent


def mlflow(cfg: dict[str, Any]) -> tuple[float, float, float, int]:
    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=cfg["url"])
    per_call = cfg["batch_points"] // len(KEYS)
    calls = []
    for b in range(cfg["batches"]):
        metrics = []
        for step in range(b * per_call, (b + 1) * per_call):
            for k, key in enumerate(KEYS):
                value, wall = _point(step, k)
                metrics.append(Metric(key, value, int(wall * 1000), step))
        calls.append(metrics)
    _ready()
    sent = 0
    start, cpu = time.time(), time.process_time()
    for metrics in calls:
        client.log_batch(cfg["run_id"], metrics=metrics)
        sent += len(metrics)
    return start, time.time(), time.process_time() - cpu, sent


def _ready() -> None:
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        raise SystemExit("no go")


def main() -> None:
    cfg = json.loads(sys.argv[1])
    start, end, cpu, sent = (trainyard if cfg["kind"] == "trainyard" else mlflow)(cfg)
    print(json.dumps({"start": start, "end": end, "points": sent, "cpu_s": cpu}), flush=True)


if __name__ == "__main__":
    main()
