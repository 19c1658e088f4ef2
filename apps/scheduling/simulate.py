"""The trace replay's command: replays a trace under fifo, backfill and trainyard, on its
perturbed samples too (`--variants`), and prints and writes every figure and issue 28's goals.

    python -m apps.scheduling.simulate TRACE.csv --nodes 40 --gpus-per-node 8 --policy trainyard

What a replay does and measures: `trace_replay`; the trace and its samples: `trace`.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from apps.scheduling.breakdown import format_breakdown, slowdown_breakdown
from apps.scheduling.model import Policy
from apps.scheduling.trace import VARIANTS, Variant, load_trace, perturb
from apps.scheduling.trace_replay import POLICIES, WAITED_BUCKETS, Preemptible, Replay, Summary, replay, replay_trace


def teams_compared(policy: Summary, baseline: Summary) -> tuple[list[str], list[tuple[str, float, float]]]:
    """Teams with a lower mean slowdown under `policy` than under `baseline`, and those worse off
    as (team, baseline slowdown, policy slowdown), worst first."""
    better: list[str] = []
    worse: list[tuple[str, float, float]] = []
    for team, mine in policy.team_slowdown.items():
        theirs = baseline.team_slowdown.get(team)
        if theirs is None:
            continue
        if mine < theirs:
            better.append(team)
        elif mine > theirs:
            worse.append((team, theirs, mine))
    worse.sort(key=lambda row: row[1] / row[2])
    return better, worse


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:10.2f} h"


def format_table(summaries: Sequence[Summary]) -> str:
    rows: list[tuple[str, Callable[[Summary], str]]] = [
        ("jobs", lambda s: f"{s.jobs:12d}"),
        ("avg JCT", lambda s: _hours(s.avg_jct_s)),
        ("p95 JCT", lambda s: _hours(s.p95_jct_s)),
        ("p99 JCT", lambda s: _hours(s.p99_jct_s)),
        ("avg wait", lambda s: _hours(s.avg_wait_s)),
        ("p95 wait", lambda s: _hours(s.p95_wait_s)),
        ("utilization", lambda s: f"{s.utilization:12.3f}"),
        ("busy while jobs wait", lambda s: f"{s.busy_while_waiting:12.3f}"),
        ("Jain (slowdown)", lambda s: f"{s.jain_slowdown:12.3f}"),
        ("mean slowdown", lambda s: f"{s.mean_slowdown:12.2f}"),
        ("started at once", lambda s: f"{s.started_immediately:12.3f}"),
        ("estimate within", lambda s: f"{s.estimate_within:12.3f}"),
        ("est. median err", lambda s: _hours(s.estimate_median_abs_error_s)),
        ("est. median err (waited)", lambda s: _hours(s.estimate_median_abs_error_waited_s)),
        *_waited_rows("waited", "at submission"),
        ("preemptions", lambda s: f"{s.preemptions:12d}"),
        ("jobs preempted", lambda s: f"{s.preempted_jobs:12.3f}"),
        ("max preempted (one job)", lambda s: f"{s.max_preemptions_per_job:12d}"),
        ("jobs preempted 5+ times", lambda s: f"{s.jobs_preempted_5_plus:12d}"),
        *_waited_rows("requeued", "at requeue"),
        ("work lost", lambda s: f"{s.lost_device_h:8.0f} GPU-h"),
        ("replay wall time", lambda s: f"{s.wall_s:10.1f} s"),
        ("replay CPU time", lambda s: f"{s.cpu_s:10.1f} s"),
    ]
    header = f"{'':26}" + "".join(f"{s.policy:>14}" for s in summaries)
    lines = [header]
    for label, fmt in rows:
        lines.append(f"{label:26}" + "".join(f"{fmt(s):>14}" for s in summaries))
    return "\n".join(lines)


def _waited_rows(attr: str, when: str) -> list[tuple[str, Callable[[Summary], str]]]:
    """Rows for `Summary.waited` or `.requeued`: per bucket, the runs and the three shares."""

    def cell(bucket: str, key: str) -> Callable[[Summary], str]:
        def fmt(s: Summary) -> str:
            value = getattr(s, attr).get(bucket, {}).get(key, 0.0)
            return f"{int(value):12d}" if key == "jobs" else f"{value:12.3f}"

        return fmt

    rows: list[tuple[str, Callable[[Summary], str]]] = []
    buckets = [name for name, _ in WAITED_BUCKETS]
    for bucket in (["all", *buckets] if attr == "requeued" else buckets):
        label = "waits" if bucket == "all" else f"waits > {bucket}"
        rows.append((f"{when}, {label}", cell(bucket, "jobs")))
        for key, name in (("estimate", "estimate"), ("starts_now", "'starts now'"), ("pool_median", "pool median")):
            rows.append((f"  {name} within", cell(bucket, key)))
    return rows


def _variant_replay(task: tuple[Variant, str, str, int, int, Preemptible, int | None, bool, float]) -> Summary:
    variant, policy, trace, nodes, gpus_per_node, resume, limit, estimates, share = task
    jobs = variant.jobs(load_trace(trace, limit))
    # The goals judge the trainyard estimator; the baselines' replays skip the estimates (and
    # trainyard's too with `estimates` off: `--no-estimates`, for the policy's figures alone).
    return replay_trace(jobs, nodes=variant.nodes or nodes, gpus_per_node=gpus_per_node, policy=policy,
                        estimates=estimates and policy == "trainyard", preemptible=resume, guarantee_share=share)[0]


def run_variants(trace: str, *, nodes: int, gpus_per_node: int = 8, resume: Preemptible = Preemptible(),
                 limit: int | None = None, workers: int = 1, variants: Sequence[Variant] = VARIANTS,
                 policies: Sequence[str] = tuple(POLICIES), estimates: bool = True,
                 guarantee_share: float = 1.0) -> dict[str, dict[str, Summary]]:
    """Every policy on every variant: {variant name: {policy: summary}}."""
    tasks = [(v, p, trace, nodes, gpus_per_node, resume, limit, estimates, guarantee_share)
             for v in variants for p in policies]
    if workers > 1:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            summaries = list(pool.map(_variant_replay, tasks))
    else:
        summaries = [_variant_replay(t) for t in tasks]
    out: dict[str, dict[str, Summary]] = defaultdict(dict)
    for (variant, policy, *_), summary in zip(tasks, summaries, strict=True):
        out[variant.name][policy] = summary
    return dict(out)


@dataclass(frozen=True, slots=True)
class GoalCell:
    """One goal on one sample: whether it held, and the figure it was judged by."""

    held: bool
    text: str


def goal_cells(fifo: Summary, backfill: Summary, ty: Summary) -> dict[str, GoalCell]:
    """Issue 28's goals for one replay of the three policies: whether each held, and its figure."""
    over_10m = ty.waited.get("10m", {})
    est, now, median = (over_10m.get(k, 0.0) for k in ("estimate", "starts_now", "pool_median"))
    jct_fifo, jct_bf = ty.avg_jct_s / fifo.avg_jct_s, ty.avg_jct_s / backfill.avg_jct_s
    p99_bf = ty.p99_jct_s / backfill.p99_jct_s
    return {
        "jct <= 0.6 fifo": GoalCell(jct_fifo <= 0.6, f"{jct_fifo:.2f}×"),
        "jct <= 0.9 backfill": GoalCell(jct_bf <= 0.9, f"{jct_bf:.2f}×"),
        "jain >= 0.85": GoalCell(ty.jain_slowdown >= 0.85, f"{ty.jain_slowdown:.3f}"),
        "p99 <= backfill": GoalCell(p99_bf <= 1.0, f"{p99_bf:.2f}×"),
        "preempted <= 10": GoalCell(ty.max_preemptions_per_job <= 10, f"{ty.max_preemptions_per_job}"),
        "est > 10m >= 0.7": GoalCell(est >= 0.7, f"{est:.1%}"),
        "est beats baselines": GoalCell(est > max(now, median), f"{est:.0%} vs {max(now, median):.0%}"),
        "busy >= backfill": GoalCell(ty.busy_while_waiting >= backfill.busy_while_waiting,
                                     f"{ty.busy_while_waiting:.3f} vs {backfill.busy_while_waiting:.3f}"),
    }


