"""Seeded random cluster states and what the scheduler core decides on them, as plain JSON.

`tests/scheduling/data/pass_golden.json` holds these answers as recorded before `_PoolPass.run`
was split into phases: in full for the first `FULL` seeds (readable when one differs), as a
digest per part for all `STATES`. `test_pass_golden.py` asserts the core still gives them.
Regenerate (only for an intended change of behaviour) with `python -m tests.scheduling.pass_golden`.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import asdict
from pathlib import Path
from typing import Any

from apps.scheduling.core import (
    ClusterState,
    Decision,
    Node,
    NodeState,
    Ordering,
    Packing,
    Policy,
    PriorityClass,
    QueuedJob,
    RunningJob,
    TeamQuota,
    TeamUsage,
    explain_policy,
    queue_keys,
    schedule,
)
from apps.scheduling.estimate import QueueLag, simulate_starts
from apps.scheduling.model import RETRY_BACKOFF

GOLDEN = Path(__file__).parent / "data" / "pass_golden.json"
STATES = 800
FULL = 20
TEAMS = ("a", "b", "c", "d")
SHAPES = ((1, 1), (1, 2), (1, 4), (1, 8), (2, 8), (2, 4), (3, 4), (4, 8), (1, 3))


def _policy(rng: random.Random) -> Policy:
    return Policy(
        ordering=rng.choice([Ordering.PRIORITY, Ordering.PRIORITY, Ordering.FIFO]),
        backfill=rng.random() < 0.8,
        preemption=rng.random() < 0.75,
        packing=rng.choice([Packing.BEST_FIT, Packing.BEST_FIT, Packing.FIRST_FIT]),
        reserve_depth=rng.choice([0, 1, 1, 2, 3]),
        guarantee_first=rng.random() < 0.4,
        class_promotion_s=rng.choice([0.0, 600.0, 12 * 3600.0]),
        fair_share_weight=rng.choice([0.0, 0.1, 1.0]),
        reclaim_borrowed=rng.random() < 0.3,
        headroom_devices=rng.choice([0, 0, 2, 4, 8]),
        headroom_max_runtime_s=rng.choice([600.0, 7200.0]),
        demote_after_s=rng.choice([0.0, 1800.0, 3600.0]),
        demotion_factor=rng.choice([1.0, 2.0, 4.0]),
        demoted_min_attempt_s=rng.choice([0.0, 900.0]),
        # Recorded before promises were on by default; the core never reads it (the queue writer
        # and the replay do), only the rules it explains would differ.
        promise_estimates=False,
    )


def random_state(seed: int) -> ClusterState:
    """A small cluster: one to three pools (one of them sometimes without nodes), a mixed line."""
    rng = random.Random(seed)
    now = 100_000.0
    pools = ["p0"] + (["p1"] if rng.random() < 0.35 else [])
    nodes: list[Node] = []
    running: list[RunningJob] = []
    for pool in pools:
        for i in range(rng.randint(1, 8)):
            total = rng.choice([4, 8, 8, 8])
            free = rng.randint(0, total) if rng.random() < 0.7 else 0
            node_state = rng.choice([NodeState.READY] * 6 + [NodeState.DRAINING, NodeState.LOST])
            node_id = f"{pool}-n{i}"
            nodes.append(Node(node_id, pool, total, free, node_state))
            used = total - free
            while used > 0:
                take = rng.randint(1, used)
                used -= take
                started = now - rng.uniform(0, 20_000)
                running.append(
                    RunningJob(
                        id=f"r{len(running)}",
                        team=rng.choice(TEAMS),
                        pool=pool,
                        priority_class=rng.choice(list(PriorityClass)),
                        allocation=((node_id, take),),
                        started_at=started,
                        predicted_end=now + rng.uniform(-100, 50_000),
                        preemptible=rng.random() < 0.8,
                        last_checkpoint_at=rng.choice([None, started + rng.uniform(0, now - started)]),
                        stopping=rng.random() < 0.1,
                        attained_s=rng.choice([0.0, 0.0, rng.uniform(0, 30_000)]),
                        checkpoint_every_s=rng.choice([None, None, 600.0]),
                    )
                )
    # A gang run over two nodes of the first pool, now and then.
    two = [n for n in nodes if n.pool == "p0" and n.free_devices >= 2]
    if len(two) >= 2 and rng.random() < 0.4:
        a, b = two[:2]
        nodes = [Node(n.id, n.pool, n.total_devices, n.free_devices - 2, n.state) if n.id in (a.id, b.id) else n for n in nodes]
        running.append(
            RunningJob(
                id=f"r{len(running)}",
                team=rng.choice(TEAMS),
                pool="p0",
                priority_class=rng.choice(list(PriorityClass)),
                allocation=((a.id, 2), (b.id, 2)),
                started_at=now - 5000,
                predicted_end=now + rng.uniform(0, 20_000),
                attained_s=rng.uniform(0, 10_000),
            )
        )
    queue_pools = pools + (["p2"] if rng.random() < 0.15 else [])
    node_ids = [n.id for n in nodes]
    queued: list[QueuedJob] = []
    for i in range(rng.randint(0, 30)):
        k, d = rng.choice(SHAPES)
        blocked = rng.random()
        reason = None if blocked > 0.1 else (RETRY_BACKOFF if blocked < 0.04 else "budget")
        queued.append(
            QueuedJob(
                id=f"j{i:02d}",
                team=rng.choice(TEAMS),
                pool=rng.choice(queue_pools),
                priority_class=rng.choice(list(PriorityClass)),
                submitted_at=now - rng.uniform(0, 80_000),
                nodes=k,
                devices_per_node=d,
                predicted_runtime=rng.choice([rng.uniform(30, 3000), rng.uniform(60, 200_000)]),
                preemptible=rng.random() < 0.9,
                blocked_reason=reason,
                blocked_message="" if reason is None or rng.random() < 0.3 else f"held: {reason}",
                expected_runtime=rng.choice([None, rng.uniform(60, 50_000)]),
                deadline=rng.choice([None, None, now + rng.uniform(-50_000, 200_000)]),
                attained_s=rng.choice([0.0, 0.0, rng.uniform(0, 40_000)]),
                avoid_nodes=frozenset(rng.sample(node_ids, min(len(node_ids), rng.randint(1, 3))))
                if node_ids and rng.random() < 0.2
                else frozenset(),
            )
        )
    quotas = [TeamQuota(t, pool, rng.randint(0, 16), rng.choice([None, 0, 4, 16])) for pool in pools for t in TEAMS if rng.random() < 0.7]
    usage = [TeamUsage(t, pool, rng.uniform(0, 1e7)) for pool in pools for t in TEAMS if rng.random() < 0.5]
    rng.shuffle(queued)
    rng.shuffle(running)
    return ClusterState(
        now=now,
        nodes=tuple(nodes),
        running=tuple(running),
        queued=tuple(queued),
        quotas=tuple(quotas),
        usage=tuple(usage),
        policies={pool: _policy(rng) for pool in pools if rng.random() < 0.9},
        default_policy=_policy(rng),
    )


def _decision(d: Decision) -> dict[str, Any]:
    return {
        "placements": [asdict(p) for p in d.placements],
        "preemptions": [asdict(p) for p in d.preemptions],
        "queue": [asdict(e) for e in d.queue],
        "fragmentation": [asdict(f) for f in d.fragmentation],
        "order": dict(d.order),
    }


def answers(seed: int) -> dict[str, Any]:
    """Everything the core says about one seeded state, JSON-shaped."""
    s = random_state(seed)
    lag = QueueLag(min_samples=2)
    for i in range(4):
        lag.observe(s.now - 1000 * i, s.now - 5000 * (i + 1))
    targets = sorted(j.id for j in s.queued)[::3]
    replays = {
        "all": simulate_starts(s, max_passes=60),
        "ahead": simulate_starts(s, targets=targets, ahead_only=True, max_passes=60, step_ratio=0.1),
        "far": simulate_starts(s, max_ahead=4, lag=lag, max_passes=40),
    }
    out = {
        "seed": seed,
        "explained": _decision(schedule(s)),
        "quiet": _decision(schedule(s, explain=False)),
        "keys": {pool: sorted(repr(k[:5]) + k[5].id for k in keys) for pool, keys in queue_keys(s).items()},
        "policies": [explain_policy(p) for p in [*s.policies.values(), s.default_policy]],
        "replays": {
            name: {
                "starts": r.starts,
                "extrapolated": sorted(r.extrapolated),
                "passes": r.passes,
                "rank_times": r.rank_times,
                "ranges": {k: list(v) for k, v in r.ranges.items()},
            }
            for name, r in replays.items()
        },
    }
    # Through JSON and back, so floats and tuples compare as they were stored.
    return json.loads(json.dumps(out, sort_keys=True))


def digests(answer: dict[str, Any]) -> dict[str, str]:
    """A short digest of each part of one answer (a changed part names itself)."""
    return {
        part: hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:20]
        for part, value in sorted(answer.items())
        if part != "seed"
    }


def golden() -> dict[str, Any]:
    every = [answers(seed) for seed in range(STATES)]
    return {"full": every[:FULL], "digests": [digests(a) for a in every]}


def main() -> None:
    GOLDEN.parent.mkdir(parents=True, exist_ok=True)
    GOLDEN.write_text(json.dumps(golden(), sort_keys=True, indent=1) + "\n")


if __name__ == "__main__":
    main()
