"""CPU accounting for benchmarks on a shared machine: how much CPU our own processes used
(server, database, clients) and how busy the whole machine was meanwhile, so a figure taken
while other work ran can be told apart from one taken on a quiet machine."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import psutil


def tree_cpu(pid: int | None) -> float:
    """CPU seconds of a process, its live descendants, and the children it has already reaped
    (PostgreSQL backends that ended, for instance)."""
    if pid is None:
        return 0.0
    try:
        root = psutil.Process(pid)
        t = root.cpu_times()
        total = t.user + t.system + t.children_user + t.children_system
        for child in root.children(recursive=True):
            try:
                c = child.cpu_times()
                total += c.user + c.system
            except psutil.NoSuchProcess:
                pass
        return total
    except psutil.NoSuchProcess:
        return 0.0


def machine_busy() -> float:
    """CPU seconds the whole machine has spent not idle, from /proc/stat."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


@dataclass
class Window:
    """CPU used between start() and stop() by each named process tree, and by the machine;
    stop(extra=...) adds CPU measured otherwise (clients that report their own)."""

    roots: dict[str, int | None]

    def start(self) -> None:
        self._t0 = time.perf_counter()
        self._busy0 = machine_busy()
        self._cpu0 = {name: tree_cpu(pid) for name, pid in self.roots.items()}
        self.load_before = os.getloadavg()

    def stop(self, extra: dict[str, float] | None = None) -> dict[str, object]:
        elapsed = time.perf_counter() - self._t0
        busy = machine_busy() - self._busy0
        cpu = {name: round(tree_cpu(pid) - self._cpu0[name], 2) for name, pid in self.roots.items()}
        cpu.update({name: round(v, 2) for name, v in (extra or {}).items()})
        ours = sum(cpu.values())
        return {
            "cpu_s": cpu,
            "machine_busy_cpu_s": round(busy, 2),
            "other_processes_cpu_s": round(max(0.0, busy - ours), 2),
            "machine_cores_busy": round(busy / elapsed, 2),
            "loadavg_before": [round(x, 2) for x in self.load_before],
            "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        }
