"""Acceptance 2: `trainyard import-mlflow` copies an experiment from a real `mlflow server`
(sqlite backend, --serve-artifacts) into a project, every value intact, and a second import
copies nothing twice."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.live import ROOT, LiveStack
from tests.fixtures.services import free_port
from tests.mlflow.test_client import run_client

# The first test of a session may create bench/.venv-mlflow (pip install mlflow: minutes on a busy machine).
pytestmark = [pytest.mark.live, pytest.mark.process, pytest.mark.slow, pytest.mark.timeout(1800)]


@pytest.fixture
def mlflow_server(mlflow_python: str, tmp_path: Path) -> Iterator[str]:
    port = free_port()
    folder = tmp_path / "mlflow-server"
    folder.mkdir()
    mlflow = str(Path(mlflow_python).with_name("mlflow"))
    log = open(folder / "server.log", "wb")
    proc = subprocess.Popen([mlflow, "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
                             "--backend-store-uri", f"sqlite:///{folder / 'mlflow.db'}", "--serve-artifacts",
                             "--artifacts-destination", str(folder / "artifacts")],
                            cwd=folder, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                            env={"PATH": f"{Path(mlflow_python).parent}:/usr/bin:/bin", "HOME": str(folder)})
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, proc, folder / "server.log")
        yield url
    finally:
        os.killpg(proc.pid, 15)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait(timeout=30)
        log.close()


def _wait_healthy(url: str, proc: subprocess.Popen[bytes], log: Path, timeout: float = 240) -> None:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"mlflow server exited: {log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=5) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"mlflow server not healthy after {timeout}s: {log.read_text()[-3000:]}")


def trainyard(*args: str, server: str, token: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TRAINYARD_SERVER": server, "TRAINYARD_TOKEN": token, "HOME": str(home), "PYTHONPATH": str(ROOT / "sdk")}
    return subprocess.run([sys.executable, "-m", "trainyard.cli", *args], env=env, capture_output=True, text=True, timeout=600)


def test_import_mlflow_moves_an_experiment_intact(live_stack: LiveStack, mlflow_server: str, mlflow_python: str,
                                                  tmp_path: Path) -> None:
    run_client(mlflow_python, "seed", {"experiment": "small"}, uri=mlflow_server, token="", cwd=tmp_path)
    source = run_client(mlflow_python, "dump", {"experiment": "small"}, uri=mlflow_server, token="", cwd=tmp_path)
    assert sorted(source) == ["run-0", "run-1"] and source["run-0"]["artifacts"]  # the seed logged what it should

    alice = live_stack.token("alice")
    done = trainyard("import-mlflow", "--from", mlflow_server, "--experiment", "small", "--project", "vision/digits", "--json",
                     server=live_stack.url, token=alice, home=tmp_path)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["runs"] == 2 and summary["metric_points"] == 2 * 255 and summary["artifacts"] == 4 and not summary["warnings"]

    copied = run_client(mlflow_python, "dump", {"experiment": "vision/digits"}, uri=live_stack.url + "/mlflow", token=alice,
                        cwd=tmp_path)
    copied = {name: run for name, run in copied.items() if name in source}
    assert sorted(copied) == ["run-0", "run-1"]
    for name, want in source.items():
        got: dict[str, Any] = copied[name]
        assert got["tags"].pop("trainyard.mlflow_source").startswith(mlflow_server + " ")
        for key in ("status", "start_time", "end_time", "params", "metrics", "artifacts"):
            assert got[key] == want[key], (name, key)
        assert got["tags"] == want["tags"], name
    statuses = {r["name"]: r["status"] for r in live_stack.api("GET", "/api/v1/runs/?project=vision/digits", token=alice)["results"]}
    assert statuses["run-0"] == "succeeded" and statuses["run-1"] == "failed"

    again = trainyard("import-mlflow", "--from", mlflow_server, "--experiment", "small", "--project", "vision/digits", "--json",
                      server=live_stack.url, token=alice, home=tmp_path)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["runs"] == 0 and json.loads(again.stdout)["skipped"] == 2
    refused = trainyard("import-mlflow", "--from", mlflow_server, "--experiment", "small", "--project", "vision/digits",
                        server=live_stack.url, token=live_stack.token("bob"), home=tmp_path)
    assert refused.returncode == 4 and "vision/digits" in refused.stderr
