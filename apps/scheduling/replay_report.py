"""A replay as pictures (`simulate --report`): one self-contained HTML page, Plotly.js inline
(no network needed to open it), with what issue 28's table says in numbers drawn instead: how
long runs took under each policy and where the tail parts from backfill's, each team's mean
slowdown (what Jain's index is taken over), how often runs were stopped, and how the estimates
of runs that really waited compare with their waits. With `--variants`, which goal held where."""

from __future__ import annotations

import html
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import plotly.graph_objects as go

from apps.scheduling.breakdown import LENGTHS, TraceJobLike, length_bucket
from apps.scheduling.breakdown import Outcome as BreakdownOutcome
from apps.scheduling.estimate import close_margin

# The bars drawn on the charts: stops of one run, waits that count as "really waited".
STOPS_CAP = 10
WAITED_S = 600.0
# A log axis cannot show a zero wait: waits and estimates under a minute are drawn at one minute.
FLOOR_H = 1 / 60
COLOURS = {"fifo": "#8c8c8c", "backfill": "#1f77b4", "trainyard": "#d62728"}


class _Job(TraceJobLike, Protocol):
    @property
    def submit_s(self) -> float: ...


class Outcome(BreakdownOutcome, Protocol):
    """What the report reads of a finished job (`trace.JobOutcome`)."""

    @property
    def job(self) -> _Job: ...
    @property
    def start(self) -> float: ...
    @property
    def estimated_start(self) -> float | None: ...


class Figures(Protocol):
    """What the report reads of a replay's summary (`trace_replay.Summary`)."""

    @property
    def policy(self) -> str: ...
    @property
    def jobs(self) -> int: ...
    @property
    def nodes(self) -> int: ...
    @property
    def avg_jct_s(self) -> float: ...
    @property
    def p99_jct_s(self) -> float: ...
    @property
    def jain_slowdown(self) -> float: ...
    @property
    def max_preemptions_per_job(self) -> int: ...
    @property
    def team_slowdown(self) -> dict[str, float]: ...


def jct_curve(outcomes: Sequence[Outcome], points: int = 500) -> tuple[list[float], list[float]]:
    """(JCT hours, share of runs done by then): the distribution at about `points` points, a
    third of them in the slowest 10%, where the tail goal is judged."""
    jcts = sorted(o.jct / 3600.0 for o in outcomes)
    n = len(jcts)
    if n == 0:
        return [], []
    body, tail = points * 2 // 3, points - points * 2 // 3
    shares = [0.9 * i / max(1, body) for i in range(body)] + [0.9 + 0.1 * i / max(1, tail - 1) for i in range(tail)]
    picks = sorted({min(n - 1, round(q * (n - 1))) for q in shares} | {n - 1})
    return [jcts[i] for i in picks], [(i + 1) / n for i in picks]


def stop_counts(outcomes: Sequence[Outcome]) -> dict[int, int]:
    """How many runs were stopped k times, for every k from 0 to the most."""
    counts = Counter(o.preempted for o in outcomes)
    return {k: counts.get(k, 0) for k in range(max(counts, default=-1) + 1)}


# A wait and its estimate: (since, start, estimated start or None), all in seconds. `since` is
# the submission for an at-submission estimate, the stop for one made at a requeue.
Wait = tuple[float, float, float | None]


class Requeue(Protocol):
    """A preempted run's return to the line (`trace_replay.Requeue`)."""

    @property
    def at(self) -> float: ...
    @property
    def estimate(self) -> float | None: ...
    @property
    def start(self) -> float | None: ...


def submission_waits(outcomes: Sequence[Outcome]) -> list[Wait]:
    return [(o.job.submit_s, o.start, o.estimated_start) for o in outcomes]


def requeue_waits(requeues: Sequence[Requeue]) -> list[Wait]:
    """The requeues that ended in a restart (a run may finish while stopping, and not restart)."""
    return [(r.at, r.start, r.estimate) for r in requeues if r.start is not None]


@dataclass(frozen=True, slots=True)
class EstimatePoints:
    """The waits over `WAITED_S`: each drawn one's (wait h, estimated wait h, within max(10 min,
    25% of the wait)); `runs`, `within` and `missing` (no estimate) count them all."""

    points: list[tuple[float, float, bool]]
    runs: int
    within: int
    missing: int

    @property
    def share(self) -> float:
        return self.within / self.runs if self.runs else 0.0


