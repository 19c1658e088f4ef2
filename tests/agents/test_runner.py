"""The agent's runner and monitor on real job processes, without a server: max runtime
enforcement (SIGTERM, SIGKILL after the grace period), the final energy sample at exit, and the
checkpoint a resumed attempt starts from."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from agents import monitor as monitor_mod
from agents.config import parse_args
from agents.devices import Nvml
from agents.monitor import Monitor
from agents.runner import Runner, _signal_pids, checkpoints_forget_lost, resumable_step

pytestmark = [pytest.mark.live, pytest.mark.process]

BURN_THEN_EXIT = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.6: pass\n"
IGNORE_TERM = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('up', flush=True)\ntime.sleep(60)\n"
CHECKPOINT_ON_TERM = ("import signal, sys, time\nsignal.signal(signal.SIGTERM, lambda *a: (print('checkpointed', flush=True), "
                      "sys.exit(0)))\ntime.sleep(60)\n")


class FakeShipper:
    """Records what the runner and monitor would send."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.energies: list[dict[str, Any]] = []
        self.rendezvous_reports: list[dict[str, Any]] = []

    def add(self, tail: Any) -> None:
        pass

    def finish(self, attempt_id: int) -> None:
        pass

    def event(self, body: Any) -> None:
        self.events.append(dict(body))

    def energy(self, body: Any) -> None:
        self.energies.append(dict(body))

    def rendezvous(self, body: Any) -> None:
        self.rendezvous_reports.append(dict(body))

    def lineage(self, body: Any) -> None:
        pass


def spec(attempt_id: int, script: Path, *, max_runtime_s: int = 0, grace_s: int = 30, number: int = 1) -> Any:
    return {"assignment_id": attempt_id, "attempt_id": attempt_id, "number": number, "run_id": attempt_id, "node_rank": 0,
            "world_size": 1, "devices": [0], "device_kind": "cpu", "entrypoint": f"python {script}", "params": {},
            "checkpoint_policy": {}, "grace_period_s": grace_s, "max_runtime_s": max_runtime_s, "master_addr": "127.0.0.1",
            "master_port": 29500, "resume_checkpoint": None, "init_checkpoint": None}


@pytest.fixture
def parts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Runner, Monitor, FakeShipper]:
    monkeypatch.setenv("TRAINYARD_AGENT_NO_GPU", "1")
    monkeypatch.setattr(monitor_mod, "rapl_energy_uj", lambda: None)  # the estimate: CPU seconds x watts per core
    config = parse_args(["--workdir", str(tmp_path / "agent"), "--watts-per-core", "10", "--sample-interval", "0.2"])
    shipper = FakeShipper()
    runner = Runner(config, client=None, shipper=shipper)  # type: ignore[arg-type]
    monitor = Monitor(config, runner, shipper, Nvml())  # type: ignore[arg-type]
    runner.on_exit = monitor.finish
    return runner, monitor, shipper


