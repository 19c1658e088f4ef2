"""One process per device (agents.launch) on real processes, without a server: torchrun's
variables per rank, logs tagged by rank, a failing rank stopping its node's other ranks, and the
rendezvous port that steps aside when the first choice is taken."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from typing import Any

import pytest

from agents.monitor import Monitor
from agents.runner import Runner, free_port
from tests.agents import test_runner
from tests.agents.test_runner import FakeShipper, run_until_exit, spec, write

parts = test_runner.parts  # the runner, monitor and recording shipper, as a fixture

pytestmark = [pytest.mark.live, pytest.mark.process]

PRINT_ENV = ("import json, os\nkeys = ['RANK', 'LOCAL_RANK', 'LOCAL_WORLD_SIZE', 'WORLD_SIZE', 'GROUP_RANK', 'MASTER_ADDR', "
             "'MASTER_PORT', 'CUDA_VISIBLE_DEVICES']\nprint(json.dumps({k: os.environ.get(k) for k in keys}))\n")
RANK1_FAILS = ("import os, signal, sys, time\nrank = int(os.environ['RANK'])\n"
               "signal.signal(signal.SIGTERM, lambda *a: (print(f'rank {rank} stopping', flush=True), sys.exit(0)))\n"
               "if rank == 1:\n    time.sleep(0.5)\n    raise ValueError('bad batch on rank 1')\ntime.sleep(60)\n")


def gang_spec(attempt_id: int, script: Path, *, devices: list[int], node_rank: int = 0, nnodes: int = 1,
              launch: str = "per_device", grace_s: int = 5) -> Any:
    s = spec(attempt_id, script, grace_s=grace_s)
    local = 1 if launch == "per_node" else len(devices)
    s.update({"devices": devices, "node_rank": node_rank, "nnodes": nnodes, "local_world_size": local,
              "world_size": nnodes * local, "launch": launch})
    return s


def rank_logs(tmp_path: Path, attempt_id: int) -> dict[int, str]:
    logs = {}
    for path in (tmp_path / "agent" / "runs" / str(attempt_id)).glob("a1-r*/agent/rank*.stdout.log"):
        logs[int(path.name.split(".")[0].removeprefix("rank"))] = path.read_text()
    return logs


def test_one_process_per_device_with_torchrun_variables(parts: tuple[Runner, Monitor, FakeShipper], tmp_path: Path) -> None:
    runner, monitor, shipper = parts
    # Node rank 1 waits for rank 0's port from the server: here, a client that knows it.
    runner.client = _RendezvousClient(port=29876)  # type: ignore[assignment]
    runner.submit(gang_spec(11, write(tmp_path / "env.py", PRINT_ENV), devices=[0, 1, 2], node_rank=1, nnodes=2))
    event = run_until_exit(runner, monitor, shipper, 11, 20)
    assert (event["exit_code"], event["signal"], event["failed_rank"]) == (0, None, None)
    assert sorted(r["rank"] for r in event["ranks"]) == [3, 4, 5]
    envs = {rank: json.loads(text) for rank, text in rank_logs(tmp_path, 11).items()}
    assert sorted(envs) == [3, 4, 5], "one log per rank, named by its global rank"
    for local, rank in enumerate([3, 4, 5]):
        assert envs[rank] == {"RANK": str(rank), "LOCAL_RANK": str(local), "LOCAL_WORLD_SIZE": "3", "WORLD_SIZE": "6",
                              "GROUP_RANK": "1", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29876", "CUDA_VISIBLE_DEVICES": ""}


def test_per_node_launch_starts_one_process(parts: tuple[Runner, Monitor, FakeShipper], tmp_path: Path) -> None:
    runner, monitor, shipper = parts
    runner.submit(gang_spec(12, write(tmp_path / "env.py", PRINT_ENV), devices=[0, 1], launch="per_node"))
    event = run_until_exit(runner, monitor, shipper, 12, 20)
    assert [r["rank"] for r in event["ranks"]] == [0]
    [env] = [json.loads(t) for t in rank_logs(tmp_path, 12).values()]
    assert (env["RANK"], env["LOCAL_WORLD_SIZE"], env["WORLD_SIZE"]) == ("0", "1", "1")


def test_a_failing_rank_stops_the_others_and_is_reported(parts: tuple[Runner, Monitor, FakeShipper], tmp_path: Path) -> None:
    runner, monitor, shipper = parts
    t0 = time.monotonic()
    runner.submit(gang_spec(13, write(tmp_path / "fail.py", RANK1_FAILS), devices=[0, 1, 2], grace_s=5))
    event = run_until_exit(runner, monitor, shipper, 13, 30)
    assert time.monotonic() - t0 < 10, "the others were stopped at once, not after their 60 s sleep"
    assert (event["exit_code"], event["signal"], event["failed_rank"]) == (1, None, 1)
    assert "ValueError: bad batch on rank 1" in event["log_tail"]
    others = {r["rank"]: r for r in event["ranks"] if r["rank"] != 1}
    assert all(r["exit_code"] == 0 for r in others.values()), others  # they caught SIGTERM and left cleanly
    logs = rank_logs(tmp_path, 13)
    assert "rank 0 stopping" in logs[0] and "rank 2 stopping" in logs[2]


def test_rank_zero_reports_a_free_port_when_its_first_choice_is_taken(parts: tuple[Runner, Monitor, FakeShipper],
                                                                       tmp_path: Path) -> None:
    runner, monitor, shipper = parts
    with socket.socket() as taken:
        taken.bind(("", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        assert free_port(busy) != busy
        s = gang_spec(14, write(tmp_path / "env.py", PRINT_ENV), devices=[0])
        s["master_port"] = busy
        runner.submit(s)
        run_until_exit(runner, monitor, shipper, 14, 20)
    [report] = shipper.rendezvous_reports
    [env] = [json.loads(t) for t in rank_logs(tmp_path, 14).values()]
    assert report["master_port"] != busy and env["MASTER_PORT"] == str(report["master_port"])


class _RendezvousClient:
    """Answers the rendezvous poll as the server does once rank 0 has reported (the second ask)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.asked = 0

    def request(self, method: str, path: str, body: Any = None, **kwargs: Any) -> Any:
        assert path.endswith("/rendezvous/") and body["node_rank"] == 1
        self.asked += 1
        return {"master_addr": "10.0.0.1", "master_port": self.port if self.asked > 1 else None}


