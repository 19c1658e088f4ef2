"""The trace simulator's acceptance run (issue #6 item 3) with its timings.

    python bench/simulate.py [--trace PATH] [--nodes 40] [--gpus-per-node 8] [--limit N]
                             [--policy fifo|backfill|trainyard|all]

Replays the Philly-derived trace under `fifo`, `backfill` and `trainyard` (or only the one
named by `--policy`), each with the at-submission wait estimates, prints per policy the average
JCT, Jain's index over the teams' mean slowdown, the share of runs started within max(10 min,
25% of their wait) of their estimate, and the replay's wall and CPU time, then PASS/FAIL
against the targets that the policies run can judge:

    trainyard avg JCT <= 0.6 x fifo and <= 0.9 x backfill
    trainyard Jain >= fifo Jain
    trainyard estimate within >= 0.70
    every replay (estimates included) under 120 s of CPU

Writes bench/results/simulate.json (simulate-POLICY.json with `--policy`). Timings live here,
not in the test suite, which asserts the same quality figures without the clock
(tests/scheduling/test_simulate.py).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from apps.scheduling.simulate import Summary, format_table, load_trace, replay_trace

DEFAULT_TRACE = os.environ.get("TRAINYARD_TRACE", str(Path(__file__).resolve().parents[1] / "tests" / "data" / "philly-vc-seed0.csv"))
RESULTS = Path(__file__).resolve().parent / "results" / "simulate.json"
POLICIES = ("fifo", "backfill", "trainyard")
CPU_LIMIT_S = 120.0
ESTIMATE_TARGET = 0.70


def checks(results: dict[str, Summary]) -> list[tuple[str, bool, str]]:
    """The targets that the replays at hand can judge (all of them when every policy ran)."""
    rows: list[tuple[str, bool, str]] = []
    ty = results.get("trainyard")
    fifo, backfill = results.get("fifo"), results.get("backfill")
    if ty is not None and fifo is not None:
        rows.append(
            (
                "trainyard avg JCT <= 0.6 x fifo",
                ty.avg_jct_s <= 0.6 * fifo.avg_jct_s,
                f"{ty.avg_jct_s / 3600:.1f} h vs {0.6 * fifo.avg_jct_s / 3600:.1f} h",
            )
        )
    if ty is not None and backfill is not None:
        rows.append(
            (
                "trainyard avg JCT <= 0.9 x backfill",
                ty.avg_jct_s <= 0.9 * backfill.avg_jct_s,
                f"{ty.avg_jct_s / 3600:.1f} h vs {0.9 * backfill.avg_jct_s / 3600:.1f} h",
            )
        )
    if ty is not None and fifo is not None:
        rows.append(
            (
                "trainyard Jain >= fifo Jain",
                ty.jain_slowdown >= fifo.jain_slowdown,
                f"{ty.jain_slowdown:.3f} vs {fifo.jain_slowdown:.3f}",
            )
        )
    if ty is not None:
        rows.append(
            (
                f"trainyard estimate within >= {ESTIMATE_TARGET:.2f}",
                ty.estimate_within >= ESTIMATE_TARGET,
                f"{ty.estimate_within:.3f} (gap {max(0.0, ESTIMATE_TARGET - ty.estimate_within):.3f})",
            )
        )
    for name, s in results.items():
        rows.append((f"{name} replay CPU < {CPU_LIMIT_S:.0f} s", s.cpu_s < CPU_LIMIT_S, f"{s.cpu_s:.1f} s"))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--trace", default=DEFAULT_TRACE)
    parser.add_argument("--nodes", type=int, default=40)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--limit", type=int)
    parser.add_argument("--policy", choices=[*POLICIES, "all"], default="all")
    args = parser.parse_args(argv)
    if not Path(args.trace).exists():
        print(f"trace not found: {args.trace}; skipped")
        return 0
    jobs = load_trace(args.trace, args.limit)
    results: dict[str, Summary] = {}
    for name in POLICIES if args.policy == "all" else (args.policy,):
        results[name] = replay_trace(jobs, nodes=args.nodes, gpus_per_node=args.gpus_per_node, policy=name)[0]
        print(f"{name}: {results[name].cpu_s:.1f} s CPU, {results[name].wall_s:.1f} s wall", flush=True)
    print(format_table(list(results.values())))
    rows = checks(results)
    print()
    for label, ok, detail in rows:
        print(f"{'PASS' if ok else 'FAIL'}  {label:40} {detail}")
    # A one-policy run writes beside the full one rather than over it.
    out = RESULTS if args.policy == "all" else RESULTS.with_name(f"simulate-{args.policy}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "trace": str(args.trace),
                "limit": args.limit,
                "nodes": args.nodes,
                "gpus_per_node": args.gpus_per_node,
                "results": [asdict(s) for s in results.values()],
                "checks": [{"check": label, "pass": ok, "value": detail} for label, ok, detail in rows],
            },
            indent=2,
        )
        + "\n"
    )
    # A benchmark reports; it fails only when it could not run.
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
