"""The sampling thread: which processes belong to each job, their CPU time, device readings and
energy per attempt (NVML energy counters; else RAPL shared by CPU time; else CPU time x watts
per core, marked estimated).

Energy samples are cumulative per attempt. When a job exits, `finish` adds the interval since
the last sample (from the job's final CPU time, or the GPU counters read at exit) and ships one
last sample, so the attempt's total is its last sample and no tail of the run goes unmeasured.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass, field

from agents import protocol
from agents.config import Config
from agents.devices import GpuReading, Nvml, rapl_energy_uj
from agents.runner import Job, Runner
from agents.shipper import Shipper

log = logging.getLogger("agents.monitor")
CLK_TCK = os.sysconf("SC_CLK_TCK")


@dataclass
class ProcInfo:
    ppid: int
    pgid: int
    cpu_s: float


def scan_procs() -> dict[int, ProcInfo]:
    out: dict[int, ProcInfo] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                raw = fh.read()
        except OSError:
            continue  # exited meanwhile
        rest = raw[raw.rfind(b")") + 2:].split()
        try:
            out[int(name)] = ProcInfo(ppid=int(rest[1]), pgid=int(rest[2]), cpu_s=(int(rest[11]) + int(rest[12])) / CLK_TCK)
        except (IndexError, ValueError):
            continue
    return out


def job_tree(root: int, procs: dict[int, ProcInfo]) -> set[int]:
    """The root's descendants by parentage plus anything still in its process group."""
    children: dict[int, list[int]] = {}
    for pid, info in procs.items():
        children.setdefault(info.ppid, []).append(pid)
    tree = {pid for pid, info in procs.items() if info.pgid == root}
    seen: set[int] = set()
    stack = [root]
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in seen:
                seen.add(child)
                stack.append(child)
    tree |= seen
    tree.discard(root)
    return tree


@dataclass
class DeviceEnergy:
    """One GPU's share of an attempt: its energy since the attempt started and its last readings."""

    energy_j: float = 0.0
    power_w: float | None = None
    utilization: float | None = None


@dataclass
class AttemptEnergy:
    energy_j: float = 0.0
    gpu_start: dict[int, float] = field(default_factory=dict)
    # GPU jobs: per device (shipped one sample per device; energy_j is their sum).
    devices: dict[int, DeviceEnergy] = field(default_factory=dict)
    last_cpu_s: float = 0.0
    estimated: bool = False
    updated: float = field(default_factory=time.monotonic)  # when energy_j was last brought up to date
    last_at: float = 0.0  # unix time of the last sample shipped (samples are unique per time)
    finished: bool = False


