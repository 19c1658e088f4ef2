"""Issue 28: attained service in device-time (2-D least attained service, as in Tiresias), the
preemption cap (`Policy.max_preemptions`) and the starvation guard (`Policy.starve_factor`)."""

from __future__ import annotations

from dataclasses import replace

from apps.scheduling.core import Policy, PreemptionKind, PriorityClass, TeamQuota, WaitCode, explain_policy, queue_order, schedule
from apps.scheduling.policies import running_standings, starved
from apps.scheduling.simulate import JobOutcome, Replay, TraceJob
from tests.scheduling.test_core import POOL, entry, job, node, run, state

N, U = PriorityClass.NORMAL, PriorityClass.URGENT
HOUR = 3600.0
NOW = 100 * HOUR
QUOTAS = (TeamQuota(team="vision", pool=POOL, guaranteed_devices=0), TeamQuota(team="nlp", pool=POOL, guaranteed_devices=0))


def test_service_is_device_time_so_a_wide_run_is_demoted_sooner() -> None:
    # Both started 20 minutes ago: the 8-device run has 160 device-minutes, the 1-device one 20.
    wide = run("wide", (("n1", 8),), started=NOW - 1200, end=NOW + 50 * HOUR)
    narrow = run("narrow", (("n2", 1),), started=NOW - 1200, end=NOW + 50 * HOUR)
    assert wide.service(NOW) == 8 * 1200 and narrow.service(NOW) == 1200
    standings = running_standings([wide, narrow], NOW, Policy())
    assert standings["wide"] < standings["narrow"] == int(N) * 1000
    # A new 1-device job on a full pool stops the wide run (demoted), not the narrow one.
    decision = schedule(state([node("n1", 0), node("n2", 0, total=1)], [job("new", submitted=NOW - 30)], [wide, narrow],
                              now=NOW, quotas=QUOTAS))
    assert [(p.victim_id, p.kind) for p in decision.preemptions] == [("wide", PreemptionKind.DEMOTED)]
    assert "has used 2 h 40 min of device time in all" in decision.preemptions[0].reason


def test_a_run_preempted_max_times_is_stopped_again_only_for_an_urgent_job() -> None:
    old = run("old", (("n1", 8),), team="nlp", started=NOW - 2 * HOUR, end=NOW + 50 * HOUR)
    capped = replace(old, preemptions=10)
    new = job("new", devices=8, team="vision", submitted=NOW - 30)
    assert [p.victim_id for p in schedule(state([node("n1", 0)], [new], [replace(old, preemptions=9)], now=NOW,
                                                quotas=QUOTAS)).preemptions] == ["old"]
    decision = schedule(state([node("n1", 0)], [new], [capped], now=NOW, quotas=QUOTAS))
    assert decision.preemptions == () and entry(decision, "new").code != WaitCode.PREEMPTING
    urgent = schedule(state([node("n1", 0)], [replace(new, priority_class=U)], [capped], now=NOW, quotas=QUOTAS))
    assert [p.victim_id for p in urgent.preemptions] == ["old"]
    # A pool may set another cap; the queue page says what it is.
    looser = Policy(max_preemptions=20)
    assert schedule(state([node("n1", 0)], [new], [capped], now=NOW, quotas=QUOTAS, policy=looser)).preemptions
    assert any("stopped 10 times is not stopped again, except for an urgent job" in r for r in explain_policy(Policy()))


