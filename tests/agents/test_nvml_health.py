"""agents/devices.py's real ctypes code against a fake libnvidia-ml.so.1 (tests/agents/fakenvml):
inventory, energy counters, each fault kind, NOT_SUPPORTED and entry points an older driver lacks.

The agent loads the library by name, and ctypes keeps a loaded library for the life of a process,
so each check runs in a fresh Python process with LD_LIBRARY_PATH pointing at the fake."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.agents.fakenvml import FakeNvml, make

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def fake(tmp_path: Path) -> FakeNvml:
    return make(tmp_path / "fakenvml")


def agent_python(fake: FakeNvml, code: str) -> Any:
    """Run code (which prints one JSON document) in a fresh process that loads the fake."""
    env = {**os.environ, **fake.env()}
    env.pop("TRAINYARD_AGENT_NO_GPU", None)
    done = subprocess.run([sys.executable, "-c", "import json, time\nfrom agents.devices import Nvml\nnvml = Nvml()\n" + code],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


HEALTH = """
print(json.dumps([{"healthy": h.healthy, "reason": h.reason, "ecc": h.ecc_uncorrected, "retired": h.retired_pages_pending,
                   "rows_pending": h.remapped_rows_pending, "rows_failed": h.remapping_failed, "throttle": h.throttle,
                   "memory_used": h.memory_used_bytes} for h in nvml.health()]))
"""


def test_inventory_and_versions(fake: FakeNvml) -> None:
    out = agent_python(fake, "print(json.dumps({'available': nvml.available, 'inventory': nvml.inventory(), "
                             "'driver': nvml.driver_version(), 'cuda': nvml.cuda_driver_version()}))")
    assert out["available"] and out["driver"] == "550.54.15" and out["cuda"] == "12.4"
    inventory = out["inventory"]
    assert [d["index"] for d in inventory] == [0, 1, 2, 3]
    assert [d["uuid"] for d in inventory] == [g.uuid for g in fake.gpus]
    assert all(d["uuid"].startswith("GPU-") and d["kind"] == "gpu" and d["model"] == "NVIDIA H100 80GB HBM3"
               and d["memory_bytes"] == 80 * 2**30 and d["healthy"] and d["health_reason"] == "" for d in inventory)


def test_energy_counters_advance_with_power(fake: FakeNvml) -> None:
    out = agent_python(fake, """
marks = []
for _ in range(2):
    before = time.time()
    readings = nvml.read()
    marks.append({"before": before, "after": time.time(), "energy_j": [r.energy_j for r in readings],
                  "power_w": [r.power_w for r in readings], "util": [r.utilization for r in readings]})
    time.sleep(0.5)
