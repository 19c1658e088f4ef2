"""Acceptance 1: the real MLflow client, with alice's token, logs into a live portal; what it logged
shows in Trainyard's API, run page and compare; with bob's token the same client gets nowhere."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.live import LiveStack

# The first test of a session may create bench/.venv-mlflow (pip install mlflow: minutes on a busy machine).
pytestmark = [pytest.mark.live, pytest.mark.process, pytest.mark.slow, pytest.mark.timeout(1800)]
SCRIPT = Path(__file__).with_name("client_script.py")


def run_client(python: str, mode: str, args: dict[str, Any], *, uri: str, token: str, cwd: Path) -> Any:
    env = {"MLFLOW_TRACKING_URI": uri, "MLFLOW_TRACKING_TOKEN": token, "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0",
           "MLFLOW_HTTP_REQUEST_TIMEOUT": "120", "PATH": "/usr/bin:/bin", "HOME": str(cwd)}
    done = subprocess.run([python, str(SCRIPT), mode, json.dumps(args)], env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, f"{mode}: {done.stderr[-4000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_mlflow_client_logs_into_trainyard_and_tenancy_holds(live_stack: LiveStack, mlflow_python: str, tmp_path: Path) -> None:
    alice, bob = live_stack.token("alice"), live_stack.token("bob")
    artifact = tmp_path / "confusion.csv"
    artifact.write_bytes(b"label,predicted,count\n0,0,98\n0,1,2\n" + bytes(range(256)))
    uri = live_stack.url + "/mlflow"
    got = run_client(mlflow_python, "log", {"experiment": "vision/digits", "artifact": str(artifact)}, uri=uri, token=alice,
                     cwd=tmp_path)
    assert got["status"] == "FINISHED"
    assert got["params"] == {"lr": "0.01", "batch_size": "64", "optimizer": "adam"} and got["tags"] == {"stage": "acceptance"}
    assert len(got["history"]) == 10_000 and got["history"] == got["expected"]
    assert got["artifacts"] == ["plots/confusion.csv"]
    assert got["artifact_sha256"] == hashlib.sha256(artifact.read_bytes()).hexdigest()
    # mlflow.log_input (twice, the same dataset): one input, with its context tag, in get_run's inputs.
    assert got["inputs"] == [["digits-train", got["train_digest"], "code", {"mlflow.data.context": "training"}]], got["inputs"]
    run_id = int(got["run_id"])

    # Trainyard's own API: the run, its metrics, its artifact (through apps.artifacts).
    run = live_stack.api("GET", f"/api/v1/runs/{run_id}/", token=alice)
    assert run["status"] == "succeeded" and run["params"]["lr"] == "0.01" and run["tags"]["stage"] == "acceptance"
    series = live_stack.api("GET", f"/api/v1/runs/{run_id}/metrics/?key=loss&max_points=500", token=alice)
    assert "loss" in json.dumps(series)
    stored = live_stack.manage("shell", "-c", (
        "import hashlib\nfrom apps.runs.models import Run\nfrom apps.artifacts.selectors import artifact_list, artifact_open\n"
        f"run = Run.objects.get(pk={run_id})\n"
        "for a in artifact_list(run=run):\n"
        "    print('ARTIFACT', a.name, hashlib.sha256(artifact_open(artifact=a).read()).hexdigest(), run.tracked_only)\n"))
    lines = [line.split()[1:] for line in stored.stdout.splitlines() if line.startswith("ARTIFACT ")]
    assert lines == [["plots/confusion.csv", got["artifact_sha256"], "True"]], stored.stdout
    # In compare beside a run Trainyard scheduled (the demo's history of vision/digits).
    scheduled = [r for r in live_stack.api("GET", "/api/v1/runs/?project=vision/digits", token=alice)["results"]
                 if r["id"] != run_id]
    assert scheduled, "the demo data has runs of vision/digits"
    compare = live_stack.api("GET", f"/api/v1/compare/?runs={run_id},{scheduled[0]['id']}", token=alice)
    assert run_id in [r["id"] for r in compare["runs"]] and "lr" in json.dumps(compare)
    page = live_stack.browser("alice").open(f"{live_stack.url}/runs/{run_id}/", timeout=60).read().decode()
    assert "stage=acceptance" in page and "0.01" in page and "mlflow-tracked" in page

    # runs/delete and runs/restore: a soft delete, hidden from search unless asked for, audited.
    life = run_client(mlflow_python, "lifecycle", {"experiment": "vision/digits"}, uri=uri, token=alice, cwd=tmp_path)
    assert life["deleted"] == {"stage": "deleted", "active": False, "deleted": True, "all": True,
                               "log_metric": "INVALID_PARAMETER_VALUE"}, life
    assert life["restored"] == {"stage": "active", "active": True, "deleted": False, "all": True}, life
    audited = live_stack.manage("shell", "-c", (
        "from apps.audit.models import AuditEvent\n"
        f"print('ACTIONS', *AuditEvent.objects.filter(object_id='{life['run_id']}', action__startswith='run.mlflow_')"
        ".order_by('pk').values_list('action', flat=True))\n"))
    assert "ACTIONS run.mlflow_deleted run.mlflow_restored" in audited.stdout, audited.stdout

    # Bob: the same client cannot see or write alice's experiment, run or artifact.
    refused = run_client(mlflow_python, "intrude", {"experiment": "vision/digits", "experiment_id": got["experiment_id"],
                                                    "run_id": got["run_id"], "artifact_name": "confusion.csv"},
                         uri=uri, token=bob, cwd=tmp_path)
    assert refused.pop("set_experiment") == "PERMISSION_DENIED"
    for call, outcome in refused.items():
        assert outcome == "RESOURCE_DOES_NOT_EXIST" or "404" in outcome, (call, outcome)
    after = live_stack.api("GET", f"/api/v1/runs/{run_id}/", token=alice)
    assert after["params"]["lr"] == "0.01" and after["tags"]["stage"] == "acceptance" and after["status"] == "succeeded"
    assert live_stack.request("GET", f"/api/v1/runs/{run_id}/", token=bob)[0] == 404
