"""Free capacity of one pool during a pass: where a gang fits now, and when it would fit.

Nodes are indexed by their free-device count (one sorted bucket per count), so best-fit is a
walk up from the smallest count that fits and costs about the gang size, not the pool size.
Reservations (EASY backfill) mark the nodes a blocked job will need: until its reserved start
(`shadow`) those nodes take only jobs predicted to end before it, plus any devices the
reservation leaves over (`spare`).

Memory and CPU cores are capacity too, per node: free is the node's figure less what the runs on
it ask for (a node without a figure, or a job asking none, is not limited by them). Backfill's
`spare` counts devices only.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left, insort
from collections.abc import Iterator, Sequence

from apps.scheduling.model import Node, NodeState, Packing, RunningJob

INF = math.inf


class PoolCapacity:
    def __init__(self, nodes: Sequence[Node], running: Sequence[RunningJob], packing: Packing) -> None:
        ordered = sorted(nodes, key=lambda n: n.id)
        self.packing = packing
        self.ids: list[str] = [n.id for n in ordered]
        self.index: dict[str, int] = {node_id: i for i, node_id in enumerate(self.ids)}
        # Draining and lost nodes stay in the index (running work lives there) but never take work.
        self.ready: list[bool] = [n.state == NodeState.READY for n in ordered]
        self.total: list[int] = [max(0, n.total_devices) for n in ordered]
        self.free: list[int] = [
            max(0, min(n.free_devices, n.total_devices)) if ready else 0
            for n, ready in zip(ordered, self.ready, strict=True)
        ]
        self.max_devices = max(self.total, default=0)
        self.buckets: list[list[int]] = [[] for _ in range(self.max_devices + 1)]
        for i, f in enumerate(self.free):
            if self.ready[i]:
                self.buckets[f].append(i)
        self.free_sum = sum(self.free)
        self.mem_total: list[float] = [n.memory_bytes if n.memory_bytes > 0 else INF for n in ordered]
        self.cpu_total: list[float] = [n.cpus if n.cpus > 0 else INF for n in ordered]
        self.mem_free, self.cpu_free = list(self.mem_total), list(self.cpu_total)
        self.mem_reserved: list[float] = [0] * len(ordered)
        self.cpu_reserved: list[float] = [0.0] * len(ordered)
        for run in running:
            if run.memory_per_device or run.cpus_per_device:
                for node_id, count in run.allocation:
                    at = self.index.get(node_id)
                    if at is not None:
                        self.mem_free[at] -= run.memory_per_device * count
                        self.cpu_free[at] -= run.cpus_per_device * count
        self.shadow: list[float] = [INF] * len(ordered)
        self.spare: list[int] = [self.max_devices] * len(ordered)
        self.reserved: list[int] = [0] * len(ordered)
        self._running = running
        self._placed: list[tuple[int, float, int, float, float]] = []
        self._releases: list[list[tuple[float, int, float, float]]] | None = None

    # -- what fits now -------------------------------------------------------------------

    def max_free(self) -> int:
        for f in range(self.max_devices, 0, -1):
            if self.buckets[f]:
                return f
        return 0

    def count_free_at_least(self, devices: int) -> int:
        return sum(len(self.buckets[f]) for f in range(max(devices, 0), self.max_devices + 1))

    def ready_nodes_with_total(self, devices: int, memory: float = 0, cpus: float = 0.0) -> int:
        return sum(
            1 for i, t in enumerate(self.total)
            if self.ready[i] and t >= devices and self.mem_total[i] >= memory and self.cpu_total[i] >= cpus
        )

    def most_free_beside(self, devices: int) -> tuple[float, float]:
        """(memory, CPU cores) free on the ready nodes with `devices` free devices, the most of each."""
        rows = [(self.mem_free[i], self.cpu_free[i]) for i in range(len(self.ids)) if self.ready[i] and self.free[i] >= devices]
        return max((m for m, _ in rows), default=0.0), max((c for _, c in rows), default=0.0)

    def avoidable(self, node_ids: frozenset[str], nodes: int, devices: int) -> frozenset[int]:
        """The indexes of `node_ids` to keep a job off, or none when the rest could never host it."""
        avoid = frozenset(self.index[n] for n in node_ids if n in self.index)
        if not avoid:
            return avoid
        others = sum(1 for i, t in enumerate(self.total) if self.ready[i] and t >= devices and i not in avoid)
        return avoid if others >= nodes else frozenset()

    def _candidates(self, devices: int) -> Iterator[int]:
        if self.packing == Packing.BEST_FIT:
            # Tightest fit first; within a count, lowest node id (buckets stay sorted).
            for f in range(devices, self.max_devices + 1):
                yield from self.buckets[f]
        else:
            yield from heapq.merge(*self.buckets[devices:])

    def find(self, nodes: int, devices: int, end: float, *, honour_reservations: bool = True,
             avoid: frozenset[int] = frozenset(), memory: float = 0, cpus: float = 0.0) -> list[int] | None:
        """Nodes for a gang of `nodes` x `devices` (and `memory`, `cpus` per node) ending at `end`,
        or None (all-or-nothing)."""
        if devices <= 0 or nodes <= 0 or devices > self.max_devices or nodes * devices > self.free_sum:
            return None
        chosen: list[int] = []
        sized = memory > 0 or cpus > 0
        for i in self._candidates(devices):
            if honour_reservations and end > self.shadow[i] and devices > self.spare[i]:
                continue
            if i in avoid:
                continue
            if sized and (self.mem_free[i] < memory or self.cpu_free[i] < cpus):
                continue
            chosen.append(i)
            if len(chosen) == nodes:
                return chosen
        return None

    def take(self, chosen: Sequence[int], devices: int, end: float, memory: float = 0, cpus: float = 0.0) -> None:
        for i in chosen:
            old = self.free[i]
            bucket = self.buckets[old]
            del bucket[bisect_left(bucket, i)]
            self.free[i] = old - devices
            insort(self.buckets[old - devices], i)
            if end > self.shadow[i]:
                # Running past a reserved start is only allowed on devices the reservation spares.
                self.spare[i] -= devices
            self.mem_free[i] -= memory
            self.cpu_free[i] -= cpus
            self._placed.append((i, end, devices, memory, cpus))
            if self._releases is not None:
                self._releases[i].append((end, devices, memory, cpus))
        self.free_sum -= devices * len(chosen)

    def hold(self, chosen: Sequence[int], devices: int, now: float, memory: float = 0, cpus: float = 0.0) -> None:
        """Keep these nodes for a job that is waiting on preempted runs to stop."""
        for i in chosen:
            self.shadow[i] = min(self.shadow[i], now)
            self.spare[i] = max(0, min(self.spare[i], self.free[i] - devices))
            self.reserved[i] += devices
            self.mem_reserved[i] += memory
            self.cpu_reserved[i] += cpus

    # -- when it would fit ----------------------------------------------------------------

    def _release_lists(self) -> list[list[tuple[float, int, float, float]]]:
        """Per node, (predicted end, devices, memory, CPU cores) of each run on it."""
        if self._releases is None:
            releases: list[list[tuple[float, int, float, float]]] = [[] for _ in self.ids]
            for run in self._running:
                for node_id, count in run.allocation:
                    i = self.index.get(node_id)
                    if i is not None:
                        releases[i].append((run.predicted_end, count, run.memory_per_device * count,
                                            run.cpus_per_device * count))
            for i, end, count, memory, cpus in self._placed:
                releases[i].append((end, count, memory, cpus))
            self._releases = releases
        return self._releases

    def reserve(self, nodes: int, devices: int, now: float, avoid: frozenset[int] = frozenset(),
                memory: float = 0, cpus: float = 0.0) -> float | None:
        """Reserve the earliest moment a gang fits, judged by predicted ends; None if never.

        Earlier reservations keep their devices (and memory, cores) for good (conservative: a
        later reservation never counts on what an earlier one will hold), so they never collide.
        """
        releases = self._release_lists()
        sized = memory > 0 or cpus > 0
        options: list[tuple[float, int, int]] = []
        for i in range(len(self.ids)):
            if not self.ready[i] or self.total[i] - self.reserved[i] < devices or i in avoid:
                continue
            if sized and (self.mem_total[i] - self.mem_reserved[i] < memory or self.cpu_total[i] - self.cpu_reserved[i] < cpus):
                continue
            when = self._earliest(i, releases[i], devices, memory, cpus, now) if sized else self._earliest_devices(
                i, releases[i], devices, now)
            if when < INF:
                # Among equally early nodes prefer the fuller one, as best-fit would.
                options.append((when, self.total[i] - self.reserved[i], i))
        if len(options) < nodes:
            return None
        chosen = heapq.nsmallest(nodes, options)
        start = max(when for when, _, _ in chosen)
        for _, _, i in chosen:
            self.reserved[i] += devices
            self.mem_reserved[i] += memory
            self.cpu_reserved[i] += cpus
            at_start = self.free[i] + sum(row[1] for row in releases[i] if row[0] <= start)
            self.shadow[i] = min(self.shadow[i], start)
            self.spare[i] = max(0, min(self.spare[i], at_start - self.reserved[i]))
        return start

    def _earliest_devices(self, i: int, releases: list[tuple[float, int, float, float]], devices: int, now: float) -> float:
        avail = self.free[i] - self.reserved[i]
        if avail >= devices:
            return now
        for end, count, _, _ in sorted(releases):
            avail += count
            if avail >= devices:
                return max(end, now)
        return INF

    def _earliest(self, i: int, releases: list[tuple[float, int, float, float]], devices: int, memory: float,
                  cpus: float, now: float) -> float:
        """When node `i` has the devices, memory and cores free at once, by predicted ends."""
        avail = self.free[i] - self.reserved[i]
        mem = self.mem_free[i] - self.mem_reserved[i]
        cpu = self.cpu_free[i] - self.cpu_reserved[i]
        if avail >= devices and mem >= memory and cpu >= cpus:
            return now
        for end, count, freed_mem, freed_cpu in sorted(releases):
            avail, mem, cpu = avail + count, mem + freed_mem, cpu + freed_cpu
            if avail >= devices and mem >= memory and cpu >= cpus:
                return max(end, now)
        return INF

    # -- figures ----------------------------------------------------------------------------

    def whole_free_nodes(self) -> int:
        return sum(1 for i, f in enumerate(self.free) if self.ready[i] and f == self.total[i] and f > 0)