def goals(fifo: Summary, backfill: Summary, ty: Summary) -> dict[str, bool]:
    """Issue 28's goals for one replay of the three policies."""
    return {name: cell.held for name, cell in goal_cells(fifo, backfill, ty).items()}


def format_variants(results: dict[str, dict[str, Summary]]) -> str:
    """One line per variant: trainyard against the baselines, and which goals held."""
    head = (f"{'variant':11}{'nodes':>6}{'JCT/fifo':>9}{'JCT/bf':>8}{'Jain':>7}{'p99/bf':>8}{'maxpre':>7}"
            f"{'est>10m':>8}{'now':>6}{'median':>7}{'est>1h':>7}{'requeue':>8}{'busy':>6}{'bf busy':>8}  goals missed")
    lines = [head]
    for name, by_policy in results.items():
        fifo, bf, ty = by_policy["fifo"], by_policy["backfill"], by_policy["trainyard"]
        w10, w1h = ty.waited.get("10m", {}), ty.waited.get("1h", {})
        missed = [goal for goal, ok in goals(fifo, bf, ty).items() if not ok]
        lines.append(
            f"{name:11}{ty.nodes:6d}{ty.avg_jct_s / fifo.avg_jct_s:9.3f}{ty.avg_jct_s / bf.avg_jct_s:8.3f}"
            f"{ty.jain_slowdown:7.3f}{ty.p99_jct_s / bf.p99_jct_s:8.3f}{ty.max_preemptions_per_job:7d}"
            f"{w10.get('estimate', 0.0):8.3f}{w10.get('starts_now', 0.0):6.3f}{w10.get('pool_median', 0.0):7.3f}"
            f"{w1h.get('estimate', 0.0):7.3f}{ty.requeued.get('10m', {}).get('estimate', 0.0):8.3f}"
            f"{ty.busy_while_waiting:6.3f}{bf.busy_while_waiting:8.3f}  {', '.join(missed) or '-'}"
        )
    return "\n".join(lines)


