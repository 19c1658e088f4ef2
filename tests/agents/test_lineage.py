"""Issue 23: the agent captures each attempt's environment itself, in the job's own interpreter,
whatever the job's code does (agents/lineage.py): real probe subprocesses, no server, except the
live test at the end, where a custom entrypoint that never imports the SDK gets a full record."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from agents import lineage
from agents.client import ApiError
from agents.protocol import DeviceInfo
from agents.shipper import Shipper, Spool
from tests.agents.helpers import start_agent, submit, wait_status
from tests.fixtures.live import LiveStack

CPU: list[DeviceInfo] = [{"index": 0, "kind": "cpu", "uuid": "", "model": "CPU slot (test)", "memory_bytes": 0},
       {"index": 1, "kind": "cpu", "uuid": "", "model": "CPU slot (test)", "memory_bytes": 0}]


def spec(**extra: Any) -> Any:
    return {"assignment_id": 5, "attempt_id": 5, "number": 2, "run_id": 9, "node_rank": 1, "world_size": 2, "devices": [1],
            "device_kind": "cpu", "entrypoint": "python train.py", "params": {"seed": 42, "lr": 0.01}, **extra}


def test_collect_probes_the_jobs_interpreter() -> None:
    data = lineage.collect(python=sys.executable, env=dict(os.environ), spec=spec(), devices=CPU, gpu_driver="550.1",
                           cuda_driver="12.4")
    env = data["environment"]
    assert env["python"]["executable"] == sys.executable and env["python"]["implementation"]
    assert env["python"]["version"] == ".".join(map(str, sys.version_info[:3]))
    packages = data["packages"]
    assert packages == sorted(packages) and any(p.startswith("Django==") for p in packages)
    assert data["packages_sha256"] == hashlib.sha256("\n".join(packages).encode()).hexdigest()
    import torch  # installed here: its fields are the job's torch's

    assert env["torch"]["version"] == str(torch.__version__) and env["torch"]["cuda"] == torch.version.cuda
    assert set(env["torch"]) >= {"cudnn", "cuda_available", "devices"}
    assert env["devices"] == [{"kind": "cpu", "index": 1, "model": "CPU slot (test)", "uuid": ""}], "the assigned devices only"
    assert (env["node_rank"], env["seed"], env["params"]) == (1, 42, {"seed": 42, "lr": 0.01})
    assert (env["gpu_driver"], env["cuda_driver"]) == ("550.1", "12.4") and env["hostname"]
    assert not {"probe_error", "torch_error"} & set(env)
    json.dumps(data, allow_nan=False)  # what the agent sends is plain JSON


def test_a_python_without_torch_says_so(tmp_path: Path) -> None:
    python = shutil.which("python3", path="/usr/bin:/bin")
    if python is None or os.path.realpath(python) == os.path.realpath(sys.executable):
        pytest.skip("needs a system python3 beside the venv's")
    env = {"PATH": "/usr/bin:/bin", "TRAINYARD_RUN_DIR": str(tmp_path)}
    data = lineage.collect(python=python, env=env, spec=spec(), devices=CPU)
    environment = data["environment"]
    if "torch_error" not in environment:
        pytest.skip("the system python3 has torch")
    assert environment["torch"] is None and "torch" in environment["torch_error"]
    assert environment["python"]["executable"] == python and "probe_error" not in environment


def test_a_job_file_cannot_shadow_what_the_probe_imports(tmp_path: Path) -> None:
    (tmp_path / "json.py").write_text("raise SystemExit('shadowed')\n")
    data = lineage.collect(python=sys.executable, env={**os.environ, "TRAINYARD_RUN_DIR": str(tmp_path)}, spec=spec(), devices=CPU)
    assert "probe_error" not in data["environment"] and data["packages"]


def test_a_failing_probe_becomes_a_field_not_an_exception(tmp_path: Path) -> None:
    missing = lineage.collect(python=str(tmp_path / "no-python"), env={}, spec=spec(), devices=CPU)
    assert "could not run" in missing["environment"]["probe_error"] and missing["packages"] == []
    assert missing["packages_sha256"] == hashlib.sha256(b"").hexdigest() and missing["environment"]["seed"] == 42
    crash = tmp_path / "crash"
    crash.write_text("#!/bin/sh\necho 'broken interpreter' >&2\nexit 3\n")
    crash.chmod(0o755)
    broken = lineage.collect(python=str(crash), env={}, spec=spec(), devices=CPU)
    assert broken["environment"]["probe_error"] == "the probe exited with 3: broken interpreter"


def test_a_probe_that_hangs_is_stopped_with_what_it_had(tmp_path: Path) -> None:
    slow = tmp_path / "slow-python"
    slow.write_text(f"#!/bin/sh\necho '{lineage.MARK}{{\"part\": \"packages\", \"data\": [\"a==1\"]}}'\nexec sleep 30\n")
    slow.chmod(0o755)
    started = time.monotonic()
    parts = lineage.probe(python=str(slow), env={}, timeout=1)
    assert time.monotonic() - started < 10
    assert parts["packages"] == ["a==1"] and "longer than 1 s" in parts["probe_error"]


def test_the_interpreter_of_an_entrypoint(tmp_path: Path) -> None:
    script = tmp_path / "launch"
    script.write_text("#!/opt/venv/bin/python3.12\nprint()\n")
    env_script = tmp_path / "env-launch"
    env_script.write_text("#!/usr/bin/env python3\nprint()\n")
    assert lineage.interpreter("python train.py") == sys.executable
    assert lineage.interpreter("/opt/py/bin/python3.11 -m train") == "/opt/py/bin/python3.11"
    assert lineage.interpreter(f"{script} --nproc 2") == "/opt/venv/bin/python3.12"
    assert lineage.interpreter(str(env_script)) == "python3"
    assert lineage.interpreter("bash run.sh") == sys.executable


class _Refusing:
    """Stands in for the HTTP client (the server's answer is what is under test)."""

    def __init__(self, code: str) -> None:
        self.code = code

    def request(self, method: str, path: str, body: Any = None, **kwargs: Any) -> Any:
        raise ApiError(409, {"error": {"status": 409, "code": self.code, "message": "refused", "fields": {}}}, path)


def test_a_refused_lineage_does_not_stop_the_job_but_a_stale_attempt_does(tmp_path: Path) -> None:
    stopped: list[int] = []
    shipper = Shipper(_Refusing("lineage_immutable"), Spool(tmp_path / "spool", 1 << 20), interval=1.0,  # type: ignore[arg-type]
                      on_stale=lambda attempt_id, why: stopped.append(attempt_id))
    body = {"attempt_id": 5, "number": 2, "node_rank": 1, "environment": {}, "packages": [], "packages_sha256": "0" * 64}
    shipper._send({"kind": "lineage", "path": "/api/v1/agent/lineage/", "attempt_id": 5, "body": body})
    assert stopped == [] and 5 not in shipper.stale
    shipper.client = _Refusing("stale_attempt")  # type: ignore[assignment]
    shipper._send({"kind": "lineage", "path": "/api/v1/agent/lineage/", "attempt_id": 5, "body": body})
    assert stopped == [5]


def test_report_spools_the_record_for_the_server(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool", 1 << 24)
    shipper = Shipper(None, spool, interval=1.0, on_stale=lambda a, w: None)  # type: ignore[arg-type]
    started = time.monotonic()
    thread = lineage.report(shipper, python=sys.executable, env=dict(os.environ), spec=spec(), devices=CPU)
    assert time.monotonic() - started < 1.0, "the job does not wait for the probe"
    thread.join(60)
    [item] = [json.loads(p.read_text()) for p in spool.items()]
    assert item["kind"] == "lineage" and item["path"] == "/api/v1/agent/lineage/"
    assert set(item["body"]) == {"attempt_id", "number", "node_rank", "environment", "packages", "packages_sha256"}
    assert (item["body"]["attempt_id"], item["body"]["number"], item["body"]["node_rank"]) == (5, 2, 1)


@pytest.mark.live
@pytest.mark.process
def test_a_custom_entrypoint_without_the_sdk_gets_a_full_record(live_stack: LiveStack) -> None:
    live_stack.start_worker()
    start_agent(live_stack, "node-lineage")
    run_id = submit(live_stack, 'python -c "print(1)"', params='{"seed": 11}')
    assert wait_status(live_stack, run_id, {"succeeded", "failed"}, 90)["status"] == "succeeded"
    rows = live_stack.wait_for(lambda: live_stack.query(
        "SELECT e.hostname, e.node_rank, e.environment, p.packages FROM tracking_attemptenvironment e "
        "JOIN tracking_packageset p ON p.id = e.package_set_id JOIN runs_attempt a ON a.id = e.attempt_id WHERE a.run_id=?",
        (run_id,)), 30, "the attempt's environment record")
    [(hostname, rank, environment, packages)] = rows
    env = json.loads(environment) if isinstance(environment, str) else environment
    packages = json.loads(packages) if isinstance(packages, str) else packages
    assert (hostname, rank) == ("node-lineage", 0)
    assert env["python"]["executable"] and env["torch"]["version"] and env["seed"] == 11
    assert env["devices"] and env["devices"][0]["kind"] == "cpu"
    assert any(p.startswith("Django==") for p in packages)
    reported = live_stack.query("SELECT lineage FROM runs_attempt WHERE run_id=?", (run_id,))[0][0]
    assert (json.loads(reported) if isinstance(reported, str) else reported) in ({}, None), "the job reported nothing itself"
