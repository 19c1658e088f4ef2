"""One scheduler pass over 10,000 queued runs on 1,000 nodes x 8 GPUs (core alone, no database).

    python bench/scheduler_core.py [--repeats 15] [--queued 10000] [--nodes 1000]

Prints median and p95 wall time of `schedule()` with reasons (what the portal's pass runs) and
without (what the simulator and estimator run), and writes bench/results/scheduler_core.json.
Target: median under 250 ms with reasons.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from apps.scheduling.core import (
    ClusterState,
    Node,
    Policy,
    PriorityClass,
    QueuedJob,
    RunningJob,
    TeamQuota,
    TeamUsage,
    schedule,
)
from bench._results import write_result

POOL = "a100"


def build_state(*, nodes: int, queued: int, teams: int = 20, seed: int = 1) -> ClusterState:
    """A busy pool: about 80% of devices held by running jobs, a long mixed queue."""
    rng = random.Random(seed)
    team_names = [f"team-{i:02d}" for i in range(teams)]
    node_list: list[Node] = []
    running: list[RunningJob] = []
    now = 1_000_000.0
    for i in range(nodes):
        node_id = f"gpu-{i:04d}"
        used = rng.choice([8, 8, 8, 6, 4, 7, 0, 2])
        if used:
            # Split the used devices into one to three runs.
            parts = [used] if used < 2 else [used // 2, used - used // 2] if rng.random() < 0.5 else [used]
            for k, count in enumerate(parts):
                running.append(
                    RunningJob(
                        id=f"run-{i}-{k}",
                        team=rng.choice(team_names),
                        pool=POOL,
                        priority_class=rng.choice([PriorityClass.LOW, PriorityClass.NORMAL, PriorityClass.NORMAL]),
                        allocation=((node_id, count),),
                        started_at=now - rng.uniform(60, 86400),
                        predicted_end=now + rng.uniform(60, 3 * 86400),
                        preemptible=rng.random() < 0.5,
                        last_checkpoint_at=now - rng.uniform(0, 3600),
                    )
                )
        node_list.append(Node(id=node_id, pool=POOL, total_devices=8, free_devices=8 - used))
    shapes = [(1, 1)] * 6 + [(1, 2), (1, 4), (1, 8), (2, 8), (4, 8)]
    jobs: list[QueuedJob] = []
    for i in range(queued):
        count, per_node = rng.choice(shapes)
        jobs.append(
            QueuedJob(
                id=f"q-{i:05d}",
                team=rng.choice(team_names),
                pool=POOL,
                priority_class=rng.choice([PriorityClass.LOW, PriorityClass.NORMAL, PriorityClass.NORMAL, PriorityClass.URGENT]),
                submitted_at=now - rng.uniform(0, 7 * 86400),
                nodes=count,
                devices_per_node=per_node,
                predicted_runtime=rng.lognormvariate(9, 1.5),
                blocked_reason="budget" if rng.random() < 0.02 else None,
            )
        )
    share = nodes * 8 // teams
    quotas = tuple(TeamQuota(team=t, pool=POOL, guaranteed_devices=share, borrow_limit=share * 3) for t in team_names)
    usage = tuple(TeamUsage(team=t, pool=POOL, device_seconds=rng.uniform(0, 5e7)) for t in team_names)
    return ClusterState(
        now=now,
        nodes=tuple(node_list),
        running=tuple(running),
        queued=tuple(jobs),
        quotas=quotas,
        usage=usage,
        policies={POOL: Policy(reserve_depth=4)},
    )


def measure(state: ClusterState, *, explain: bool, repeats: int) -> list[float]:
    timings: list[float] = []
    for _ in range(repeats):
        started = time.perf_counter()
        schedule(state, explain=explain)
        timings.append((time.perf_counter() - started) * 1000)
    return timings


def summary(timings: list[float]) -> dict[str, float]:
    ordered = sorted(timings)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {"median_ms": round(statistics.median(ordered), 2), "p95_ms": round(p95, 2), "min_ms": round(ordered[0], 2)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--queued", type=int, default=10_000)
    parser.add_argument("--nodes", type=int, default=1_000)
    args = parser.parse_args()
    state = build_state(nodes=args.nodes, queued=args.queued)
    decision = schedule(state)
    explained = summary(measure(state, explain=True, repeats=args.repeats))
    quiet = summary(measure(state, explain=False, repeats=args.repeats))
    result = {
        "benchmark": "scheduler_core",
        "nodes": args.nodes,
        "devices": args.nodes * 8,
        "running": len(state.running),
        "queued": len(state.queued),
        "placed": len(decision.placements),
        "preempted": len(decision.preemptions),
        "repeats": args.repeats,
        "with_reasons": explained,
        "without_reasons": quiet,
        "target_median_ms": 250,
    }
    print(f"scheduler core: {args.queued} queued, {len(state.running)} running, {args.nodes} nodes x 8 devices")
    print(f"  placed {len(decision.placements)}, preempted {len(decision.preemptions)}")
    print(f"  with reasons    median {explained['median_ms']:8.1f} ms   p95 {explained['p95_ms']:8.1f} ms")
    print(f"  without reasons median {quiet['median_ms']:8.1f} ms   p95 {quiet['p95_ms']:8.1f} ms")
    print(f"wrote {write_result('scheduler_core', result)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
