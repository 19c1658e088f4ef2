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


def plan_preemption(
    *,
    cap: PoolCapacity,
    running: Sequence[RunningJob],
    eligible: Callable[[RunningJob], bool],
    taken: set[str],
    nodes: int,
    devices: int,
    now: float,
) -> VictimPlan | None:
    """Cheapest set of eligible runs whose devices, with what is free, fit the gang.

    Runs already stopping count as free devices (they are on their way out), so a job never
    causes a second round of preemptions while the first is still draining. `taken` holds runs
    other jobs in this pass already counted on; they are neither victims nor free devices here.
    """
    stopping: dict[int, int] = defaultdict(int)
    per_node: dict[int, list[RunningJob]] = defaultdict(list)
    for run in running:
        if run.id in taken:
            continue
        for node_id, count in run.allocation:
            i = cap.index.get(node_id)
            if i is None or not cap.ready[i]:
                continue
            if run.stopping:
                stopping[i] += count
            elif eligible(run):
                per_node[i].append(run)
    options: list[tuple[float, int, tuple[RunningJob, ...]]] = []
    for i in range(len(cap.ids)):
        if not cap.ready[i] or cap.total[i] - cap.reserved[i] < devices:
            continue
        have = cap.free[i] - cap.reserved[i] + stopping[i]
        chosen: list[RunningJob] = []
        cost = 0.0
        if have < devices:
            for run in sorted(per_node[i], key=lambda r: _victim_cost(r, now)):
                chosen.append(run)
                cost += run.work_at_risk(now)
                have += sum(c for node_id, c in run.allocation if node_id == cap.ids[i])
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
