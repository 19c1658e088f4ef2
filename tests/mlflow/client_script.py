"""Runs under bench/.venv-mlflow's interpreter (the real MLflow client), driven by tests/mlflow:
``python client_script.py MODE JSON`` with MLFLOW_TRACKING_URI / MLFLOW_TRACKING_TOKEN set; prints
one JSON document (the last line of stdout)."""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
import time
from typing import Any

import mlflow
import mlflow.data
import pandas
from mlflow.entities import Dataset, DatasetInput, Metric, ViewType
from mlflow.exceptions import MlflowException
from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository
from mlflow.tracking import MlflowClient


def _sha(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def log(args: dict[str, Any]) -> dict[str, Any]:
    """Alice's script: params, 10,000 metric points, a tag and an artifact, then read them back."""
    experiment = mlflow.set_experiment(args["experiment"])
    with mlflow.start_run(run_name="mlflow-client") as run:
        mlflow.log_params({"lr": "0.01", "batch_size": 64, "optimizer": "adam"})
        mlflow.set_tag("stage", "acceptance")
        now = int(time.time() * 1000)
        points = [Metric("loss", 1.0 / (i + 1), now + i, i) for i in range(args.get("points", 10_000))]
        MlflowClient().log_batch(run.info.run_id, metrics=points)
        mlflow.log_metric("accuracy", 0.75, step=3)
        mlflow.log_artifact(args["artifact"], artifact_path="plots")
        frame = pandas.DataFrame({"pixels": [0.0, 0.5, 1.0], "label": [0, 1, 1]})
        train = mlflow.data.from_pandas(frame, name="digits-train", targets="label")
        mlflow.log_input(train, context="training")
        mlflow.log_input(train, context="training")  # the same (name, digest): kept once, as in MLflow
        run_id = run.info.run_id
    client = MlflowClient()
    got = client.get_run(run_id)
    history = client.get_metric_history(run_id, "loss")
    download = mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path=f"plots/{os.path.basename(args['artifact'])}",
                                                   dst_path=tempfile.mkdtemp())
    return {"run_id": run_id, "experiment_id": experiment.experiment_id, "status": got.info.status,
            "params": got.data.params, "tags": {k: v for k, v in got.data.tags.items() if not k.startswith("mlflow.")},
            "history": [[m.step, m.value, m.timestamp] for m in history], "expected": [[p.step, p.value, p.timestamp] for p in points],
            "artifacts": [f.path for f in client.list_artifacts(run_id, "plots")], "artifact_sha256": _sha(download),
            "inputs": [[d.dataset.name, d.dataset.digest, d.dataset.source_type, {t.key: t.value for t in d.tags}]
                       for d in mlflow.get_run(run_id).inputs.dataset_inputs], "train_digest": train.digest}


def _code(call: Any) -> str:
    try:
        call()
    except MlflowException as exc:
        return str(exc.error_code)
    except Exception as exc:  # noqa: BLE001  (the artifact repository raises requests' HTTPError)
        return f"{type(exc).__name__}: {str(exc)[:200]}"
    return "ok"


def intrude(args: dict[str, Any]) -> dict[str, Any]:
    """Bob's script against alice's experiment and run: every call must fail."""
    client = MlflowClient()
    run_id, experiment_id = args["run_id"], args["experiment_id"]
    with open(os.path.join(tempfile.mkdtemp(), "bob.txt"), "w") as f:
        f.write("bob was here")
    return {
        "set_experiment": _code(lambda: mlflow.set_experiment(args["experiment"])),
        "get_experiment": _code(lambda: client.get_experiment(experiment_id)),
        "get_run": _code(lambda: client.get_run(run_id)),
        "log_metric": _code(lambda: client.log_metric(run_id, "loss", 99.0, step=1)),
        "log_param": _code(lambda: client.log_param(run_id, "lr", "9")),
        "set_tag": _code(lambda: client.set_tag(run_id, "stage", "bob")),
        "log_input": _code(lambda: client.log_inputs(run_id, [DatasetInput(Dataset("bob", "b0b", "code", "{}"))])),
        "history": _code(lambda: client.get_metric_history(run_id, "loss")),
        "search": _code(lambda: client.search_runs([experiment_id])),
        "create_run": _code(lambda: client.create_run(experiment_id)),
        "end_run": _code(lambda: client.set_terminated(run_id, "KILLED")),
        "delete_run": _code(lambda: client.delete_run(run_id)),
        "restore_run": _code(lambda: client.restore_run(run_id)),
        "download": _code(lambda: mlflow.artifacts.download_artifacts(
            artifact_uri=f"mlflow-artifacts:/{experiment_id}/{run_id}/artifacts/plots/{args['artifact_name']}",
            dst_path=tempfile.mkdtemp())),
        "upload": _code(lambda: get_artifact_repository(
            f"mlflow-artifacts:/{experiment_id}/{run_id}/artifacts").log_artifact(f.name, "plots")),
    }