def run_until_exit(runner: Runner, monitor: Monitor | None, shipper: FakeShipper, attempt_id: int, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        runner.launch_ready()
        runner.poll()
        if monitor is not None:
            monitor.sample()
        done = [e for e in shipper.events if e["attempt_id"] == attempt_id and e["event"] == "exited"]
        if done:
            return done[0]
        time.sleep(0.05)
    raise AssertionError(f"attempt {attempt_id} did not exit within {timeout}s: {shipper.events}")


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_max_runtime_sigterm_then_sigkill_after_grace(parts: tuple[Runner, Monitor, FakeShipper], tmp_path: Path) -> None:
    runner, monitor, shipper = parts
    t0 = time.monotonic()
    runner.submit(spec(1, write(tmp_path / "stubborn.py", IGNORE_TERM), max_runtime_s=1, grace_s=1))
    runner.submit(spec(2, write(tmp_path / "polite.py", CHECKPOINT_ON_TERM), max_runtime_s=1, grace_s=30))
    polite = run_until_exit(runner, monitor, shipper, 2, 10)
    stubborn = run_until_exit(runner, monitor, shipper, 1, 10)
    elapsed = time.monotonic() - t0
    assert (polite["exit_code"], polite["signal"], polite["stop_kind"]) == (0, None, "max_runtime")
    assert "checkpointed" in polite["log_tail"]
    assert (stubborn["exit_code"], stubborn["signal"], stubborn["stop_kind"]) == (None, 9, "max_runtime")
    assert 2.0 <= elapsed < 6.0, elapsed  # 1 s runtime + 1 s grace, then SIGKILL
    assert not runner.busy()


def test_final_energy_sample_covers_a_job_shorter_than_the_sampling_interval(parts: tuple[Runner, Monitor, FakeShipper],
                                                                            tmp_path: Path) -> None:
    runner, monitor, shipper = parts
    runner.submit(spec(3, write(tmp_path / "burn.py", BURN_THEN_EXIT)))
    event = run_until_exit(runner, None, shipper, 3, 20)  # no periodic sample ever ran
    assert event["exit_code"] == 0
    [batch] = shipper.energies
    [sample] = batch["samples"]
    # At least the 0.6 s CPU the job burned (plus interpreter start-up) at 10 W per core.
    assert sample["estimated"] and 6.0 <= sample["energy_j"] < 30.0, sample
    assert shipper.events.index(event) == len(shipper.events) - 1  # the energy went out before the exit event


def test_resumable_step_is_the_newest_whole_checkpoint(tmp_path: Path) -> None:
    assert resumable_step(tmp_path) is None
    records = []
    for step, data in ((4, b"four"), (9, b"nine"), (14, b"fourteen")):
        (tmp_path / f"ckpt-{step:010d}.pt").write_bytes(data)
        records.append({"step": step, "file": f"ckpt-{step:010d}.pt", "size": len(data), "sha256": "0" * 64})
    (tmp_path / "ckpt-0000000014.pt").write_bytes(b"torn")  # truncated: not whole
    lines = [json.dumps(r) for r in records] + ['{"step": 19, "file": "ckpt-00']  # a record still being written
    (tmp_path / "checkpoints.jsonl").write_text("\n".join(lines))
    assert resumable_step(tmp_path) == 9
    assert sys.executable  # the runner launches "python" as the agent's own interpreter


def test_checkpoints_a_lost_attempt_wrote_past_the_servers_are_not_resumed_from(tmp_path: Path) -> None:
    """Attempt 1 was declared lost while its job went on writing checkpoints 40 and 60; the
    server's newest stored checkpoint is 20. Attempt 2 must resume from 20 (re-logging 21-60,
    whose metrics the server refused), not from 60."""
    records = []
    for step, attempt in ((20, 1), (40, 1), (60, 1)):
        name = f"ckpt-{step:010d}.pt"
        (tmp_path / name).write_bytes(b"x" * step)
        records.append({"step": step, "file": name, "size": step, "sha256": "0" * 64, "attempt": attempt})
    lines = [json.dumps(r) for r in records] + ['{"step": 80, "file": "ckpt-00']  # torn: left for the SDK to skip
    (tmp_path / "checkpoints.jsonl").write_text("\n".join(lines) + "\n")
    assert checkpoints_forget_lost(tmp_path, lost={2}, after_step=20) == []  # attempt 1 was not lost: nothing to do
    assert resumable_step(tmp_path) == 60
    assert checkpoints_forget_lost(tmp_path, lost={1}, after_step=20) == ["ckpt-0000000040.pt", "ckpt-0000000060.pt"]
    assert resumable_step(tmp_path) == 20
    assert sorted(p.name for p in tmp_path.glob("ckpt-*.pt")) == ["ckpt-0000000020.pt"]
    assert (tmp_path / "checkpoints.jsonl").read_text().splitlines()[-1] == '{"step": 80, "file": "ckpt-00'
    # No checkpoint on the server at all: everything the lost attempt wrote goes.
    assert checkpoints_forget_lost(tmp_path, lost={1}, after_step=-1) == ["ckpt-0000000020.pt"]
    assert resumable_step(tmp_path) is None


def test_a_stop_signals_each_process_once_and_reaches_those_that_left_the_group(monkeypatch: pytest.MonkeyPatch) -> None:
    """The group's signal and the monitor's list of descendants both named the job's processes:
    a job got SIGTERM twice, and ran its checkpoint handler twice or died of the second one."""
    leader = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    left = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    sent: list[tuple[str, int, int]] = []
    monkeypatch.setattr("agents.runner.os.killpg", lambda pgid, sig: sent.append(("group", pgid, sig)))
    monkeypatch.setattr("agents.runner.os.kill", lambda pid, sig: sent.append(("process", pid, sig)))
    try:
        _signal_pids(leader.pid, {leader.pid, left.pid}, signal.SIGTERM)
    finally:
        monkeypatch.undo()
        for proc in (leader, left):
            proc.kill()
            proc.wait()
    assert sent == [("group", leader.pid, signal.SIGTERM), ("process", left.pid, signal.SIGTERM)]
