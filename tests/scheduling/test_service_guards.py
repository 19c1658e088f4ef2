"""Issue 28: the preemption cap (`Policy.max_preemptions`) and the starvation guard."""

from __future__ import annotations

from dataclasses import replace

from apps.scheduling.core import Policy, PriorityClass, TeamQuota, WaitCode, queue_order, schedule
from apps.scheduling.policies import starved
from apps.scheduling.trace import JobOutcome, TraceJob
from apps.scheduling.trace_replay import Replay
from tests.scheduling.test_core import POOL, entry, job, node, run, state

N, U = PriorityClass.NORMAL, PriorityClass.URGENT
HOUR = 3600.0
NOW = 100 * HOUR
GUARD = Policy(starve_factor=4.0, max_preemptions=10)  # off by default (docs/scheduler-replays.md: they broke Jain)
CAPPED = Policy(max_preemptions=10)  # off by default too, for the same reason
QUOTAS = (TeamQuota(team="vision", pool=POOL, guaranteed_devices=0), TeamQuota(team="nlp", pool=POOL, guaranteed_devices=0))


def test_a_run_preempted_max_times_is_stopped_again_only_for_an_urgent_job() -> None:
    # Ran 2 hours: demoted, so a new job of its class may stop it, until it has been stopped 10 times.
    old = run("old", (("n1", 8),), team="nlp", started=NOW - 2 * HOUR, end=NOW + 50 * HOUR)
    capped = replace(old, preemptions=10)
    new = job("new", devices=8, team="vision", submitted=NOW - 30)
    assert [p.victim_id for p in schedule(state([node("n1", 0)], [new], [replace(old, preemptions=9)], now=NOW,
                                                quotas=QUOTAS, policy=CAPPED)).preemptions] == ["old"]
    decision = schedule(state([node("n1", 0)], [new], [capped], now=NOW, quotas=QUOTAS, policy=CAPPED))
    assert decision.preemptions == () and entry(decision, "new").code != WaitCode.PREEMPTING
    urgent = schedule(state([node("n1", 0)], [replace(new, priority_class=U)], [capped], now=NOW, quotas=QUOTAS,
                            policy=CAPPED))
    assert [p.victim_id for p in urgent.preemptions] == ["old"]
    # A pool may set another cap, or none (the default).
    for looser in (Policy(max_preemptions=20), Policy()):
        assert schedule(state([node("n1", 0)], [new], [capped], now=NOW, quotas=QUOTAS, policy=looser)).preemptions


def long_among_short(policy: Policy, *, days: float = 7.0, quiet_h: float = 0.0) -> JobOutcome:
    """One node of 8 devices, two teams without guarantees: a 30-hour job on 2 devices, and
    `days` of 1-device, 40-minute jobs of the other team arriving every 4 minutes (10 devices
    wanted for 8), with `quiet_h` hours without any after every 3 hours of them: least attained
    service alone keeps stopping the long one for them."""
    jobs = [TraceJob(id="1", team="a", submit_s=0.0, gpus=2, duration_s=30 * HOUR, job_type="long")]
    t = 600.0
    while t < days * 24 * HOUR:
        if quiet_h and t % ((3 + quiet_h) * HOUR) > 3 * HOUR:
            t += 240.0
            continue
        jobs.append(TraceJob(id=str(len(jobs) + 1), team="b", submit_s=t, gpus=1, duration_s=2400.0, job_type="short"))
        t += 240.0
    replay = Replay(jobs, nodes=1, gpus_per_node=8, policy=policy, estimates=False)
    replay.quotas = ()  # nobody is guaranteed anything: every run may be preempted
    replay.run()
    return next(o for o in replay.outcomes if o.job.id == "1")


def test_a_long_job_among_a_stream_of_short_ones_is_preempted_at_most_the_cap() -> None:
    # Bursts of short jobs with quiet hours between: the long one resumes in each lull and is
    # stopped again by the next burst, until it has been stopped 10 times.
    capped = long_among_short(CAPPED, days=5.0, quiet_h=1.0)
    uncapped = long_among_short(Policy(max_preemptions=1_000_000), days=5.0, quiet_h=1.0)
    assert capped.preempted == 10 < uncapped.preempted, (capped.preempted, uncapped.preempted)
    assert capped.jct < uncapped.jct, (capped.jct / HOUR, uncapped.jct / HOUR)


def test_a_waiting_demoted_job_regains_its_place_with_time_waited() -> None:
    policy = GUARD  # promoted after waiting 4 x its last turn (at least 4 x 15 min)
    back = replace(job("back", submitted=0.0), attained_s=3 * HOUR, requeued_at=NOW - 5 * HOUR, last_run_s=HOUR)
    assert starved(back, NOW, policy) and not starved(back, NOW - 1.5 * HOUR, policy)
    assert starved(replace(back, last_run_s=60.0), back.requeued_at + HOUR, policy)
    assert not starved(replace(back, last_run_s=60.0), back.requeued_at + HOUR - 1, policy)
    assert not starved(back, 1e9, Policy(starve_factor=0)) and not starved(replace(back, requeued_at=None), 1e9, policy)
    fresh = job("fresh", submitted=NOW - 60, runtime=600.0)
    order = [j.id for j in queue_order(state([node("n1", 0)], [fresh, back], now=NOW, quotas=QUOTAS, policy=GUARD))[POOL]]
    assert order == ["back", "fresh"]  # submitted long ago, its fixed deadline puts it first again
    recent = replace(back, requeued_at=NOW - 2 * HOUR)
    order = [j.id for j in queue_order(state([node("n1", 0)], [fresh, recent], now=NOW, quotas=QUOTAS, policy=GUARD))[POOL]]
    assert order == ["fresh", "back"]
    assert entry(schedule(state([node("n1", 0)], [fresh, recent], now=NOW, quotas=QUOTAS, policy=GUARD)), "back").code == WaitCode.DEMOTED
    assert entry(schedule(state([node("n1", 0)], [fresh, back], now=NOW, quotas=QUOTAS, policy=GUARD)), "back").code != WaitCode.DEMOTED
    # Promoted, it may stop a demoted run as a new job may; still demoted, it may not (same level).
    victim = run("v", (("n1", 1),), team="nlp", started=NOW - 3 * HOUR, end=NOW + 50 * HOUR)
    assert [p.victim_id for p in schedule(state([node("n1", 0, total=1)], [back], [victim], now=NOW,
                                                quotas=QUOTAS, policy=GUARD)).preemptions] == ["v"]
    assert schedule(state([node("n1", 0, total=1)], [recent], [victim], now=NOW, quotas=QUOTAS, policy=GUARD)).preemptions == ()


def test_a_long_job_among_a_stream_of_short_ones_finishes_within_a_bound() -> None:
    # A steady week of short jobs: without the guard the long one waits out the whole stream.
    guarded = long_among_short(GUARD)
    assert guarded.preempted <= 10
    assert guarded.jct <= 4 * 24 * HOUR, guarded.jct / HOUR
    unguarded = long_among_short(Policy(starve_factor=0))
    assert unguarded.jct > 7 * 24 * HOUR > guarded.jct, (unguarded.jct / HOUR, guarded.jct / HOUR)