def estimate_points(waits: Sequence[Wait], limit: int = 3000) -> EstimatePoints:
    """The estimates of the waits over `WAITED_S`, scored as `simulate` scores them; at most
    `limit` drawn (every k-th in time), all counted."""
    waited = sorted((w for w in waits if w[1] - w[0] > WAITED_S), key=lambda w: w[0])
    rows: list[tuple[float, float, bool]] = []
    missing = within = 0
    for since, start, guess in waited:
        if guess is None:
            missing += 1
            continue
        ok = abs(guess - start) <= close_margin(start - since)
        within += ok
        rows.append(((start - since) / 3600.0, (guess - since) / 3600.0, ok))
    step = max(1, -(-len(rows) // limit))
    return EstimatePoints(points=rows[::step], runs=len(waited), within=within, missing=missing)


def _layout(fig: go.Figure, title: str, x: str, y: str, *, x_log: bool = False, y_log: bool = False) -> go.Figure:
    fig.update_layout(title=title, template="plotly_white", height=440, margin={"t": 80, "b": 50, "l": 60, "r": 20},
                      legend={"orientation": "h", "y": -0.18})
    fig.update_xaxes(title=x, type="log" if x_log else None)
    fig.update_yaxes(title=y, type="log" if y_log else None)
    return fig


def jct_figure(replays: Mapping[str, Sequence[Outcome]], summaries: Mapping[str, Figures]) -> go.Figure:
    fig = go.Figure()
    for policy, outcomes in replays.items():
        x, y = jct_curve(outcomes)
        p99 = summaries[policy].p99_jct_s / 3600.0
        fig.add_trace(go.Scatter(x=x, y=y, mode="lines", name=f"{policy} (p99 {p99:,.0f} h)",
                                 line={"color": COLOURS.get(policy)}))
        fig.add_vline(x=p99, line={"dash": "dot", "color": COLOURS.get(policy, "#444"), "width": 1})
    fig.add_hline(y=0.99, line={"dash": "dot", "color": "#999", "width": 1})
    return _layout(fig, "How long runs took: share of runs done within each time (dotted: each policy's p99)",
                   "job completion time, hours (log)", "share of runs", x_log=True)


def slowdown_figure(summaries: Mapping[str, Figures]) -> go.Figure:
    teams = sorted({t for s in summaries.values() for t in s.team_slowdown},
                   key=lambda t: -max(s.team_slowdown.get(t, 0.0) for s in summaries.values()))
    fig = go.Figure()
    for policy, s in summaries.items():
        fig.add_trace(go.Bar(x=teams, y=[s.team_slowdown.get(t) for t in teams], marker_color=COLOURS.get(policy),
                             name=f"{policy} (Jain's index {s.jain_slowdown:.3f})"))
    fig.update_layout(barmode="group")
    return _layout(fig, "Each team's mean slowdown (JCT ÷ run time; Jain's index is taken over these)",
                   "team, worst off first", "mean slowdown (log)", y_log=True)


def stops_figure(replays: Mapping[str, Sequence[Outcome]]) -> go.Figure:
    fig = go.Figure()
    for policy, outcomes in replays.items():
        counts = stop_counts(outcomes)
        if len(counts) <= 1:
            continue  # never stopped a run: nothing to draw
        over = sum(n for k, n in counts.items() if k > STOPS_CAP)
        fig.add_trace(go.Bar(x=list(counts), y=list(counts.values()), marker_color=COLOURS.get(policy),
                             name=f"{policy}: {over:,} runs stopped over {STOPS_CAP} times"))
    fig.add_vline(x=STOPS_CAP + 0.5, line={"dash": "dash", "color": "#333"},
                  annotation_text=f"issue 28's cap: {STOPS_CAP}", annotation_position="top right")
    return _layout(fig, "How often runs were stopped", "times stopped", "runs (log)", y_log=True)


def stops_by_length_figure(replays: Mapping[str, Sequence[Outcome]]) -> go.Figure:
    """Times stopped by run length, as boxes: the runs past the cap are the long ones."""
    fig = go.Figure()
    order = [name for _, name in LENGTHS]
    for policy, outcomes in replays.items():
        if not any(o.preempted for o in outcomes):
            continue
        fig.add_trace(go.Box(x=[length_bucket(o.job.duration_s) for o in outcomes], y=[o.preempted for o in outcomes],
                             name=policy, marker_color=COLOURS.get(policy), boxpoints="outliers"))
    fig.add_hline(y=STOPS_CAP, line={"dash": "dash", "color": "#333"})
    fig.update_xaxes(categoryorder="array", categoryarray=order)
    return _layout(fig, "Times stopped by run length (dashed: the cap of 10)", "run length", "times stopped")


def estimate_figure(policy: str, points: EstimatePoints, *, requeue: bool = False) -> go.Figure:
    fig = go.Figure()
    for ok, name, colour in ((True, "within max(10 min, 25% of the wait)", "#2ca02c"), (False, "outside", "#d62728")):
        chosen = [p for p in points.points if p[2] == ok]
        fig.add_trace(go.Scattergl(x=[max(FLOOR_H, p[0]) for p in chosen], y=[max(FLOOR_H, p[1]) for p in chosen],
                                   mode="markers", name=name, marker={"color": colour, "size": 4, "opacity": 0.6}))
    top = max([FLOOR_H * 10] + [max(p[0], p[1]) for p in points.points])
    line = [FLOOR_H, top]
    fig.add_trace(go.Scatter(x=line, y=line, mode="lines", name="estimate = wait",
                             line={"color": "#333", "dash": "dot", "width": 1}))
    what = ("the estimate made when a stopped run went back in line, against its wait to restart<br>"
            f"{points.runs:,} waits over" if requeue else
            f"the estimate at submission against the wait<br>{points.runs:,} runs that waited over")
    title = (f"{policy}: {what} {WAITED_S / 60:.0f} minutes, {points.share:.1%} within max(10 min, 25% of the wait)"
             + (f"; {points.missing:,} without an estimate" if points.missing else ""))
    return _layout(fig, title, "actual wait, hours (log)", "estimated wait, hours (log)", x_log=True, y_log=True)


class GoalCell(Protocol):
    """One goal on one sample (`simulate.GoalCell`)."""

    @property
    def held(self) -> bool: ...
    @property
    def text(self) -> str: ...


def goals_figure(grid: Mapping[str, Mapping[str, GoalCell]]) -> go.Figure:
    """Samples down, goals across: green where the goal held, red where not, the figure written in."""
    samples = list(grid)
    names = list(dict.fromkeys(g for row in grid.values() for g in row))
    z = [[(1 if grid[s][g].held else 0) if g in grid[s] else None for g in names] for s in samples]
    text = [[grid[s][g].text if g in grid[s] else "" for g in names] for s in samples]
    fig = go.Figure(go.Heatmap(z=z, x=names, y=samples, text=text, texttemplate="%{text}", showscale=False,
                               colorscale=[[0, "#f4c7c3"], [1, "#b7e1cd"]], zmin=0, zmax=1, xgap=2, ygap=2))
    fig.update_yaxes(autorange="reversed")
    fig.update_layout(title="Issue 28's goals on each sample (green: held)", template="plotly_white",
                      height=120 + 48 * len(samples), margin={"t": 60, "b": 40, "l": 100, "r": 20})
    return fig


def page(title: str, intro: str, figures: Sequence[go.Figure]) -> str:
    """One HTML page, Plotly.js inline once, so that it opens anywhere without a network."""
    parts = [fig.to_html(full_html=False, include_plotlyjs=(i == 0), config={"displaylogo": False})
             for i, fig in enumerate(figures)]
    body = "\n".join(f'<section class="chart">{p}</section>' for p in parts)
    return (f"<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title>"
            "<style>body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}"
            ".chart{margin:1.5em 0}</style></head>\n"
            f"<body><h1>{html.escape(title)}</h1><p>{html.escape(intro)}</p>\n{body}\n</body></html>\n")


def replay_page(title: str, replays: Mapping[str, Sequence[Outcome]], summaries: Mapping[str, Figures],
                requeues: Mapping[str, Sequence[Requeue]] | None = None) -> str:
    """The report of one sample replayed under one or more policies (`requeues`: each policy's
    runs back in line after a stop, for the estimates made then)."""
    figures = [jct_figure(replays, summaries), slowdown_figure(summaries)]
    if any(o.preempted for outcomes in replays.values() for o in outcomes):
        figures += [stops_figure(replays), stops_by_length_figure(replays)]
    for policy, outcomes in replays.items():
        for points, again in ((estimate_points(submission_waits(outcomes)), False),
                              (estimate_points(requeue_waits((requeues or {}).get(policy, ()))), True)):
            if points.runs and points.missing < points.runs:
                figures.append(estimate_figure(policy, points, requeue=again))
    first = next(iter(summaries.values()))
    intro = (f"{first.jobs:,} jobs on {first.nodes} nodes; "
             + "; ".join(f"{p}: average JCT {s.avg_jct_s / 3600:,.1f} h, p99 {s.p99_jct_s / 3600:,.0f} h, "
                         f"Jain's index {s.jain_slowdown:.3f}, "
                         + (f"at most {s.max_preemptions_per_job} stops of one run" if s.max_preemptions_per_job
                            else "no run stopped")
                         for p, s in summaries.items()) + ".")
    return page(title, intro, figures)
