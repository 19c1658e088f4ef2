"""Where a replay's slowdown goes (`breakdown.slowdown_breakdown`, `simulate --breakdown`): hand-made
outcomes with known shares, and the command line on a small synthetic trace."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from apps.scheduling.breakdown import format_breakdown, slowdown_breakdown
from apps.scheduling.simulate import main
from apps.scheduling.trace import JobOutcome, TraceJob
from apps.scheduling.trace_replay import replay_trace
from tests.scheduling.test_simulate import synthetic, write_trace

H = 3600.0


def outcome(job_id: str, team: str, gpus: int, duration: float, attempts: list[tuple[float, float]]) -> JobOutcome:
    job = TraceJob(id=job_id, team=team, submit_s=0.0, gpus=gpus, duration_s=duration, job_type="t")
    return JobOutcome(job, attempts[0][0], attempts[-1][1], None, tuple(attempts))


def test_shares_add_up_to_each_teams_excess_and_split_first_wait_from_what_came_after() -> None:
    outcomes = [
        # Team a: a 1-device run of 1,000 s that waited 500 s to start (slowdown 1.5, all first wait) ...
        outcome("1", "a", 1, 1000.0, [(500.0, 1500.0)]),
        # ... and an 8-device run of 10 h stopped once after 1 h, resumed 10 h later (slowdown 2).
        outcome("2", "a", 8, 10 * H, [(0.0, H), (11 * H, 20 * H)]),
        outcome("3", "b", 2, 2 * H, [(0.0, 2 * H)]),
    ]
    worst, best = slowdown_breakdown(outcomes, teams=5)
    assert (worst.team, worst.jobs, best.team) == ("a", 2, "b")
    assert worst.mean_slowdown == pytest.approx(1.75) and best.mean_slowdown == pytest.approx(1.0)
    gang, narrow = worst.parts
    assert (gang.width, gang.length, gang.jobs, gang.stops_per_job) == ("5-8 devices", "8 h-3 d", 1, 1.0)
    # Shares of the team's mean: the gang's excess of 1 over two jobs, all of it after its first start.
    assert (gang.excess, gang.first_wait, gang.after_start) == pytest.approx((0.5, 0.0, 0.5))
    assert (narrow.width, narrow.length, narrow.stops_per_job) == ("1 device", "10 min-1 h", 0.0)
    assert (narrow.excess, narrow.first_wait, narrow.after_start) == pytest.approx((0.25, 0.25, 0.0))
    assert math.fsum(p.excess for p in worst.parts) == pytest.approx(worst.mean_slowdown - 1)
    # Only the worst teams, and only their largest parts.
    (only,) = slowdown_breakdown(outcomes, teams=1, parts=1)
    assert only.team == "a" and only.parts == (gang,)
    text = format_breakdown("trainyard", [only])
    assert "a: mean slowdown 1.75 over 2 jobs" in text and "5-8 devices" in text and "1.0 stops a job" in text


def test_buckets_put_each_bound_in_the_larger_bucket() -> None:
    rows = slowdown_breakdown(
        [outcome("1", "a", 2, 600.0, [(0.0, 600.0)]), outcome("2", "a", 9, 72 * H, [(0.0, 72 * H)])], teams=1
    )
    assert {(p.width, p.length) for p in rows[0].parts} == {("2-4 devices", "10 min-1 h"), ("over 8 devices", "over 3 d")}


def test_a_replay_breaks_down_to_its_own_summary() -> None:
    summary, outcomes = replay_trace(synthetic(120, seed=5, rate_s=60.0), nodes=1, policy="trainyard", estimates=False)
    rows = slowdown_breakdown(outcomes, teams=10, parts=100)
    assert {r.team: r.mean_slowdown for r in rows} == pytest.approx(summary.team_slowdown)
    for r in rows:
        assert math.fsum(p.excess for p in r.parts) == pytest.approx(r.mean_slowdown - 1)
        assert sum(p.jobs for p in r.parts) == r.jobs


def test_cli_replays_one_sample_and_writes_the_breakdown(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = [(j.id, j.team, j.submit_s, j.gpus, j.duration_s, j.job_type) for j in synthetic(60, seed=2, rate_s=100.0)]
    trace = write_trace(tmp_path / "t.csv", rows)
    out = tmp_path / "b.json"
    assert main([str(trace), "--nodes", "2", "--sample", "60 nodes", "--policy", "fifo", "--no-estimates",
                 "--breakdown", "2", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "fifo: where the slowdown goes" in printed
    payload = json.loads(out.read_text())
    assert payload["sample"] == "60 nodes" and payload["results"][0]["nodes"] == 60
    teams = payload["breakdown"]["fifo"]
    assert 1 <= len(teams) <= 2
    assert teams[0]["mean_slowdown"] == pytest.approx(max(payload["results"][0]["team_slowdown"].values()))
    # What makes no sense together is refused, naming the flags.
    for argv, message in (
        (["--variants", "--breakdown", "2"], "--sample and --breakdown replay one sample: leave out --variants"),
        (["--sample", "seed 1", "--perturb", "3"], "--sample names its own seed: leave out --perturb"),
        (["--breakdown", "-1"], "--breakdown must be 0 or more teams (got -1)"),
    ):
        with pytest.raises(SystemExit):
            main([str(trace), "--nodes", "2", *argv])
        assert message in capsys.readouterr().err
