"""Issue 28: the preemption cap (`Policy.max_preemptions`)."""

from __future__ import annotations

from dataclasses import replace

from apps.scheduling.core import Policy, PriorityClass, TeamQuota, WaitCode, schedule
from apps.scheduling.simulate import JobOutcome, Replay, TraceJob
from tests.scheduling.test_core import POOL, entry, job, node, run, state

N, U = PriorityClass.NORMAL, PriorityClass.URGENT
HOUR = 3600.0
NOW = 100 * HOUR
QUOTAS = (TeamQuota(team="vision", pool=POOL, guaranteed_devices=0), TeamQuota(team="nlp", pool=POOL, guaranteed_devices=0))


def test_a_run_preempted_max_times_is_stopped_again_only_for_an_urgent_job() -> None:
    # Ran 2 hours: demoted, so a new job of its class may stop it, until it has been stopped 10 times.
    old = run("old", (("n1", 8),), team="nlp", started=NOW - 2 * HOUR, end=NOW + 50 * HOUR)
    capped = replace(old, preemptions=10)
    new = job("new", devices=8, team="vision", submitted=NOW - 30)
    assert [p.victim_id for p in schedule(state([node("n1", 0)], [new], [replace(old, preemptions=9)], now=NOW,
                                                quotas=QUOTAS)).preemptions] == ["old"]
    decision = schedule(state([node("n1", 0)], [new], [capped], now=NOW, quotas=QUOTAS))
    assert decision.preemptions == () and entry(decision, "new").code != WaitCode.PREEMPTING
    urgent = schedule(state([node("n1", 0)], [replace(new, priority_class=U)], [capped], now=NOW, quotas=QUOTAS))
    assert [p.victim_id for p in urgent.preemptions] == ["old"]
    # A pool may set another cap.
    looser = Policy(max_preemptions=20)
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
    capped = long_among_short(Policy(), days=5.0, quiet_h=1.0)
    uncapped = long_among_short(Policy(max_preemptions=1_000_000), days=5.0, quiet_h=1.0)
    assert capped.preempted == 10 < uncapped.preempted, (capped.preempted, uncapped.preempted)
    assert capped.jct < uncapped.jct, (capped.jct / HOUR, uncapped.jct / HOUR)