def lifecycle(args: dict[str, Any]) -> dict[str, Any]:
    """Alice deletes a run of her experiment and restores it: what search and get_run say at each step."""
    client = MlflowClient()
    experiment_id = mlflow.get_experiment_by_name(args["experiment"]).experiment_id
    rid = client.create_run(experiment_id, run_name="to-delete").info.run_id

    def seen() -> dict[str, Any]:
        return {"stage": client.get_run(rid).info.lifecycle_stage,
                **{view: rid in [r.info.run_id for r in client.search_runs([experiment_id], run_view_type=number)]
                   for view, number in (("active", ViewType.ACTIVE_ONLY), ("deleted", ViewType.DELETED_ONLY), ("all", ViewType.ALL))}}

    client.delete_run(rid)
    deleted = {**seen(), "log_metric": _code(lambda: client.log_metric(rid, "loss", 1.0, step=1))}
    client.restore_run(rid)
    return {"run_id": rid, "deleted": deleted, "restored": seen()}


def fetch(args: dict[str, Any]) -> dict[str, Any]:
    """Download one artifact as the client does, recording each redirect it follows and whether its
    Authorization header went along (requests' rebuild_auth, wrapped)."""
    import requests.sessions

    hops: list[dict[str, Any]] = []
    original = requests.sessions.Session.rebuild_auth

    def rebuild_auth(self: Any, prepared: Any, response: Any) -> None:
        original(self, prepared, response)
        hops.append({"status": response.status_code, "from": response.request.url.split("?")[0],
                     "to": prepared.url.split("?")[0], "authorization": "Authorization" in prepared.headers})

    requests.sessions.Session.rebuild_auth = rebuild_auth
    path = mlflow.artifacts.download_artifacts(artifact_uri=args["artifact_uri"], dst_path=tempfile.mkdtemp())
    return {"sha256": _sha(path), "hops": hops}


def seed(args: dict[str, Any]) -> dict[str, Any]:
    """A small experiment in a plain MLflow server, for the import test."""
    mlflow.set_experiment(args["experiment"])
    folder = tempfile.mkdtemp()
    with open(os.path.join(folder, "notes.txt"), "w") as f:
        f.write("first run\n")
    os.makedirs(os.path.join(folder, "model"))
    with open(os.path.join(folder, "model", "weights.bin"), "wb") as fb:
        fb.write(bytes(range(256)) * 40)
    client = MlflowClient()
    base = 1_700_000_000_000
    for index, status in enumerate(("FINISHED", "FAILED")):
        run = client.create_run(mlflow.get_experiment_by_name(args["experiment"]).experiment_id, start_time=base + index * 1000,
                                run_name=f"run-{index}", tags={"team": "vision", "try": str(index)})
        rid = run.info.run_id
        client.log_batch(rid, metrics=[Metric("loss", 2.0 / (s + 1) + index, base + s * 10, s) for s in range(250)]
                         + [Metric("val/acc", 0.5 + s / 100, base + s, s * 50) for s in range(5)],
                         params=[mlflow.entities.Param("lr", str(0.1 / (index + 1))), mlflow.entities.Param("layers", "3")])
        client.set_tag(rid, "note", "a tag with spaces")
        client.log_artifact(rid, os.path.join(folder, "notes.txt"))
        client.log_artifacts(rid, os.path.join(folder, "model"), "model")
        client.set_terminated(rid, status, end_time=base + 60_000 + index)
    return {"ok": True}


def dump(args: dict[str, Any]) -> dict[str, Any]:
    """An experiment's runs as the client reads them: info, params, tags, full metric histories, artifact hashes."""
    client = MlflowClient()
    experiment = client.get_experiment_by_name(args["experiment"])
    out = {}
    for run in client.search_runs([experiment.experiment_id]):
        rid = run.info.run_id
        histories = {key: [[m.step, m.value, m.timestamp] for m in client.get_metric_history(rid, key)] for key in run.data.metrics}
        folder = client.download_artifacts(rid, "", tempfile.mkdtemp())
        artifacts = {os.path.relpath(os.path.join(root, name), folder): _sha(os.path.join(root, name))
                     for root, _, names in os.walk(folder) for name in names}
        out[run.info.run_name] = {"status": run.info.status, "start_time": run.info.start_time, "end_time": run.info.end_time,
                                  "params": run.data.params, "tags": run.data.tags, "metrics": histories, "artifacts": artifacts}
    return out


if __name__ == "__main__":
    mode, raw = sys.argv[1], sys.argv[2]
    result = {"log": log, "intrude": intrude, "lifecycle": lifecycle, "fetch": fetch, "seed": seed,
              "dump": dump}[mode](json.loads(raw))
    print(json.dumps(result))