PRINT_SECRETS = ("import json, os\nkeys = ['DATABASE_URL', 'TRAINYARD_SECRET_KEYS', 'TRAINYARD_AGENT_JOIN_TOKEN', 'REDIS_URL', "
                 "'OMP_NUM_THREADS', 'NCCL_DEBUG']\nprint(json.dumps({k: os.environ.get(k) for k in keys}))\n")


def test_a_job_gets_none_of_the_agents_own_settings(parts: tuple[Runner, Monitor, FakeShipper], tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    runner, monitor, shipper = parts
    for name, value in {"DATABASE_URL": "postgres://u:pw@db/ty", "TRAINYARD_SECRET_KEYS": "vault-key", "REDIS_URL": "redis://r",
                        "TRAINYARD_AGENT_JOIN_TOKEN": "tyj_token", "OMP_NUM_THREADS": "3", "NCCL_DEBUG": "INFO"}.items():
        monkeypatch.setenv(name, value)
    runner.submit(gang_spec(15, write(tmp_path / "env.py", PRINT_SECRETS), devices=[0]))
    run_until_exit(runner, monitor, shipper, 15, 20)
    [env] = [json.loads(t) for t in rank_logs(tmp_path, 15).values()]
    assert env == {"DATABASE_URL": None, "TRAINYARD_SECRET_KEYS": None, "TRAINYARD_AGENT_JOIN_TOKEN": None, "REDIS_URL": None,
                   "OMP_NUM_THREADS": "3", "NCCL_DEBUG": "INFO"}
