"""A fake libnvidia-ml.so.1 (fake_nvml.c, built with gcc) so the agent's real ctypes code runs on
machines without a GPU: tests set LD_LIBRARY_PATH to its folder and FAKE_NVML_STATE to a state
file they rewrite to inject faults. A mock of what cannot run here (a GPU), and it says so."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

SOURCE = Path(__file__).with_name("fake_nvml.c")
POWER_MW = (100_000, 200_000, 300_000, 400_000)  # distinct, so a sum tells which GPUs it counted


def build(folder: Path, *, omit: tuple[str, ...] = ()) -> Path:
    """Compile the fake into folder/libnvidia-ml.so.1, leaving out the named entry points."""
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.fail("gcc is needed to build the fake libnvidia-ml.so.1 (apt-get install gcc)")
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / "libnvidia-ml.so.1"
    subprocess.run([gcc, "-shared", "-fPIC", "-O1", "-Wall", "-Werror", *[f"-DOMIT_{name}" for name in omit],
                    "-o", str(out), str(SOURCE), "-lpthread"], check=True, capture_output=True, text=True)
    return out


@dataclass
class FakeGpu:
    name: str
    uuid: str
    power_mw: int
    memory_total: int = 80 * 2**30
    memory_used: int = 0
    utilization: int = 0
    energy: int = 1
    ecc_uncorrected: int = 0  # -1: not supported
    retired_pending: int = 0  # -1: not supported
    remapped: int = 1  # -1: not supported
    remapped_pending: int = 0
    remapped_failure: int = 0
    throttle: int = 0
    lost: int = 0


@dataclass
class FakeNvml:
    """The fake library's folder and state; `write()` after changing `gpus` (atomically: the
    library reads the file on every call)."""

    folder: Path
    state: Path
    gpus: list[FakeGpu] = field(default_factory=list)
    epoch: float = field(default_factory=lambda: float(int(time.time())))
    driver_version: str = "550.54.15"
    cuda_driver_version: int = 12040

    def write(self) -> None:
        lines = [f"count={len(self.gpus)}", f"epoch={self.epoch}", f"driver_version={self.driver_version}",
                 f"cuda_driver_version={self.cuda_driver_version}"]
        for i, gpu in enumerate(self.gpus):
            lines += [f"gpu.{i}.{key}={value}" for key, value in vars(gpu).items()]
        tmp = self.state.with_suffix(".tmp")
        tmp.write_text("\n".join(lines) + "\n")
        os.replace(tmp, self.state)

    def energy_mj(self, index: int, at: float) -> float:
        """What GPU `index`'s energy counter read at unix time `at`."""
        return self.gpus[index].power_mw * max(0.0, at - self.epoch)

    def env(self) -> dict[str, str]:
        """The environment a process needs to load the fake by name, as the agent does."""
        return {"LD_LIBRARY_PATH": f"{self.folder}:{os.environ.get('LD_LIBRARY_PATH', '')}".rstrip(":"),
                "FAKE_NVML_STATE": str(self.state), "TRAINYARD_AGENT_NO_GPU": ""}


def make(folder: Path, count: int = 4, *, omit: tuple[str, ...] = ()) -> FakeNvml:
    build(folder / "lib", omit=omit)
    fake = FakeNvml(folder=folder / "lib", state=folder / "nvml-state")
    fake.gpus = [FakeGpu(name="NVIDIA H100 80GB HBM3", uuid=f"GPU-{i:08x}-1111-2222-3333-44445555{i:04x}",
                         power_mw=POWER_MW[i % len(POWER_MW)], utilization=10 * (i + 1)) for i in range(count)]
    fake.write()
    return fake

