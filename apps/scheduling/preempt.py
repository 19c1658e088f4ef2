"""Choosing preemption victims, checkpoint-aware.

Only preemptible runs beyond their team's guarantee are ever candidates; among them the core
stops the ones that lose the least work since their last checkpoint, so a run that just saved
is a cheap victim and one an hour past its checkpoint is an expensive one.
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from operator import itemgetter

from apps.scheduling.model import RunningJob
from apps.scheduling.placement import PoolCapacity


@dataclass(frozen=True, slots=True)
class VictimPlan:
    nodes: tuple[int, ...]
    victims: tuple[RunningJob, ...]


def _victim_cost(run: RunningJob, now: float, per_preemption_s: float = 0.0) -> tuple[float, int, float, str]:
    # Least work lost first (each earlier stop of the run counting `per_preemption_s` more: see
    # `Policy.victim_preemption_cost_s`); then the lowest class; then the newest start (it has
    # done the least).
    return (run.work_at_risk(now) + per_preemption_s * run.preemptions, int(run.priority_class), -run.started_at, run.id)


class VictimIndex:
    """A pass's possible victims, node by node, cheapest first, and the runs already stopping.

    Built once per pass from the runs that could ever be victims (`candidates`: preemptible, not
    stopping, beyond their team's guarantee) and those `stopping`, so each waiting job's
    `plan_preemption` only filters it rather than sorting every node's runs again."""

    def __init__(self, cap: PoolCapacity, candidates: Iterable[RunningJob], stopping: Iterable[RunningJob],
                 now: float, per_preemption_s: float = 0.0) -> None:
        # Per node: (run id, devices, memory, CPU cores) of each run already stopping there.
        self.stopping: dict[int, list[tuple[str, int, float, float]]] = defaultdict(list)
        index, ready = cap.index, cap.ready
        for run in stopping:
            for node_id, count in run.allocation:
                i = index.get(node_id)
                if i is not None and ready[i]:
                    self.stopping[i].append((run.id, count, run.memory_per_device * count, run.cpus_per_device * count))
        per_node: dict[int, list[tuple[tuple[float, int, float, str], RunningJob, int]]] = defaultdict(list)
        for run in candidates:
            cost = _victim_cost(run, now, per_preemption_s)
            for node_id, count in run.allocation:
                i = index.get(node_id)
                if i is not None and ready[i]:
                    per_node[i].append((cost, run, count))
        by_cost = itemgetter(0)
        self.by_node: dict[int, list[tuple[float, RunningJob, int]]] = {
            i: [(cost[0], run, count) for cost, run, count in sorted(rows, key=by_cost)]
            for i, rows in per_node.items()
        }


def plan_preemption(
    *,
    cap: PoolCapacity,
    index: VictimIndex,
    eligible: Callable[[RunningJob], bool],
    taken: set[str],
    nodes: int,
    devices: int,
    memory: float = 0,
    cpus: float = 0.0,
) -> VictimPlan | None:
    """Cheapest set of eligible runs whose devices (and memory, CPU cores: per node, as asked),
    with what is free, fit the gang.

    Runs already stopping count as free devices (they are on their way out), so a job never
    causes a second round of preemptions while the first is still draining. `taken` holds runs
    other jobs in this pass already counted on; they are neither victims nor free devices here.
    """
    options: list[tuple[float, int, tuple[RunningJob, ...]]] = []
    sized = memory > 0 or cpus > 0
    # One loop over the nodes, inlined: this runs for every waiting job that tries to preempt.
    ready, total, reserved, free = cap.ready, cap.total, cap.reserved, cap.free
    stopping, by_node = index.stopping, index.by_node
    for i in range(len(cap.ids)):
        if not ready[i] or total[i] - reserved[i] < devices:
            continue
        if sized and (cap.mem_total[i] - cap.mem_reserved[i] < memory or cap.cpu_total[i] - cap.cpu_reserved[i] < cpus):
            continue
        have = free[i] - reserved[i]
        mem, cpu = cap.mem_free[i] - cap.mem_reserved[i], cap.cpu_free[i] - cap.cpu_reserved[i]
        for run_id, count, freed_mem, freed_cpu in stopping.get(i, ()):
            if run_id not in taken:
                have, mem, cpu = have + count, mem + freed_mem, cpu + freed_cpu
        fits = have >= devices and (not sized or (mem >= memory and cpu >= cpus))
        if fits:
            options.append((0.0, i, ()))
            continue
        # The cheapest victims on the node that make room.
        chosen: list[RunningJob] = []
        cost = 0.0
        for risk, run, count in by_node.get(i, ()):
            if run.id in taken or not eligible(run):
                continue
            chosen.append(run)
            cost += risk
            have, mem, cpu = have + count, mem + run.memory_per_device * count, cpu + run.cpus_per_device * count
            if have >= devices and (not sized or (mem >= memory and cpu >= cpus)):
                options.append((cost, i, tuple(chosen)))
                break
    if len(options) < nodes:
        return None
    best = heapq.nsmallest(nodes, options, key=lambda o: (o[0], len(o[2]), o[1]))
    if math.isinf(sum(o[0] for o in best)):
        return None
    victims: dict[str, RunningJob] = {}
    for _, _, runs in best:
        for run in runs:
            victims[run.id] = run
    return VictimPlan(
        nodes=tuple(sorted(o[1] for o in best)),
        victims=tuple(sorted(victims.values(), key=lambda r: r.id)),
    )