class Monitor:
    def __init__(self, config: Config, runner: Runner, shipper: Shipper, nvml: Nvml) -> None:
        self.config = config
        self.runner = runner
        self.shipper = shipper
        self.nvml = nvml
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="monitor", daemon=True)
        self.lock = threading.Lock()
        self.device_samples: list[protocol.DeviceSample] = []
        self.energy: dict[int, AttemptEnergy] = {}
        self._rapl = rapl_energy_uj()
        self._total_cpu = self._machine_cpu_s()
        self._rapl_j_per_cpu_s: float | None = None  # from the last RAPL window, for a job's final interval
        self._last_energy_ship = time.monotonic()

    def start(self) -> None:
        self.thread.start()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)

    def samples(self) -> list[protocol.DeviceSample]:
        """The last readings, with each GPU's health read now: a fault shows in the next heartbeat,
        not one sampling interval later."""
        with self.lock:
            readings = list(self.device_samples)
        health = self.nvml.health_samples() if self.nvml.available else {}
        out: list[protocol.DeviceSample] = []
        for reading in readings:
            merged = health.pop(reading["index"], None)
            if merged is None:
                out.append(reading)
                continue
            merged["utilization"], merged["power_w"] = reading["utilization"], reading["power_w"]
            out.append(merged)
        out.extend(health.values())  # before the first sample
        return sorted(out, key=lambda s: s["index"])

    @staticmethod
    def _machine_cpu_s() -> float:
        try:
            with open("/proc/stat") as fh:
                fields = fh.readline().split()[1:]
            return sum(int(x) for x in fields[:3] + fields[5:8]) / CLK_TCK  # user nice system irq softirq steal
        except (OSError, ValueError):
            return 0.0

    def _loop(self) -> None:
        while not self.stop.wait(self.config.sample_interval_s):
            try:
                self.sample()
            except OSError as err:
                log.error("sampling failed: %s", err)

    def sample(self) -> None:
        interval = self.config.sample_interval_s
        procs = scan_procs()
        with self.runner.lock:
            jobs = list(self.runner.jobs.values())
        gpu = {r.index: r for r in self.nvml.read()} if self.nvml.available else {}
        rapl = rapl_energy_uj()
        total_cpu = self._machine_cpu_s()
        rapl_j = (rapl - self._rapl) / 1e6 if rapl is not None and self._rapl is not None and rapl >= self._rapl else None
        cpu_delta_total = max(1e-6, total_cpu - self._total_cpu)
        self._rapl, self._total_cpu = rapl, total_cpu
        if rapl_j is not None and total_cpu > 0:
            self._rapl_j_per_cpu_s = rapl_j / cpu_delta_total
        samples: dict[int, protocol.DeviceSample] = {}
        for job in jobs:
            tree = job_tree(job.proc.pid, procs)
            inner = job.container.pid() if job.container is not None else 0
            if inner and inner in procs:  # in a container: its processes are the engine's children, not ours
                tree |= {inner} | job_tree(inner, procs)
            root = procs.get(job.proc.pid)
            cpu = (root.cpu_s if root else 0.0) + sum(procs[p].cpu_s for p in tree if p in procs)
            self.runner.update_tree(job.attempt_id, tree, cpu)
            with self.lock:
                acc = self.energy.setdefault(job.attempt_id, AttemptEnergy())
                if acc.finished:
                    continue  # finish() took the last reading
                cpu_delta = max(0.0, cpu - acc.last_cpu_s)
                acc.last_cpu_s = max(acc.last_cpu_s, cpu)
                if job.spec.get("device_kind") == "gpu" and gpu:
                    self._add_gpu(job, acc, gpu)
                elif rapl_j is not None:
                    acc.energy_j += rapl_j * min(1.0, cpu_delta / cpu_delta_total)
                else:
                    acc.energy_j += cpu_delta * self.config.watts_per_core
                    acc.estimated = True
                acc.updated = time.monotonic()
            if job.spec.get("device_kind") != "gpu":
                for d in job.spec["devices"]:
                    samples[d] = {"index": d, "utilization": round(100.0 * cpu_delta / interval / max(1, len(job.spec["devices"])), 1),
                                  "power_w": round(cpu_delta / interval * self.config.watts_per_core, 2)}
        for r in gpu.values():
            samples[r.index] = {"index": r.index, "utilization": r.utilization, "power_w": r.power_w}
        if not self.nvml.available:
            # A CPU slot is measured through its job: an idle one reports no reading, so the last
            # job's figures do not stay on the server as if the slot were still busy.
            for index in range(self.config.slots):
                samples.setdefault(index, {"index": index, "utilization": None, "power_w": None})
        with self.lock:
            self.device_samples = sorted(samples.values(), key=lambda s: s["index"])
        live = {j.attempt_id for j in jobs}
        if time.monotonic() - self._last_energy_ship >= self.config.energy_interval_s:
            self._last_energy_ship = time.monotonic()
            for job in jobs:
                self.ship_energy(job.attempt_id, job.spec["number"])
        with self.lock:
            for gone in [a for a, acc in self.energy.items() if a not in live and acc.finished]:
                self.energy.pop(gone, None)

    def _add_gpu(self, job: Job, acc: AttemptEnergy, gpu: dict[int, GpuReading]) -> None:
        """Per device: its NVML energy counter's delta where it has one, else its power integrated
        since the last update (estimated); the attempt's energy is the sum over its devices."""
        elapsed = max(0.0, time.monotonic() - acc.updated)
        for d in job.spec["devices"]:
            r = gpu.get(d)
            if r is None:
                continue
            dev = acc.devices.setdefault(d, DeviceEnergy())
            if r.energy_j is not None:
                acc.gpu_start.setdefault(d, r.energy_j)
                dev.energy_j = max(dev.energy_j, r.energy_j - acc.gpu_start[d])
            elif r.power_w is not None:
                dev.energy_j += r.power_w * elapsed  # no counter: integrate power samples
                acc.estimated = True
            dev.power_w, dev.utilization = r.power_w, r.utilization
        acc.energy_j = max(acc.energy_j, sum(dev.energy_j for dev in acc.devices.values()))

    def finish(self, job: Job) -> None:
        """The job exited: account for the time since the last sample and ship the final total."""
        with self.lock:
            acc = self.energy.setdefault(job.attempt_id, AttemptEnergy())
            if acc.finished:
                return
            acc.finished = True
            if job.spec.get("device_kind") == "gpu" and self.nvml.available:
                try:
                    self._add_gpu(job, acc, {r.index: r for r in self.nvml.read()})
                except OSError as err:
                    log.error("attempt %d: reading GPU energy at exit failed: %s", job.attempt_id, err)
            else:
                final_cpu = max(job.cpu_s, job.exit_cpu_s or 0.0)
                cpu_delta = max(0.0, final_cpu - acc.last_cpu_s)
                acc.last_cpu_s = max(acc.last_cpu_s, final_cpu)
                if self._rapl is not None and self._rapl_j_per_cpu_s is not None:
                    acc.energy_j += cpu_delta * self._rapl_j_per_cpu_s
                else:
                    acc.energy_j += cpu_delta * self.config.watts_per_core
                    acc.estimated = True
        self.ship_energy(job.attempt_id, job.spec["number"], final=True)

    def ship_energy(self, attempt_id: int, number: int, *, final: bool = False) -> None:
        with self.lock:
            acc = self.energy.get(attempt_id)
            if acc is None or (acc.finished and not final):
                return
            at = max(round(time.time(), 3), round(acc.last_at + 0.001, 3))
            acc.last_at = at
            samples: list[protocol.EnergySampleMsg]
            if acc.devices:
                samples = [{"device_index": d, "at": at, "power_w": dev.power_w, "energy_j": round(dev.energy_j, 3),
                            "utilization": dev.utilization, "estimated": acc.estimated} for d, dev in sorted(acc.devices.items())]
            else:  # CPU slots: the job's CPU time is measured for the whole node's share
                samples = [{"device_index": -1, "at": at, "power_w": None, "energy_j": round(acc.energy_j, 3),
                            "utilization": None, "estimated": acc.estimated}]
        self.shipper.energy({"attempt_id": attempt_id, "number": number, "samples": samples})
