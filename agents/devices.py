"""Hardware inventory and readings: GPUs through NVML (ctypes against libnvidia-ml.so.1, since
pynvml is not installed), else CPU slots; CPU energy from RAPL where readable."""

from __future__ import annotations

import ctypes
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from agents import protocol
from agents.protocol import DeviceInfo

log = logging.getLogger("agents.devices")
RAPL_ROOT = Path("/sys/class/powercap")

NVML_SUCCESS = 0
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_FUNCTION_NOT_FOUND = 13  # also what a call answers here when the library lacks it
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0
# nvmlClocksThrottleReasons bits worth a word (idle, application clocks and sync boost are not).
THROTTLE_REASONS = (
    (0x8, "hardware slowdown"),
    (0x40, "hardware thermal slowdown"),
    (0x80, "hardware power brake"),
    (0x20, "software thermal slowdown"),
    (0x4, "software power cap"),
)


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


@dataclass
class GpuHealth:
    """One GPU's faults as NVML reports them; None where the GPU or driver does not say (unknown,
    not a fault). `healthy` is False on a fault that corrupts or stops a job until the GPU is reset
    or replaced; throttling is reported but is not one."""

    index: int
    healthy: bool
    reason: str  # plain words: what is wrong and what an administrator does about it; "" if healthy
    ecc_uncorrected: int | None = None  # volatile: since the driver loaded
    retired_pages_pending: bool | None = None
    remapped_rows_pending: bool | None = None
    remapping_failed: bool | None = None
    throttle: list[str] | None = None
    memory_used_bytes: int | None = None


def health_verdict(h: GpuHealth, *, lost: bool = False) -> GpuHealth:
    """Decide `healthy` and `reason` from the readings: any fatal fault makes the GPU unhealthy."""
    faults = []
    if lost:
        faults.append("the GPU is lost (it fell off the bus or stopped answering the driver); reboot the node")
    if h.ecc_uncorrected:
        faults.append(f"{h.ecc_uncorrected} uncorrectable ECC error{'s' if h.ecc_uncorrected != 1 else ''} since the driver "
                      "loaded (volatile); drain the node and reset the GPU")
    if h.remapping_failed:
        faults.append("memory row remapping failed; the GPU needs replacing")
    elif h.remapped_rows_pending:
        faults.append("memory rows wait to be remapped; drain the node and reset the GPU")
    if h.retired_pages_pending:
        faults.append("memory pages wait to be retired; drain the node and reset the GPU")
    h.healthy = not faults
    h.reason = "; ".join(faults)
    return h


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
            health = self._health(i, h)
            out.append({"index": i, "kind": "gpu", "uuid": uuid.value.decode(errors="replace"),
                        "model": name.value.decode(errors="replace"), "memory_bytes": int(mem.total),
                        "healthy": health.healthy, "health_reason": health.reason})
        return out

    def health_samples(self) -> dict[int, protocol.DeviceSample]:
        """Every GPU's health as the heartbeat reports it (merged into the monitor's readings)."""
        out: dict[int, protocol.DeviceSample] = {}
        for h in self.health():
            out[h.index] = {"index": h.index, "utilization": None, "power_w": None, "healthy": h.healthy,
                            "health_reason": h.reason, "memory_used_bytes": h.memory_used_bytes,
                            "ecc_uncorrected": h.ecc_uncorrected, "throttle": h.throttle}
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

    def _call(self, name: str, *args: object) -> int:
        """An NVML call by name; NVML_ERROR_FUNCTION_NOT_FOUND where this libnvidia-ml lacks it
        (an older driver), so a missing function reads as unknown, never as a fault."""
        fn = getattr(self.lib, name, None) if self.lib is not None else None
        if fn is None:
            return NVML_ERROR_FUNCTION_NOT_FOUND
        return int(fn(*args))

    def health(self) -> list[GpuHealth]:
        """Every GPU's faults: read on each heartbeat, so a fault reaches the server in the next one."""
        return [self._health(i, h) for i, h in enumerate(self.handles)]

    def _health(self, index: int, handle: ctypes.c_void_p) -> GpuHealth:
        h = GpuHealth(index=index, healthy=True, reason="")
        codes = []
        ecc = ctypes.c_ulonglong(0)
        codes.append(rc := self._call("nvmlDeviceGetTotalEccErrors", handle, ctypes.c_int(NVML_MEMORY_ERROR_TYPE_UNCORRECTED),
                                      ctypes.c_int(NVML_VOLATILE_ECC), ctypes.byref(ecc)))
        h.ecc_uncorrected = int(ecc.value) if rc == NVML_SUCCESS else None
        pending = ctypes.c_int(0)
        codes.append(rc := self._call("nvmlDeviceGetRetiredPagesPendingStatus", handle, ctypes.byref(pending)))
        h.retired_pages_pending = bool(pending.value) if rc == NVML_SUCCESS else None
        corr, unc, is_pending, failed = (ctypes.c_uint(0) for _ in range(4))
        codes.append(rc := self._call("nvmlDeviceGetRemappedRows", handle, ctypes.byref(corr), ctypes.byref(unc),
                                      ctypes.byref(is_pending), ctypes.byref(failed)))
        if rc == NVML_SUCCESS:
            h.remapped_rows_pending, h.remapping_failed = bool(is_pending.value), bool(failed.value)
        reasons = ctypes.c_ulonglong(0)
        codes.append(rc := self._call("nvmlDeviceGetCurrentClocksThrottleReasons", handle, ctypes.byref(reasons)))
        h.throttle = [word for bit, word in THROTTLE_REASONS if reasons.value & bit] if rc == NVML_SUCCESS else None
        mem = _Memory()
        codes.append(rc := self._call("nvmlDeviceGetMemoryInfo", handle, ctypes.byref(mem)))
        h.memory_used_bytes = int(mem.used) if rc == NVML_SUCCESS else None
        return health_verdict(h, lost=NVML_ERROR_GPU_IS_LOST in codes)

    def driver_version(self) -> str:
        """The NVIDIA driver's version ("550.54.15"), or "" where unknown."""
        buf = ctypes.create_string_buffer(96)
        if self._call("nvmlSystemGetDriverVersion", buf, ctypes.c_uint(96)) != NVML_SUCCESS:
            return ""
        return buf.value.decode(errors="replace")

    def cuda_driver_version(self) -> str:
        """The CUDA version the driver supports ("12.4"), or "" where unknown."""
        version = ctypes.c_int(0)
        rc = self._call("nvmlSystemGetCudaDriverVersion_v2", ctypes.byref(version))
        if rc == NVML_ERROR_FUNCTION_NOT_FOUND:
            rc = self._call("nvmlSystemGetCudaDriverVersion", ctypes.byref(version))
        if rc != NVML_SUCCESS or version.value <= 0:
            return ""
        return f"{version.value // 1000}.{version.value % 1000 // 10}"


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
