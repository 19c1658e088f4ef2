"""Where a replay's slowdown goes, team by team (issue 28's Jain's index is over the teams' mean
slowdowns): for the teams with the highest mean slowdown, the excess (mean slowdown less one)
split by the jobs' width and length, and into the wait for a first start and what came after it
(waits to resume after stops, with the work they redid and their restarts)."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

# (the bound a value stays under, the bucket's name), smallest first.
WIDTHS = ((2, "1 device"), (5, "2-4 devices"), (9, "5-8 devices"), (math.inf, "over 8 devices"))
LENGTHS = ((600.0, "under 10 min"), (3600.0, "10 min-1 h"), (8 * 3600.0, "1-8 h"), (72 * 3600.0, "8 h-3 d"),
           (math.inf, "over 3 d"))


class TraceJobLike(Protocol):
    """What the breakdown reads of a trace job (`trace.TraceJob`)."""

    @property
    def team(self) -> str: ...
    @property
    def gpus(self) -> int: ...
    @property
    def duration_s(self) -> float: ...


class Outcome(Protocol):
    """What the breakdown reads of a finished job (`trace.JobOutcome`)."""

    @property
    def job(self) -> TraceJobLike: ...
    @property
    def wait(self) -> float: ...
    @property
    def jct(self) -> float: ...
    @property
    def preempted(self) -> int: ...


@dataclass(frozen=True, slots=True)
class Part:
    """One width and length of a team's jobs; `excess`, `first_wait` and `after_start` are shares
    of the team's mean slowdown (they add up, over all parts, to its mean slowdown less one)."""

    width: str
    length: str
    jobs: int
    excess: float
    first_wait: float
    after_start: float
    stops_per_job: float


@dataclass(frozen=True, slots=True)
class TeamBreakdown:
    team: str
    jobs: int
    mean_slowdown: float
    parts: tuple[Part, ...]


def run_length(outcome: Outcome) -> float:
    """The duration slowdown divides by: at least 1 s, so a zero-length job has one too."""
    return max(outcome.job.duration_s, 1.0)


def slowdown(outcome: Outcome) -> float:
    """JCT over duration: the figure `trace_replay.summarize` averages per team for Jain's index."""
    return outcome.jct / run_length(outcome)


def _bucket(value: float, buckets: Sequence[tuple[float, str]]) -> str:
    return next(name for bound, name in buckets if value < bound)


def length_bucket(duration_s: float) -> str:
    """The name of the `LENGTHS` bucket a run of `duration_s` seconds falls in."""
    return _bucket(duration_s, LENGTHS)


def slowdown_breakdown(outcomes: Sequence[Outcome], *, teams: int, parts: int = 5) -> list[TeamBreakdown]:
    """The `teams` teams with the highest mean slowdown, worst first, each with its `parts`
    largest parts of the excess (`slowdown`)."""
    by_team: dict[str, list[Outcome]] = defaultdict(list)
    for o in outcomes:
        by_team[o.job.team].append(o)
    rows: list[TeamBreakdown] = []
    for team, mine in by_team.items():
        n = len(mine)
        # (width, length) -> [jobs, excess, first wait, after the first start, stops]
        sums: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0, 0.0, 0.0, 0.0, 0])
        total = 0.0
        for o in mine:
            ratio, first = slowdown(o), o.wait / run_length(o)
            total += ratio
            row = sums[_bucket(o.job.gpus, WIDTHS), length_bucket(o.job.duration_s)]
            row[0] += 1
            row[1] += (ratio - 1) / n
            row[2] += first / n
            row[3] += (ratio - 1 - first) / n
            row[4] += o.preempted
        ranked = sorted(sums.items(), key=lambda kv: (-kv[1][1], kv[0]))[:parts]
        rows.append(TeamBreakdown(
            team=team,
            jobs=n,
            mean_slowdown=total / n,
            parts=tuple(
                Part(width=w, length=ln, jobs=int(r[0]), excess=r[1], first_wait=r[2], after_start=r[3],
                     stops_per_job=r[4] / r[0])
                for (w, ln), r in ranked
            ),
        ))
    rows.sort(key=lambda r: (-r.mean_slowdown, r.team))
    return rows[:teams]


def format_breakdown(policy: str, rows: Sequence[TeamBreakdown]) -> str:
    lines = [f"{policy}: where the slowdown goes (mean slowdown less one, as shares of each team's mean)"]
    for r in rows:
        lines.append(f"  {r.team}: mean slowdown {r.mean_slowdown:.2f} over {r.jobs} jobs")
        for p in r.parts:
            lines.append(
                f"    {p.width:>14}, {p.length:>12}: {p.jobs:6d} jobs  excess {p.excess:6.2f}  "
                f"(first start {p.first_wait:5.2f}, after it {p.after_start:5.2f})  {p.stops_per_job:4.1f} stops a job"
            )
    return "\n".join(lines)