print(json.dumps(marks))
""")
    first, second = out
    assert first["power_w"] == [100.0, 200.0, 300.0, 400.0] and first["util"] == [10.0, 20.0, 30.0, 40.0]
    for i, gpu in enumerate(fake.gpus):
        watts = gpu.power_mw / 1000
        # Each reading lies between what the counter said just before and just after it was taken.
        assert fake.energy_mj(i, first["before"]) / 1000 - 0.01 <= first["energy_j"][i] <= fake.energy_mj(i, first["after"]) / 1000
        delta = second["energy_j"][i] - first["energy_j"][i]
        assert watts * (second["before"] - first["after"]) - 0.01 <= delta <= watts * (second["after"] - first["before"]) + 0.01


def test_each_fault_kind_makes_a_gpu_unhealthy_and_says_why(tmp_path: Path) -> None:
    fake = make(tmp_path / "fakenvml", count=4)
    fake.gpus[0].ecc_uncorrected = 3
    fake.gpus[1].retired_pending = 1
    fake.gpus[2].remapped_failure = 1
    fake.gpus[3].remapped_pending = 1
    fake.write()
    ecc, retired, failed, pending = agent_python(fake, HEALTH)
    assert not ecc["healthy"] and ecc["ecc"] == 3
    assert ecc["reason"] == "3 uncorrectable ECC errors since the driver loaded (volatile); drain the node and reset the GPU"
    assert not retired["healthy"] and retired["retired"] is True and "pages wait to be retired" in retired["reason"]
    assert not failed["healthy"] and failed["rows_failed"] is True and "remapping failed; the GPU needs replacing" in failed["reason"]
    assert not pending["healthy"] and pending["rows_pending"] is True and "rows wait to be remapped" in pending["reason"]


def test_throttling_is_reported_in_words_but_not_a_fault(fake: FakeNvml) -> None:
    fake.gpus[1].throttle = 0x8 | 0x40 | 0x80 | 0x1  # hw slowdown, hw thermal, power brake, idle
    fake.gpus[1].memory_used = 5 * 2**30
    fake.write()
    health = agent_python(fake, HEALTH)
    assert health[1]["healthy"] and health[1]["reason"] == ""
    assert health[1]["throttle"] == ["hardware slowdown", "hardware thermal slowdown", "hardware power brake"]
    assert health[1]["memory_used"] == 5 * 2**30 and health[0]["throttle"] == []


def test_a_lost_gpu_is_unhealthy(fake: FakeNvml) -> None:
    fake.gpus[3].lost = 1
    fake.write()
    health = agent_python(fake, HEALTH)
    assert [h["healthy"] for h in health] == [True, True, True, False]
    assert "the GPU is lost" in health[3]["reason"] and health[3]["ecc"] is None


def test_not_supported_is_unknown_not_a_fault(fake: FakeNvml) -> None:
    for gpu in fake.gpus:
        gpu.ecc_uncorrected = gpu.retired_pending = gpu.remapped = -1
        gpu.energy = 0
    fake.write()
    out = agent_python(fake, "h = nvml.health()[0]; r = nvml.read()[0]\n"
                             "print(json.dumps([h.healthy, h.ecc_uncorrected, h.retired_pages_pending, h.remapped_rows_pending, "
                             "h.remapping_failed, r.energy_j, r.power_w]))")
    assert out == [True, None, None, None, None, None, 100.0]


def test_entry_points_an_older_driver_lacks_are_unknown(tmp_path: Path) -> None:
    fake = make(tmp_path / "fakenvml", count=2, omit=("nvmlDeviceGetRemappedRows", "nvmlDeviceGetRetiredPagesPendingStatus",
                                                       "nvmlDeviceGetCurrentClocksThrottleReasons",
                                                       "nvmlSystemGetCudaDriverVersion_v2"))
    health = agent_python(fake, HEALTH)
    assert [h["healthy"] for h in health] == [True, True]
    assert health[0]["retired"] is None and health[0]["rows_pending"] is None and health[0]["throttle"] is None
    assert health[0]["ecc"] == 0
    assert agent_python(fake, "print(json.dumps(nvml.cuda_driver_version()))") == ""


def test_a_fault_injected_while_running_shows_at_the_next_read(fake: FakeNvml) -> None:
    state = str(fake.state)
    out = agent_python(fake, f"""
before = nvml.health_samples()
state = open({state!r}).read().replace("gpu.2.ecc_uncorrected=0", "gpu.2.ecc_uncorrected=2")
open({state!r} + ".new", "w").write(state)
import os; os.replace({state!r} + ".new", {state!r})
after = nvml.health_samples()
print(json.dumps([before[2], after[2], after[1]["healthy"]]))
""")
    before, after, other = out
    assert before["healthy"] is True and before["ecc_uncorrected"] == 0
    assert after["healthy"] is False and after["ecc_uncorrected"] == 2 and "2 uncorrectable ECC errors" in after["health_reason"]
    assert other is True


def test_no_gpu_when_told_so(fake: FakeNvml) -> None:
    env = {**os.environ, **fake.env(), "TRAINYARD_AGENT_NO_GPU": "1"}
    done = subprocess.run([sys.executable, "-c", "from agents.devices import Nvml; n = Nvml(); "
                           "print(n.available, repr(n.driver_version()))"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.stdout.split() == ["False", "''"], done.stderr
