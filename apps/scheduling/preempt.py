"""Choosing preemption victims, checkpoint-aware.

Only preemptible runs beyond their team's guarantee are ever candidates; among them the core
stops the ones that lose the least work since their last checkpoint, so a run that just saved
is a cheap victim and one an hour past its checkpoint is an expensive one.
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from apps.scheduling.model import RunningJob
from apps.scheduling.placement import PoolCapacity


@dataclass(frozen=True, slots=True)
class VictimPlan:
    nodes: tuple[int, ...]
    victims: tuple[RunningJob, ...]


def _victim_cost(run: RunningJob, now: float) -> tuple[float, int, float, str]:
    # Least work lost first; then the lowest class; then the newest start (it has done the least).
    return (run.work_at_risk(now), int(run.priority_class), -run.started_at, run.id)


class VictimIndex:
    """A pass's possible victims, node by node, cheapest first, and the runs already stopping.

    Built once per pass (`candidate` says which runs could ever be victims: preemptible, not
    stopping, beyond their team's guarantee), so each waiting job's `plan_preemption` only
    filters it rather than sorting every node's runs again."""

    def __init__(self, cap: PoolCapacity, running: Sequence[RunningJob], candidate: Callable[[RunningJob], bool],
                 now: float) -> None:
        self.stopping: dict[int, list[tuple[str, int]]] = defaultdict(list)
        per_node: dict[int, list[tuple[tuple[float, int, float, str], RunningJob, int]]] = defaultdict(list)
        for run in running:
            cost: tuple[float, int, float, str] | None = None
            for node_id, count in run.allocation:
                i = cap.index.get(node_id)
                if i is None or not cap.ready[i]:
                    continue
                if run.stopping:
                    self.stopping[i].append((run.id, count))
                elif candidate(run):
                    if cost is None:
                        cost = _victim_cost(run, now)
                    per_node[i].append((cost, run, count))
        self.by_node: dict[int, list[tuple[float, RunningJob, int]]] = {
            i: [(cost[0], run, count) for cost, run, count in sorted(rows, key=lambda row: row[0])]
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
) -> VictimPlan | None:
    """Cheapest set of eligible runs whose devices, with what is free, fit the gang.

    Runs already stopping count as free devices (they are on their way out), so a job never
    causes a second round of preemptions while the first is still draining. `taken` holds runs
    other jobs in this pass already counted on; they are neither victims nor free devices here.
    """
    options: list[tuple[float, int, tuple[RunningJob, ...]]] = []
    stopping, by_node = index.stopping, index.by_node
    for i in range(len(cap.ids)):
        if not cap.ready[i] or cap.total[i] - cap.reserved[i] < devices:
            continue
        have = cap.free[i] - cap.reserved[i]
        for run_id, count in stopping.get(i, ()):
            if run_id not in taken:
                have += count
        chosen: list[RunningJob] = []
        cost = 0.0
        if have < devices:
            for risk, run, count in by_node.get(i, ()):
                if run.id in taken or not eligible(run):
                    continue
                chosen.append(run)
                cost += risk
                have += count
                if have >= devices:
                    break
            if have < devices:
                continue
        options.append((cost, i, tuple(chosen)))
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
