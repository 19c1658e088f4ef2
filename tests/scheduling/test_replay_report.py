"""A replay as pictures (`replay_report`, `simulate --report`): the charts' data against hand-made
outcomes and against the replay's own summary, and the command line's pages."""

from __future__ import annotations

from pathlib import Path

import pytest

from apps.scheduling.replay_report import estimate_points, jct_curve, requeue_waits, stop_counts, submission_waits
from apps.scheduling.simulate import goal_cells, goals, main
from apps.scheduling.trace import JobOutcome, TraceJob
from apps.scheduling.trace_replay import Requeue, replay, replay_trace
from tests.scheduling.test_simulate import synthetic, write_trace

H = 3600.0


def outcome(job_id: str, submit: float, start: float, end: float, estimate: float | None,
            stops: int = 0) -> JobOutcome:
    job = TraceJob(id=job_id, team="a", submit_s=submit, gpus=1, duration_s=end - start, job_type="t")
    attempts = tuple((start + i, start + i + 1) for i in range(stops)) + ((start + stops, end),)
    return JobOutcome(job, start, end, estimate, attempts)


def test_jct_curve_is_the_distribution_and_keeps_the_slowest_run() -> None:
    outcomes = [outcome(str(i), 0.0, 0.0, (i + 1) * H, None) for i in range(10_000)]
    x, y = jct_curve(outcomes, points=300)
    assert len(x) == len(y) <= 301
    assert x == sorted(x) and y == sorted(y)
    assert (x[-1], y[-1]) == (10_000.0, 1.0)
    # Each point is a run's JCT and the share of runs done by then (the JCTs are 1..10,000 h).
    assert all(share == pytest.approx(hours / 10_000) for hours, share in zip(x, y, strict=True))
    # Two thirds of the points spread over the first nine tenths, a third over the slowest tenth,
    # where p99 is judged.
    assert sum(1 for share in y if share <= 0.9) >= 195 and sum(1 for share in y if share > 0.9) >= 95
    few = [outcome(str(i), 0.0, 0.0, h * H, None) for i, h in enumerate((3.0, 1.0, 2.0))]
    assert jct_curve(few) == ([1.0, 2.0, 3.0], pytest.approx([1 / 3, 2 / 3, 1.0]))
    assert jct_curve([]) == ([], [])


def test_stop_counts_cover_every_count_up_to_the_most() -> None:
    outcomes = [outcome("1", 0, 0, 10, None), outcome("2", 0, 0, 10, None, stops=3), outcome("3", 0, 0, 10, None, stops=3)]
    assert stop_counts(outcomes) == {0: 1, 1: 0, 2: 0, 3: 2}
    assert stop_counts([]) == {}


def test_estimate_points_score_the_runs_that_waited_as_the_replay_does() -> None:
    outcomes = [
        outcome("short", 0.0, 500.0, H, 0.0),                # waited under 10 minutes: not counted
        outcome("close", 0.0, 2 * H, 3 * H, 2.4 * H),        # 24 min off a 2 h wait: within 30 min
        outcome("far", 10.0, 10.0 + 2 * H, 3 * H, 10.0 + 3 * H),  # an hour off: outside
        outcome("none", 20.0, 20.0 + H, 3 * H, None),        # no estimate: counted, not drawn
    ]
    points = estimate_points(submission_waits(outcomes))
    assert (points.runs, points.within, points.missing) == (3, 1, 1)
    assert points.share == pytest.approx(1 / 3)
    assert points.points == [(2.0, pytest.approx(2.4), True), (2.0, pytest.approx(3.0), False)]
    assert len(estimate_points(submission_waits(outcomes), limit=1).points) == 1
    # At a requeue the wait runs from the stop; one that never restarted has no wait to score.
    back = [Requeue("a", at=H, median_wait=0.0, estimate=3 * H, start=3.2 * H),
            Requeue("b", at=H, median_wait=0.0, estimate=2 * H)]
    assert requeue_waits(back) == [(H, 3.2 * H, 3 * H)]
    again = estimate_points(requeue_waits(back))
    assert (again.runs, again.within) == (1, 1) and again.points == [(pytest.approx(2.2), 2.0, True)]


