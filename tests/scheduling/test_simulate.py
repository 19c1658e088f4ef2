"""The trace simulator: small synthetic traces (fast), and the acceptance run on the real trace.

The real-trace tests replay all 13,716 jobs of tests/data/philly-vc-seed0.csv (or the
copy named by TRAINYARD_TRACE) on 40 nodes x 8 GPUs, once per policy for the module; they are
marked slow. No test here looks at the clock: the replay's timings are bench/simulate.py's.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import random
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path

import pytest

from apps.scheduling.model import ClusterState, Decision
from apps.scheduling.simulate import format_table, format_variants, goals, main, run_variants, teams_compared
from apps.scheduling.trace import (
    VARIANTS,
    JobOutcome,
    TraceJob,
    Variant,
    equal_quotas,
    gang_shape,
    jain,
    load_trace,
    percentile,
    perturb,
    scale_load,
)
from apps.scheduling.trace_replay import POLICIES, Preemptible, Replay, Summary, replay_trace, waited_estimates

SHIPPED_TRACE = Path(__file__).resolve().parents[1] / "data" / "philly-vc-seed0.csv"
REAL_TRACE = Path(os.environ.get("TRAINYARD_TRACE", str(SHIPPED_TRACE)))


def write_trace(path: Path, rows: Sequence[tuple[int | str, str, float, int, float, str]]) -> Path:
    lines = ["job_id,team,submit_s,gpus,duration_s,job_type"]
    lines += [f"{j},{t},{s:g},{g},{d:g},{jt}" for j, t, s, g, d, jt in rows]
    path.write_text("\n".join(lines) + "\n")
    return path


def synthetic(count: int, *, seed: int, teams: int = 4, rate_s: float = 300.0) -> list[TraceJob]:
    """Heavy-tailed jobs of a few repeating types, like the Philly-derived traces."""
    rng = random.Random(seed)
    types = {f"type-{i}": rng.lognormvariate(8, 1.2) for i in range(6)}
    now = 0.0
    jobs = []
    for i in range(count):
        now += rng.expovariate(1 / rate_s)
        job_type = rng.choice(sorted(types))
        jobs.append(
            TraceJob(
                id=str(i + 1),
                team=f"team-{rng.randrange(teams)}",
                submit_s=round(now),
                gpus=rng.choice([1, 1, 1, 1, 2, 4, 8, 16]),
                duration_s=max(30.0, round(types[job_type] * rng.lognormvariate(0, 1.0))),
                job_type=job_type,
            )
        )
    return jobs


def busy_intervals_fit(outcomes, capacity: int) -> bool:
    spans = [(a, b, o.job.gpus) for o in outcomes for a, b in o.attempts]
    events = sorted([(a, g) for a, _, g in spans] + [(b, -g) for _, b, g in spans], key=lambda e: (e[0], e[1]))
    held = 0
    for _, delta in events:
        held += delta
        if held > capacity:
            return False
    return True


def test_load_trace_and_shapes(tmp_path: Path) -> None:
    trace = write_trace(
        tmp_path / "t.csv",
        [(1, "a", 0, 1, 100, "x"), (2, "b", 5, 16, 50, "y"), (3, "a", 9, 12, 10, "y"), (4, "b", 9, 2, 10, "x")],
    )
    jobs = load_trace(trace)
    assert [j.gpus for j in jobs] == [1, 16, 12, 2]
    assert len(load_trace(trace, limit=2)) == 2
    assert gang_shape(jobs[1].gpus, 8) == (2, 8)
    assert gang_shape(jobs[2].gpus, 8) == (2, 8)  # 12 GPUs span ceil(12 / 8) whole nodes
    assert gang_shape(jobs[3].gpus, 8) == (1, 2)


def test_equal_quotas_sum_to_the_cluster() -> None:
    quotas = equal_quotas(["c", "a", "b", "a"], 320)
    assert [q.team for q in quotas] == ["a", "b", "c"]
    assert sum(q.guaranteed_devices for q in quotas) == 320
    assert all(q.borrow_limit is None for q in quotas)
    # A share of the cluster (`--guarantee-share`): smaller guarantees, or none at all.
    assert sum(q.guaranteed_devices for q in equal_quotas(["c", "a", "b"], 320, 0.5)) == 160
    assert {q.guaranteed_devices for q in equal_quotas(["c", "a", "b"], 320, 0.0)} == {0}


def test_a_run_inside_its_guarantee_is_stopped_for_service_only_without_guarantees() -> None:
    # One device; team a's guarantee is that device. Its 10-hour run is demoted after an hour,
    # yet b's short run waits for its end: a run inside its team's guarantee is never a victim.
    jobs = [TraceJob(id="1", team="a", submit_s=0.0, gpus=1, duration_s=36000.0, job_type="x"),
            TraceJob(id="2", team="b", submit_s=7200.0, gpus=1, duration_s=600.0, job_type="y")]
    guarded = Replay(jobs, nodes=1, gpus_per_node=1, policy=POLICIES["trainyard"], estimates=False)
    guarded.run()
    assert guarded.started["2"] == 36000.0 and guarded.preemptions == 0
    # With no guarantees the demoted run may be stopped, and b's run starts within its grace.
    bare = Replay(jobs, nodes=1, gpus_per_node=1, policy=POLICIES["trainyard"], estimates=False, guarantee_share=0.0)
    bare.run()
    assert 7200.0 <= bare.started["2"] <= 7200.0 + Preemptible().grace_s and bare.preemptions == 1


def test_a_promise_lowers_a_new_jobs_deadline_to_its_first_estimate_and_never_raises_it() -> None:
    jobs = synthetic(300, seed=5, rate_s=60.0)
    policy = POLICIES["trainyard"]
    assert policy.promise_estimates, "on by default"
    sim = Replay(jobs, nodes=1, gpus_per_node=8, policy=policy, estimates=True)
    sim._queue(jobs[0])
    sim.queued[jobs[0].id] = replace(sim.queued[jobs[0].id], deadline=5000.0)
    sim._promise(jobs[0].id, 7000.0)
    assert sim.queued[jobs[0].id].deadline == 5000.0  # later than the deadline: kept
    sim._promise(jobs[0].id, 3000.0)
    assert sim.queued[jobs[0].id].deadline == 3000.0 and sim.deadlines[jobs[0].id] == 3000.0
    # A whole busy replay: every job ends, and some deadlines were promises (earlier than without).
    plain = Replay(jobs, nodes=2, gpus_per_node=8, policy=replace(policy, promise_estimates=False), estimates=True)
    promised = Replay(jobs, nodes=2, gpus_per_node=8, policy=policy, estimates=True)
    plain.run()
    promised.run()
    assert len(promised.outcomes) == len(plain.outcomes) == len(jobs)
    assert any(promised.deadlines[j] < plain.deadlines[j] for j in plain.deadlines)


def test_perturb_keeps_the_kind_of_workload_and_changes_the_sample() -> None:
    jobs = synthetic(300, seed=4)
    one, again, two = perturb(jobs, seed=1), perturb(jobs, seed=1), perturb(jobs, seed=2)
    assert one == again and one != two
    # Same jobs per team, type and width, with the same durations among them, dealt out anew.
    def kind(sample: list[TraceJob]) -> Counter[tuple[str, str, int, float]]:
        return Counter((j.team, j.job_type, j.gpus, j.duration_s) for j in sample)

    assert kind(one) == kind(jobs) == kind(two)
    assert [j.id for j in one] == [str(i) for i in range(1, 301)]
    assert [j.submit_s for j in one] == sorted(j.submit_s for j in one)
    # Each team moved as a block, by at most two days and an hour.
    for team in {j.team for j in jobs}:
        before = sorted(j.submit_s for j in jobs if j.team == team)
        after = sorted(j.submit_s for j in one if j.team == team)
        assert all(abs(a - b) <= 2 * 86400 + 3600 + 1 for a, b in zip(before, after, strict=True))


def test_metric_helpers() -> None:
    assert jain([2.0, 2.0, 2.0]) == pytest.approx(1.0)
    assert jain([1.0, 0.0, 0.0, 0.0]) == pytest.approx(0.25)
    assert percentile([1, 2, 3, 4, 5], 0.5) == 3
    assert percentile([], 0.95) == 0.0


@pytest.mark.parametrize("policy", ["fifo", "backfill", "trainyard"])
def test_replay_is_consistent(policy: str) -> None:
    jobs = synthetic(300, seed=3)
    summary, outcomes = replay_trace(jobs, nodes=3, gpus_per_node=8, policy=policy)
    assert summary.jobs == len(outcomes) == len(jobs)
    assert all(o.start >= o.job.submit_s and o.attempts[0][0] == o.start and o.attempts[-1][1] == o.end for o in outcomes)
    # A job never stopped ran its duration in one go; a preempted one ran at least its duration
    # over its attempts (more: work since its last checkpoint is lost, and a resume reloads).
    assert all(math.isclose(o.end - o.start, o.job.duration_s) for o in outcomes if not o.preempted)
    assert all(sum(b - a for a, b in o.attempts) > o.job.duration_s for o in outcomes if o.preempted)
    assert all(b1 <= a2 for o in outcomes for (_, b1), (a2, _) in zip(o.attempts, o.attempts[1:], strict=False))
    assert busy_intervals_fit(outcomes, capacity=24)
    assert summary.preemptions == sum(o.preempted for o in outcomes)
    if policy == "trainyard":
        assert summary.preemptions > 0 and summary.lost_device_h > 0
    else:
        assert summary.preemptions == 0 and summary.lost_device_h == 0
    # A job that started at once was estimated to start at once.
    assert all(o.estimated_start == o.start for o in outcomes if o.wait == 0)
    assert 0 < summary.utilization <= 1
    assert 0 < summary.jain_slowdown <= 1
    assert 0 <= summary.estimate_within <= 1


def test_replay_is_deterministic() -> None:
    jobs = synthetic(200, seed=5)
    first = replay_trace(jobs, nodes=2, policy="trainyard")[1]
    second = replay_trace(list(reversed(jobs)), nodes=2, policy="trainyard")[1]
    assert [(o.job.id, o.start, o.estimated_start) for o in first] == [(o.job.id, o.start, o.estimated_start) for o in second]


def test_deadlines_are_fixed_at_submission_and_never_move(monkeypatch: pytest.MonkeyPatch) -> None:
    from apps.scheduling import trace_replay

    seen: dict[str, float] = {}
    moved: list[str] = []
    real = trace_replay.schedule

    def spy(state: ClusterState, *, explain: bool = True) -> Decision:
        for job in state.queued:
            assert job.deadline is not None, f"job {job.id} reached a pass without a fixed deadline"
            if seen.setdefault(job.id, job.deadline) != job.deadline:
                moved.append(job.id)
        return real(state, explain=explain)

    monkeypatch.setattr(trace_replay, "schedule", spy)
    # Busy enough that jobs wait through many finishes, each of which re-predicts their runtime.
    summary, _ = replay_trace(synthetic(400, seed=17, rate_s=120.0), nodes=2, policy="trainyard", estimates=False)
    assert summary.jobs == 400 and len(seen) > 300
    assert moved == []


def test_runs_stopping_in_the_replay_name_the_job_they_stop_for(monkeypatch: pytest.MonkeyPatch) -> None:
    from apps.scheduling import trace_replay

    stopped_for: dict[str, str] = {}  # run -> the job its latest stop was for
    seen: list[tuple[str | None, str]] = []
    real = trace_replay.schedule

    def spy(state: ClusterState, *, explain: bool = True) -> Decision:
        seen.extend((r.stopping_for, stopped_for[r.id]) for r in state.running if r.stopping)
        decision = real(state, explain=explain)
        stopped_for.update((p.victim_id, p.for_job_id) for p in decision.preemptions)
        return decision

    monkeypatch.setattr(trace_replay, "schedule", spy)
    replay_trace(synthetic(400, seed=17, rate_s=120.0), nodes=2, policy="trainyard", estimates=False)
    # The core gives that job first claim on the devices (`RunningJob.stopping_for`).
    assert seen and all(named == stopped for named, stopped in seen)


def test_fifo_skips_passes_its_blocked_head_makes_pointless(monkeypatch: pytest.MonkeyPatch) -> None:
    # Wide and narrow jobs on a busy cluster, so the head of the line is often blocked.
    jobs = synthetic(400, seed=7, rate_s=120.0)
    fast_summary, fast = replay_trace(jobs, nodes=3, policy="fifo", estimates=False)
    monkeypatch.setattr(Replay, "_head_blocks_all", lambda self: False)
    slow_summary, slow = replay_trace(jobs, nodes=3, policy="fifo", estimates=False)
    assert [(o.job.id, o.start) for o in fast] == [(o.job.id, o.start) for o in slow]
    assert fast_summary.scheduling_passes < slow_summary.scheduling_passes


def test_estimates_track_overruns_and_the_line() -> None:
    jobs = synthetic(600, seed=13, rate_s=150.0)
    summary, outcomes = replay_trace(jobs, nodes=3, policy="trainyard")
    waited = [o for o in outcomes if o.wait > 0]
    assert waited and all(o.estimated_start is not None for o in outcomes)
    # Estimates are neither all early nor all late.
    early = sum(1 for o in waited if o.estimated_start is not None and o.estimated_start < o.start)
    assert 0.1 < early / len(waited) < 0.9
    assert summary.estimate_within > summary.started_immediately


def test_trainyard_beats_the_baselines_on_a_busy_synthetic_cluster() -> None:
    jobs = synthetic(900, seed=11, rate_s=200.0)
    results = {p: replay_trace(jobs, nodes=4, policy=p, estimates=False)[0] for p in ("fifo", "backfill", "trainyard")}
    assert results["backfill"].avg_jct_s <= results["fifo"].avg_jct_s
    assert results["trainyard"].avg_jct_s < 0.9 * results["backfill"].avg_jct_s
    # Jain's index is taken over the teams' mean slowdowns, which the summary keeps per team so
    # two policies can be compared team by team.
    ty, fifo = results["trainyard"], results["fifo"]
    assert set(ty.team_slowdown) == {j.team for j in jobs}
    assert ty.jain_slowdown == pytest.approx(jain(list(ty.team_slowdown.values())))
    better, worse = teams_compared(ty, fifo)
    assert better == [t for t, v in ty.team_slowdown.items() if v < fifo.team_slowdown[t]]
    assert [t for t, _, _ in worse] == sorted((t for t, v in ty.team_slowdown.items() if v > fifo.team_slowdown[t]),
                                             key=lambda t: fifo.team_slowdown[t] / ty.team_slowdown[t])
    assert better, "on a busy cluster some team gains from shortest-first ordering"


def test_cli_prints_a_table_and_writes_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = [(j.id, j.team, j.submit_s, j.gpus, j.duration_s, j.job_type) for j in synthetic(80, seed=2)]
    trace = write_trace(tmp_path / "t.csv", rows)
    out = tmp_path / "out.json"
    assert main([str(trace), "--nodes", "2", "--gpus-per-node", "8", "--policy", "backfill", "--json", str(out), "--limit", "50"]) == 0
    printed = capsys.readouterr().out
    assert "avg JCT" in printed and "estimate within" in printed
    payload = json.loads(out.read_text())
    assert payload["results"][0]["policy"] == "backfill"
    assert payload["results"][0]["jobs"] == 50
    assert main([str(trace), "--nodes", "2", "--policy", "fifo", "--perturb", "3", "--limit", "50", "--no-estimates"]) == 0
    assert "fifo" in capsys.readouterr().out
    # Guarantees over a share of the cluster: a share outside 0-1 is refused, naming the flag.
    with pytest.raises(SystemExit):
        main([str(trace), "--nodes", "2", "--guarantee-share", "1.5"])
    assert "--guarantee-share must be between 0 and 1 (got 1.5)" in capsys.readouterr().err
    assert main([str(trace), "--nodes", "2", "--limit", "50", "--no-estimates", "--guarantee-share", "0"]) == 0


# -- acceptance on the real trace ----------------------------------------------------------------

# Issue #6 item 3 asks that >= 70% of runs start within max(10 min, 25% of their wait) of their
# at-submission estimate. At 40 x 8 GPUs the first 50 days of this trace offer about twice the
# work the cluster holds, and runtimes are heavy-tailed and mostly unpredictable (team, type and
# width explain about a fifth of the variance of log runtime). Without preemption, 88% of jobs
# waited a median 5.8 days and no forecast of such a line passed 45% (session notes on #6).
# Least attained service (`Policy.demote_after_s`) changes the line instead of guessing it: a
# job that has run an hour is demoted, and new jobs preempt demoted ones beyond their team's
# guarantee, so most jobs start within their victims' grace and the estimate says so (0.895 on
# this replay, 0.97-0.98 on three perturbed samples; bench/simulate.py).
ESTIMATE_WITHIN_TARGET = 0.70
# Preemption is not free: jobs lose their work since the last checkpoint (every 30 minutes in
# the replay) and reload on resume. The replay lost 0.8% of the trace's 763k GPU-hours.
LOST_WORK_CEILING = 0.02


def _real_replay(policy: str) -> tuple[Summary, list[JobOutcome]]:
    jobs = load_trace(REAL_TRACE)
    return replay_trace(jobs, nodes=40, gpus_per_node=8, policy=policy, estimates=policy == "trainyard")


@pytest.fixture(scope="module")
def real_replay() -> Iterator[Callable[[str], tuple[Summary, list[JobOutcome]]]]:
    """One replay per policy for the whole module, the three at once in processes of their own:
    the xdist worker that holds this file then waits for the longest, not for the sum.

    Only the trainyard replay computes the at-submission estimates: the baselines are compared
    on JCT and fairness alone (bench/simulate.py estimates under every policy).
    """
    assert REAL_TRACE.exists(), f"trace not found: {REAL_TRACE} (the repository ships {SHIPPED_TRACE})"
    policies = ("trainyard", "fifo", "backfill")  # the longest first
    with ProcessPoolExecutor(max_workers=len(policies), mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {policy: pool.submit(_real_replay, policy) for policy in policies}
        yield lambda policy: futures[policy].result()


@pytest.mark.slow
@pytest.mark.trace
@pytest.mark.timeout(1200)
def test_real_trace_jct_and_fairness(real_replay: Callable[[str], tuple[Summary, list[JobOutcome]]]) -> None:
    fifo, backfill, trainyard = (real_replay(p)[0] for p in ("fifo", "backfill", "trainyard"))
    assert trainyard.jobs == fifo.jobs == backfill.jobs == 13_716
    assert trainyard.avg_jct_s <= 0.6 * fifo.avg_jct_s
    assert trainyard.avg_jct_s <= 0.9 * backfill.avg_jct_s
    assert trainyard.jain_slowdown >= fifo.jain_slowdown


@pytest.mark.slow
@pytest.mark.trace
@pytest.mark.timeout(1200)
def test_real_trace_estimate_accuracy(real_replay: Callable[[str], tuple[Summary, list[JobOutcome]]]) -> None:
    trainyard, outcomes = real_replay("trainyard")
    assert all(o.estimated_start is not None for o in outcomes)
    assert trainyard.estimate_within >= ESTIMATE_WITHIN_TARGET, trainyard
    # Most jobs start once their victims have exited; the few that wait longer (gangs where no
    # node's runs may be stopped) are estimated neither all early nor all late (56% early).
    long_waits = [o for o in outcomes if o.wait > 600]
    early = sum(1 for o in long_waits if o.estimated_start is not None and o.estimated_start < o.start)
    assert 0.25 <= early / len(long_waits) <= 0.75
    # Runs that really waited (issue 28): 80.7% right with 24 passes of 10 minutes or more, runs
    # started mid-jump run from there, the fluid guess counting work ahead up to demotion (56.5%
    # before all three) and first claims on stopping runs (82.4% before), beating "starts now"
    # and the pool's median wait.
    waited = trainyard.waited["10m"]
    assert waited["estimate"] >= 0.7 and waited["estimate"] > max(waited["starts_now"], waited["pool_median"]), waited
    # What preemption cost: work since the last checkpoint and the restarts.
    work_device_h = sum(o.job.gpus * o.job.duration_s for o in outcomes) / 3600
    assert 0 < trainyard.lost_device_h <= LOST_WORK_CEILING * work_device_h, trainyard


def test_the_summary_reports_the_tail_and_the_estimates_of_runs_that_really_waited() -> None:
    jobs = synthetic(400, seed=13, rate_s=150.0)
    summary, outcomes = replay_trace(jobs, nodes=3, policy="trainyard")
    assert summary.p99_jct_s >= summary.p95_jct_s > 0
    assert summary.max_preemptions_per_job == max(o.preempted for o in outcomes) > 0
    assert summary.jobs_preempted_5_plus == sum(1 for o in outcomes if o.preempted >= 5)
    assert 0 < summary.busy_while_waiting <= 1
    for bucket, floor in (("10m", 600), ("1h", 3600)):
        figures = summary.waited[bucket]
        assert figures["jobs"] == sum(1 for o in outcomes if o.wait > floor)
        assert all(0.0 <= figures[k] <= 1.0 for k in ("estimate", "starts_now", "pool_median"))
        # "Starts now" is never within max(10 min, 25% of the wait) of a start over 10 minutes late.
        assert figures["starts_now"] == 0.0
    # Every preempted run got a new estimate when it went back in line, judged on its restart.
    assert summary.requeued["all"]["jobs"] == summary.preemptions
    assert summary.requeued["10m"]["jobs"] <= summary.preemptions
    printed = format_table([summary])
    for row in ("p99 JCT", "at submission, waits > 10m", "'starts now' within", "pool median within",
                "at requeue, waits > 1h", "max preempted (one job)", "busy while jobs wait"):
        assert row in printed


def test_waited_estimates_judges_the_estimate_and_both_baselines_alike() -> None:
    # (since, start, estimate, pool median wait at `since`)
    waits = [
        (0.0, 0.0, 0.0, 0.0),              # started at once: in no bucket
        (0.0, 1200.0, 1000.0, 3000.0),     # waited 20 min: estimate within 10 min, median not
        (0.0, 7200.0, 5000.0, 7000.0),     # waited 2 h: estimate 37 min off (> 30), median within
        (100.0, 4100.0, None, 0.0),        # no estimate: never within
    ]
    out = waited_estimates(waits, all_waits=True)
    assert out["all"]["jobs"] == 4 and out["all"]["starts_now"] == 0.25
    assert out["10m"] == {"jobs": 3, "estimate": pytest.approx(1 / 3), "starts_now": 0.0, "pool_median": pytest.approx(1 / 3)}
    assert out["1h"] == {"jobs": 2, "estimate": 0.0, "starts_now": 0.0, "pool_median": 0.5}


def test_the_pool_median_baseline_only_knows_earlier_waits() -> None:
    jobs = synthetic(200, seed=9, rate_s=150.0)
    _, outcomes = replay_trace(jobs, nodes=2, policy="backfill", estimates=False)
    first = min(outcomes, key=lambda o: (o.job.submit_s, int(o.job.id)))
    assert first.median_wait == 0.0
    by_submit = sorted(outcomes, key=lambda o: o.job.submit_s)
    for o in by_submit[::20]:
        known = sorted(p.wait for p in outcomes if p.start < o.job.submit_s)
        # The median of the waits of runs that had started before it was submitted (a run that
        # started at the very same second may or may not have been seen).
        same = sorted(p.wait for p in outcomes if p.start <= o.job.submit_s)
        assert o.median_wait in {known[len(known) // 2] if known else 0.0, same[len(same) // 2] if same else 0.0}


def test_scale_load_and_variants(tmp_path: Path) -> None:
    jobs = synthetic(50, seed=2)
    faster = scale_load(jobs, 1.3)
    assert [j.duration_s for j in faster] == [j.duration_s for j in jobs]
    assert faster[-1].submit_s == round(jobs[-1].submit_s / 1.3)
    with pytest.raises(ValueError, match="load factor"):
        scale_load(jobs, 0)
    names = {v.name for v in VARIANTS}
    assert {"seed 1", "load 0.7x", "load 1.3x", "30 nodes", "60 nodes"} <= names
    assert Variant("x", seed=3, load=0.7).jobs(jobs) == scale_load(perturb(jobs, seed=3), 0.7)
    rows = [(j.id, j.team, j.submit_s, j.gpus, j.duration_s, j.job_type) for j in synthetic(60, seed=2, rate_s=100.0)]
    trace = write_trace(tmp_path / "t.csv", rows)
    chosen = (Variant("trace"), Variant("1.3x on 1", load=1.3, nodes=1))
    results = run_variants(str(trace), nodes=2, variants=chosen)
    assert list(results) == ["trace", "1.3x on 1"]
    assert results["1.3x on 1"]["trainyard"].nodes == 1 and results["trace"]["fifo"].nodes == 2
    by_policy = results["trace"]
    held = goals(by_policy["fifo"], by_policy["backfill"], by_policy["trainyard"])
    assert "preempted <= 10" in held and "est > 10m >= 0.7" in held
    table = format_variants(results)
    assert table.splitlines()[1].startswith("trace") and "1.3x on 1" in table


def test_cli_variants_writes_one_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = [(j.id, j.team, j.submit_s, j.gpus, j.duration_s, j.job_type) for j in synthetic(40, seed=2, rate_s=200.0)]
    trace = write_trace(tmp_path / "t.csv", rows)
    out = tmp_path / "v.json"
    assert main([str(trace), "--nodes", "2", "--variants", "--policy", "all", "--json", str(out)]) == 0
    again = tmp_path / "all.json"
    assert main([str(trace), "--nodes", "2", "--variants", "--policy", "trainyard", "--reuse", str(out),
                 "--json", str(again)]) == 0
    printed = capsys.readouterr().out
    assert "goals missed" in printed and "60 nodes" in printed
    payload = json.loads(again.read_text())
    assert [v["name"] for v in payload["variants"]] == [v.name for v in VARIANTS]
    assert [r["policy"] for r in payload["variants"][0]["results"]] == ["fifo", "backfill", "trainyard"]
    assert payload["variants"][5]["nodes"] == 30 and "waited" in payload["variants"][0]["results"][2]
