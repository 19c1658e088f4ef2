"""Hardware inventory and readings: GPUs through NVML (ctypes against libnvidia-ml.so.1, since
pynvml is not installed), else CPU slots; CPU energy from RAPL where readable."""

from __future__ import annotations

import ctypes
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from agents.protocol import DeviceInfo

log = logging.getLogger("agents.devices")
RAPL_ROOT = Path("/sys/class/powercap")


class _Utilization(ctypes.Structure):
    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]


class _Memory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


@dataclass
class GpuReading:
    index: int
    utilization: float | None
    power_w: float | None
    energy_j: float | None  # the GPU's total energy counter since driver load, if supported


class Nvml:
    """A thin ctypes binding to the few NVML calls the agent needs; absent means no GPUs."""

    def __init__(self) -> None:
        self.lib: ctypes.CDLL | None = None
        self.handles: list[ctypes.c_void_p] = []
        if os.environ.get("TRAINYARD_AGENT_NO_GPU"):
            return
        try:
            lib = ctypes.CDLL("libnvidia-ml.so.1")
        except OSError:
            return
        if lib.nvmlInit_v2() != 0:
            log.warning("libnvidia-ml.so.1 found but nvmlInit failed; offering CPU slots")
            return
        count = ctypes.c_uint(0)
        if lib.nvmlDeviceGetCount_v2(ctypes.byref(count)) != 0:
            return
        for i in range(count.value):
            handle = ctypes.c_void_p()
            if lib.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(i), ctypes.byref(handle)) == 0:
                self.handles.append(handle)
        self.lib = lib

    @property
    def available(self) -> bool:
        return self.lib is not None and bool(self.handles)

    def inventory(self) -> list[DeviceInfo]:
        assert self.lib is not None
        out: list[DeviceInfo] = []
        for i, h in enumerate(self.handles):
            name = ctypes.create_string_buffer(96)
            uuid = ctypes.create_string_buffer(96)
            mem = _Memory()
            self.lib.nvmlDeviceGetName(h, name, ctypes.c_uint(96))
            self.lib.nvmlDeviceGetUUID(h, uuid, ctypes.c_uint(96))
            self.lib.nvmlDeviceGetMemoryInfo(h, ctypes.byref(mem))
            out.append({"index": i, "kind": "gpu", "uuid": uuid.value.decode(errors="replace"),
                        "model": name.value.decode(errors="replace"), "memory_bytes": int(mem.total)})
        return out

    def read(self) -> list[GpuReading]:
        assert self.lib is not None
        out = []
        for i, h in enumerate(self.handles):
            util = _Utilization()
            power = ctypes.c_uint(0)
            energy = ctypes.c_ulonglong(0)
            u = float(util.gpu) if self.lib.nvmlDeviceGetUtilizationRates(h, ctypes.byref(util)) == 0 else None
            p = power.value / 1000.0 if self.lib.nvmlDeviceGetPowerUsage(h, ctypes.byref(power)) == 0 else None
            e = energy.value / 1000.0 if self.lib.nvmlDeviceGetTotalEnergyConsumption(h, ctypes.byref(energy)) == 0 else None
            out.append(GpuReading(index=i, utilization=u, power_w=p, energy_j=e))
        return out


def cpu_inventory(slots: int) -> list[DeviceInfo]:
    model = "CPU slot"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = f"CPU slot ({line.split(':', 1)[1].strip()})"
                break
    except OSError:
        pass  # the model name is cosmetic
    return [{"index": i, "kind": "cpu", "uuid": "", "model": model[:200], "memory_bytes": 0} for i in range(slots)]


def memory_bytes() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return 0
    return 0


def rapl_energy_uj() -> int | None:
    """Sum of the package energy counters, or None where RAPL is absent or unreadable (non-root)."""
    total = 0
    found = False
    for path in sorted(RAPL_ROOT.glob("intel-rapl:*/energy_uj")):
        if path.parent.name.count(":") != 1:
            continue  # sub-zones (core, dram) are parts of their package
        try:
            total += int(path.read_text())
            found = True
        except (OSError, ValueError):
            return None
    return total if found else None