def test_a_waiting_demoted_job_regains_its_place_with_time_waited() -> None:
    policy = Policy()  # starve_factor 4: promoted after waiting 4 x its last turn (at least 4 x 15 min)
    assert not starved(3 * HOUR, HOUR, policy) and starved(4 * HOUR, HOUR, policy)
    assert starved(HOUR, 60.0, policy) and not starved(HOUR - 1, 60.0, policy)
    assert not starved(1e9, HOUR, Policy(starve_factor=0))
    # Ran 3 hours (deep in demotion), went back in line 5 hours ago after a 1-hour turn.
    back = replace(job("back", submitted=0.0), attained_s=3 * HOUR, requeued_at=NOW - 5 * HOUR, last_run_s=HOUR)
    fresh = job("fresh", submitted=NOW - 60, runtime=600.0)
    order = [j.id for j in queue_order(state([node("n1", 0)], [fresh, back], now=NOW, quotas=QUOTAS))[POOL]]
    # Submitted long ago, its fixed deadline puts it first again.
    assert order == ["back", "fresh"]
    recent = replace(back, requeued_at=NOW - 2 * HOUR)
    order = [j.id for j in queue_order(state([node("n1", 0)], [fresh, recent], now=NOW, quotas=QUOTAS))[POOL]]
    assert order == ["fresh", "back"]
    # Behind a fresh job, the still-demoted one says why; the promoted one does not.
    assert entry(schedule(state([node("n1", 0)], [fresh, recent], now=NOW, quotas=QUOTAS)), "back").code == WaitCode.DEMOTED
    assert entry(schedule(state([node("n1", 0)], [fresh, back], now=NOW, quotas=QUOTAS)), "back").code != WaitCode.DEMOTED
    # Promoted, it may stop a demoted run as a new job may; still demoted, it may not (same level).
    victim = run("v", (("n1", 1),), team="nlp", started=NOW - 3 * HOUR, end=NOW + 50 * HOUR)
    assert [p.victim_id for p in schedule(state([node("n1", 0, total=1)], [back], [victim], now=NOW,
                                                quotas=QUOTAS)).preemptions] == ["v"]
    assert schedule(state([node("n1", 0, total=1)], [recent], [victim], now=NOW, quotas=QUOTAS)).preemptions == ()


def test_a_promoted_run_gets_a_full_turn_however_wide() -> None:
    # Back on 8 devices for 30 minutes: 4 device-hours of this attempt alone, but promoted, it
    # counts its 30 minutes only and stands as a run never demoted until it has run an hour.
    promoted = replace(run("p", (("n1", 8),), started=NOW - 1800, end=NOW + 50 * HOUR), attained_s=30 * HOUR, promoted=True)
    assert running_standings([promoted], NOW, Policy())["p"] == int(N) * 1000
    assert running_standings([promoted], NOW + 1800, Policy())["p"] < int(N) * 1000
    assert running_standings([replace(promoted, promoted=False)], NOW, Policy())["p"] < int(N) * 1000


def _long_among_short(policy: Policy) -> JobOutcome:
    """One node of 8 devices, two teams without guarantees: a 30-hour job on the whole node, and
    a week of 1-device, 40-minute jobs of the other team arriving every 4 minutes (10 devices
    wanted for 8): without a guard the short ones always win."""
    jobs = [TraceJob(id="1", team="a", submit_s=0.0, gpus=8, duration_s=30 * HOUR, job_type="long")]
    t = 600.0
    while t < 7 * 24 * HOUR:
        jobs.append(TraceJob(id=str(len(jobs) + 1), team="b", submit_s=t, gpus=1, duration_s=2400.0, job_type="short"))
        t += 240.0
    replay = Replay(jobs, nodes=1, gpus_per_node=8, policy=policy, estimates=False)
    replay.quotas = ()  # nobody is guaranteed anything: every run may be preempted
    replay.run()
    return next(o for o in replay.outcomes if o.job.id == "1")


def test_a_long_job_among_a_stream_of_short_ones_finishes_within_a_bound() -> None:
    guarded = _long_among_short(Policy())
    assert guarded.preempted <= 10
    assert guarded.jct <= 4 * 24 * HOUR, guarded.jct / HOUR
    # Without the guards it waits out the whole stream, stopped far more often.
    unguarded = _long_among_short(Policy(starve_factor=0, max_preemptions=1_000_000))
    assert unguarded.jct > 6 * 24 * HOUR and unguarded.jct > 1.5 * guarded.jct, (unguarded.jct / HOUR, guarded.jct / HOUR)