def policy_with(policy: Policy, overrides: Sequence[str]) -> Policy:
    """`policy` with each FIELD=VALUE of `overrides` set, the value read as the field's type."""
    changes: dict[str, Any] = {}  # each value of its field's type, read below
    for item in overrides:
        name, _, text = item.partition("=")
        if name not in Policy.__dataclass_fields__ or not text:
            raise ValueError(f"--set {item!r}: expected FIELD=VALUE with a field of Policy")
        current = getattr(policy, name)
        if isinstance(current, bool):
            changes[name] = text.lower() in ("1", "true", "yes", "on")
        else:
            changes[name] = type(current)(text)
    return replace(policy, **changes)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("trace")
    parser.add_argument("--nodes", type=int, required=True)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--policy", choices=[*POLICIES, "all"], default="trainyard")
    parser.add_argument("--json", dest="json_out")
    parser.add_argument("--limit", type=int)
    parser.add_argument("--no-estimates", action="store_true",
                        help="skip the at-submission estimates (and so their promises: Policy.promise_estimates)")
    parser.add_argument("--perturb", type=int, metavar="SEED", help="replay another sample of the same kind (see `perturb`)")
    parser.add_argument("--variants", action="store_true",
                        help="every policy on the trace and on VARIANTS (other seeds, 0.7x and 1.3x load, 30 and 60 "
                             "nodes); one line each; only trainyard's replays estimate")
    parser.add_argument("--sample", choices=[v.name for v in VARIANTS],
                        help="replay one of --variants' samples alone (its seed, load and nodes)")
    parser.add_argument("--breakdown", type=int, default=0, metavar="TEAMS",
                        help="print (and write with --json) where the slowdown of the TEAMS worst-off teams goes: "
                             "by the jobs' width and length, first start or after it")
    parser.add_argument("--report", metavar="HTML",
                        help="write the replay as charts to this HTML page (self-contained): JCT distribution, each "
                             "team's slowdown, stops per run, estimates against waits; with --variants, the goals")
    parser.add_argument("--workers", type=int, default=1, help="replays at once with --variants")
    parser.add_argument("--reuse", metavar="JSON",
                        help="with --variants and one --policy: the other policies' figures from this earlier --json")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="FIELD=VALUE",
                        help="replay trainyard with this `Policy` field changed (repeatable), e.g. starve_factor=3")
    defaults = Preemptible()
    parser.add_argument("--checkpoint-every", type=float, default=defaults.checkpoint_every_s, metavar="S",
                        help="seconds between a job's checkpoints (work since the last one is lost when it is stopped)")
    parser.add_argument("--grace", type=float, default=defaults.grace_s, metavar="S",
                        help="seconds a stopped job takes to exit")
    parser.add_argument("--restart", type=float, default=defaults.restart_s, metavar="S",
                        help="seconds a resumed job spends loading before it makes progress")
    parser.add_argument("--guarantee-share", type=float, default=1.0, metavar="F",
                        help="share of the cluster the teams' equal guarantees add up to (0 to 1; 0: no "
                             "guarantees, every run may be preempted)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if not 0.0 <= args.guarantee_share <= 1.0:
        parser.error(f"--guarantee-share must be between 0 and 1 (got {args.guarantee_share:g})")
    if args.report and not Path(args.report).resolve().parent.is_dir():
        parser.error(f"--report {args.report}: folder {Path(args.report).resolve().parent} does not exist")
    try:
        resume = Preemptible(checkpoint_every_s=args.checkpoint_every, grace_s=args.grace, restart_s=args.restart)
        POLICIES["trainyard"] = policy_with(POLICIES["trainyard"], args.overrides)
    except ValueError as exc:
        parser.error(str(exc))
    if args.variants:
        if args.sample or args.breakdown:
            parser.error("--sample and --breakdown replay one sample: leave out --variants")
        return _main_variants(args, resume)
    if args.sample and args.perturb is not None:
        parser.error("--sample names its own seed: leave out --perturb")
    if args.breakdown < 0:
        parser.error(f"--breakdown must be 0 or more teams (got {args.breakdown})")
    jobs = load_trace(args.trace, args.limit)
    nodes = args.nodes
    if args.sample:
        variant = next(v for v in VARIANTS if v.name == args.sample)
        jobs, nodes = variant.jobs(jobs), variant.nodes or nodes
    if args.perturb is not None:
        jobs = perturb(jobs, seed=args.perturb)
    names = list(POLICIES) if args.policy == "all" else [args.policy]
    replays = [
        replay(jobs, nodes=nodes, gpus_per_node=args.gpus_per_node, policy=name,
               estimates=not args.no_estimates, preemptible=resume, guarantee_share=args.guarantee_share)
        for name in names
    ]
    summaries = [summary for summary, _ in replays]
    print(format_table(summaries))
    breakdowns = {s.policy: slowdown_breakdown(sim.outcomes, teams=args.breakdown) for s, sim in replays} if args.breakdown else {}
    for policy, rows in breakdowns.items():
        print(format_breakdown(policy, rows))
    if args.json_out:
        payload: dict[str, Any] = {"trace": str(args.trace), "results": [asdict(s) for s in summaries]}
        if args.sample:
            payload["sample"] = args.sample
        if breakdowns:
            payload["breakdown"] = {policy: [asdict(r) for r in rows] for policy, rows in breakdowns.items()}
        Path(args.json_out).write_text(json.dumps(payload, indent=2) + "\n")
    if args.report:
        title = f"Replay of {Path(args.trace).name}" + (f", sample {args.sample}" if args.sample else "")
        Path(args.report).write_text(report_page(title, replays))
        print(f"report: {args.report}")
    return 0


def report_page(title: str, replays: Sequence[tuple[Summary, Replay]]) -> str:
    """`replay_report.replay_page` for these replays of one sample, one per policy."""
    from apps.scheduling import replay_report  # plotly only for a report

    return replay_report.replay_page(title, {s.policy: sim.outcomes for s, sim in replays},
                                     {s.policy: s for s, _ in replays}, {s.policy: sim.requeues for s, sim in replays})


def _main_variants(args: argparse.Namespace, resume: Preemptible) -> int:
    policies = list(POLICIES) if args.policy == "all" else [args.policy]
    results = run_variants(args.trace, nodes=args.nodes, gpus_per_node=args.gpus_per_node, resume=resume,
                           limit=args.limit, workers=args.workers, policies=policies,
                           estimates=not args.no_estimates, guarantee_share=args.guarantee_share)
    if args.reuse:
        for variant in json.loads(Path(args.reuse).read_text())["variants"]:
            for row in variant["results"]:
                results.setdefault(variant["name"], {}).setdefault(row["policy"], Summary(**row))
    if all(set(by_policy) >= set(POLICIES) for by_policy in results.values()):
        print(format_variants({v.name: results[v.name] for v in VARIANTS if v.name in results}))
    if args.json_out:
        payload = {"trace": str(args.trace), "variants": [
            {**asdict(v), "nodes": v.nodes or args.nodes,
             "results": [asdict(s) for _, s in sorted(results[v.name].items(), key=lambda kv: list(POLICIES).index(kv[0]))]}
            for v in VARIANTS if v.name in results]}
        Path(args.json_out).write_text(json.dumps(payload, indent=2) + "\n")
    for name, by_policy in results.items():
        for summary in by_policy.values():
            print(f"{name:11} {summary.policy:10} {summary.cpu_s:7.1f} s CPU {summary.wall_s:7.1f} s wall")
    if args.report:
        _write_goals_report(args, results)
    return 0


def _write_goals_report(args: argparse.Namespace, results: dict[str, dict[str, Summary]]) -> None:
    from apps.scheduling import replay_report  # plotly only for a report

    grid = {v.name: goal_cells(*(results[v.name][p] for p in ("fifo", "backfill", "trainyard")))
            for v in VARIANTS if set(results.get(v.name, {})) >= {"fifo", "backfill", "trainyard"}}
    if not grid:
        print("report: not written: the goals need fifo, backfill and trainyard (--policy all, or --reuse)")
        return
    intro = (f"{Path(args.trace).name} on {args.nodes} nodes and its variants: trainyard against FIFO and "
             "FIFO+backfill. Each cell is trainyard's figure; × means times the baseline's.")
    Path(args.report).write_text(replay_report.page(f"Issue 28's goals: {Path(args.trace).name}", intro,
                                                    [replay_report.goals_figure(grid)]))
    print(f"report: {args.report}")


if __name__ == "__main__":
    sys.exit(main())