def test_a_replays_pictures_agree_with_its_summary() -> None:
    summary, sim = replay(synthetic(150, seed=3, rate_s=60.0), nodes=1, policy="trainyard")
    outcomes = sim.outcomes
    points = estimate_points(submission_waits(outcomes), limit=10)
    assert points.runs == summary.waited["10m"]["jobs"] > 10
    assert points.share == pytest.approx(summary.waited["10m"]["estimate"])
    assert len(points.points) <= 10
    again = estimate_points(requeue_waits(sim.requeues))
    assert again.runs == summary.requeued["10m"]["jobs"] > 10
    assert again.share == pytest.approx(summary.requeued["10m"]["estimate"])
    stops = stop_counts(outcomes)
    assert sum(stops.values()) == summary.jobs and max(stops) == summary.max_preemptions_per_job
    assert sum(n for k, n in stops.items() if k >= 5) == summary.jobs_preempted_5_plus
    x, _ = jct_curve(outcomes)
    assert x[-1] == pytest.approx(max(o.jct for o in outcomes) / H)


def test_goal_cells_hold_where_goals_do_and_write_the_figure() -> None:
    fifo, _ = replay_trace(synthetic(80, seed=1, rate_s=60.0), nodes=1, policy="fifo", estimates=False)
    backfill, _ = replay_trace(synthetic(80, seed=1, rate_s=60.0), nodes=1, policy="backfill", estimates=False)
    ty, _ = replay_trace(synthetic(80, seed=1, rate_s=60.0), nodes=1, policy="trainyard")
    cells = goal_cells(fifo, backfill, ty)
    assert {name: cell.held for name, cell in cells.items()} == goals(fifo, backfill, ty)
    assert cells["jain >= 0.85"].text == f"{ty.jain_slowdown:.3f}"
    assert cells["preempted <= 10"].text == str(ty.max_preemptions_per_job)
    assert cells["jct <= 0.9 backfill"].text == f"{ty.avg_jct_s / backfill.avg_jct_s:.2f}×"
    # The same run against itself: p99 no worse than its own holds, at 1.00×.
    same = goal_cells(backfill, backfill, backfill)["p99 <= backfill"]
    assert same.held and same.text == "1.00×"


def test_cli_writes_a_self_contained_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = [(j.id, j.team, j.submit_s, j.gpus, j.duration_s, j.job_type) for j in synthetic(120, seed=4, rate_s=60.0)]
    trace = write_trace(tmp_path / "t.csv", rows)
    report = tmp_path / "replay.html"
    assert main([str(trace), "--nodes", "1", "--policy", "all", "--report", str(report)]) == 0
    assert f"report: {report}" in capsys.readouterr().out
    text = report.read_text()
    # Plotly.js inline once (no network to open it), then one section per chart.
    assert text.count("<script>/**") == 1 and "<script src" not in text
    for title in ("How long runs took", "Each team's mean slowdown", "How often runs were stopped",
                  "Times stopped by run length", "trainyard: the estimate at submission against the wait",
                  "trainyard: the estimate made when a stopped run went back in line"):
        assert title in text
    assert text.count('<section class="chart">') >= 6
    # A policy that stops no run has no stops to draw.
    fifo = tmp_path / "fifo.html"
    assert main([str(trace), "--nodes", "1", "--policy", "fifo", "--no-estimates", "--report", str(fifo)]) == 0
    text = fifo.read_text()
    assert text.count('<section class="chart">') == 2 and "How often runs were stopped" not in text

    goals_page = tmp_path / "goals.html"
    assert main([str(trace), "--nodes", "1", "--variants", "--policy", "all", "--report", str(goals_page)]) == 0
    text = goals_page.read_text()
    assert text.count('<section class="chart">') == 1 and "Issue 28" in text and "30 nodes" in text
    # Without the baselines there is nothing to judge the goals by: said, and no page.
    alone = tmp_path / "alone.html"
    assert main([str(trace), "--nodes", "1", "--variants", "--policy", "fifo", "--report", str(alone)]) == 0
    assert "report: not written: the goals need fifo, backfill and trainyard" in capsys.readouterr().out
    assert not alone.exists()
    with pytest.raises(SystemExit):
        main([str(trace), "--nodes", "1", "--report", str(tmp_path / "missing" / "r.html")])
    assert f"--report {tmp_path / 'missing' / 'r.html'}: folder {tmp_path / 'missing'} does not exist" in (
        capsys.readouterr().err)
