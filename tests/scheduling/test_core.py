"""The scheduler core on small hand-made clusters: one test per rule, plus invariants.

No database: the core takes and returns plain dataclasses.
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from apps.scheduling.core import (
    ClusterState,
    Node,
    NodeState,
    Ordering,
    Packing,
    Policy,
    PriorityClass,
    QueuedJob,
    RunningJob,
    TeamQuota,
    TeamUsage,
    WaitCode,
    deadlines_due,
    decay_usage,
    explain_policy,
    queue_order,
    schedule,
)
from apps.scheduling.estimate import QueueLag, queue_estimates, simulate_starts
from apps.scheduling.placement import PoolCapacity
from apps.scheduling.policies import accrue_usage, fair_share_factors, runs_within_guarantee, virtual_deadline
from apps.scheduling.predict import FinishedRun, Progress, RuntimePredictor, RuntimeQuery, affine_fit, predict_runtime

POOL = "a100"
N, U, L = PriorityClass.NORMAL, PriorityClass.URGENT, PriorityClass.LOW
FIFO = Policy(ordering=Ordering.FIFO, backfill=False, preemption=False, packing=Packing.FIRST_FIT, guarantee_first=False)


def node(node_id: str, free: int, total: int = 8, state: NodeState = NodeState.READY) -> Node:
    return Node(id=node_id, pool=POOL, total_devices=total, free_devices=free, state=state)


def job(
    job_id: str,
    *,
    team: str = "vision",
    devices: int = 1,
    nodes: int = 1,
    runtime: float = 3600.0,
    submitted: float = 0.0,
    klass: PriorityClass = N,
    blocked: str | None = None,
) -> QueuedJob:
    return QueuedJob(
        id=job_id,
        team=team,
        pool=POOL,
        priority_class=klass,
        submitted_at=submitted,
        nodes=nodes,
        devices_per_node=devices,
        predicted_runtime=runtime,
        blocked_reason=blocked,
        blocked_message="Budget vision/2026-11 is spent (1,000.00 of 1,000.00)." if blocked else "",
    )


def run(
    run_id: str,
    alloc: tuple[tuple[str, int], ...],
    *,
    team: str = "nlp",
    end: float = 1000.0,
    klass: PriorityClass = N,
    preemptible: bool = True,
    started: float = 0.0,
    checkpoint: float | None = None,
    stopping: bool = False,
) -> RunningJob:
    return RunningJob(
        id=run_id,
        team=team,
        pool=POOL,
        priority_class=klass,
        allocation=alloc,
        started_at=started,
        predicted_end=end,
        preemptible=preemptible,
        last_checkpoint_at=checkpoint,
        stopping=stopping,
    )


def state(nodes, queued=(), running=(), *, now=100.0, policy=Policy(), quotas=(), usage=()) -> ClusterState:
    return ClusterState(
        now=now,
        nodes=tuple(nodes),
        running=tuple(running),
        queued=tuple(queued),
        quotas=tuple(quotas),
        usage=tuple(usage),
        policies={POOL: policy},
    )


def placed(decision) -> dict[str, tuple[tuple[str, int], ...]]:
    return {p.job_id: p.allocation for p in decision.placements}


def entry(decision, job_id: str):
    return next(e for e in decision.queue if e.job_id == job_id)


# -- gangs, packing, fragmentation -----------------------------------------------------------


def test_gang_gets_all_nodes_or_waits() -> None:
    d = schedule(state([node("n1", 8), node("n2", 4)], [job("gang", nodes=2, devices=8), job("small", devices=4)]))
    assert "gang" not in placed(d)
    assert entry(d, "gang").code == WaitCode.GANG
    assert placed(d)["small"] == (("n2", 4),)


def test_gang_spans_whole_nodes_when_free() -> None:
    d = schedule(state([node("n1", 8), node("n2", 8), node("n3", 2)], [job("gang", nodes=2, devices=8)]))
    assert placed(d)["gang"] == (("n1", 8), ("n2", 8))


def test_best_fit_keeps_whole_nodes_free() -> None:
    d = schedule(state([node("n1", 8), node("n2", 3)], [job("j", devices=2)]))
    assert placed(d)["j"] == (("n2", 2),)
    first_fit = schedule(state([node("n1", 8), node("n2", 3)], [job("j", devices=2)], policy=FIFO))
    assert placed(first_fit)["j"] == (("n1", 2),)


def test_fragmentation_counts_devices_no_queued_shape_can_use() -> None:
    d = schedule(state([node("n1", 3), node("n2", 3), node("n3", 0)], [job("wide", devices=4)]))
    frag = d.fragmentation[0]
    assert (frag.free_devices, frag.usable_free_devices, frag.stranded_devices) == (6, 0, 6)
    assert frag.stranded_ratio == 1.0
    d = schedule(state([node("n1", 3), node("n2", 3)], [job("wide", devices=4), job("x", devices=8, nodes=1)]))
    assert d.fragmentation[0].largest_free_block == 3


def test_no_such_hardware() -> None:
    d = schedule(state([node("n1", 8), node("n2", 8)], [job("huge", devices=16), job("many", nodes=3, devices=8)]))
    assert entry(d, "huge").code == WaitCode.NO_HARDWARE
    assert "largest has 8" in entry(d, "huge").message
    assert entry(d, "many").code == WaitCode.NO_HARDWARE
    assert "The job needs 3 nodes with 8 devices each; pool a100 has 2 such ready nodes." in entry(d, "many").message
    drained = schedule(state([node("n1", 8, state=NodeState.DRAINING)], [job("j", devices=1)]))
    # Not "too small": nothing is taking new runs at all.
    assert entry(drained, "j").code == WaitCode.NO_HARDWARE
    assert "is taking new runs now (every one is draining, lost or offline)" in entry(drained, "j").message


def test_draining_and_lost_nodes_take_nothing() -> None:
    nodes = [node("n1", 8, state=NodeState.DRAINING), node("n2", 8, state=NodeState.LOST), node("n3", 2)]
    d = schedule(state(nodes, [job("j", devices=4), job("k", devices=2)]))
    assert "j" not in placed(d)
    assert placed(d)["k"] == (("n3", 2),)


def test_budget_block_comes_from_outside_and_holds_nobody_up() -> None:
    d = schedule(state([node("n1", 8)], [job("poor", blocked="budget", submitted=0), job("rich", submitted=5)], policy=FIFO))
    assert entry(d, "poor").code == WaitCode.BUDGET
    assert "spent" in entry(d, "poor").message
    assert "rich" in placed(d)


def test_unknown_pool_is_explained() -> None:
    d = schedule(state([node("n1", 8)], [replace(job("j"), pool="h100")]))
    assert d.queue[0].code == WaitCode.NO_POLICY


# -- order: classes, aging, fair share, guarantees ---------------------------------------------


def test_urgent_goes_first_and_low_is_promoted_by_aging() -> None:
    queue = [job("low-old", klass=L, submitted=0), job("normal", submitted=10), job("urgent", klass=U, submitted=20)]
    policy = replace(Policy(), class_promotion_s=3600)
    order = [j.id for j in queue_order(state([node("n1", 0)], queue, now=100, policy=policy))[POOL]]
    assert order == ["urgent", "normal", "low-old"]
    # After waiting past the promotion time, the low job competes as normal (and is older).
    order = [j.id for j in queue_order(state([node("n1", 0)], queue, now=4000, policy=policy))[POOL]]
    assert order == ["urgent", "low-old", "normal"]


def test_shorter_predicted_first_but_deadlines_stop_starvation() -> None:
    policy = Policy(stretch=4.0, fair_share_weight=0.0)
    old_long = job("long", runtime=10 * 3600, submitted=0)
    new_short = job("short", runtime=600, submitted=3600)
    order = [j.id for j in queue_order(state([node("n1", 0)], [old_long, new_short], now=3600, policy=policy))[POOL]]
    assert order == ["short", "long"]
    # A short job arriving after the long job's deadline (0 + 4 * 10 h) ranks behind it.
    late_short = job("late", runtime=600, submitted=41 * 3600)
    order = [j.id for j in queue_order(state([node("n1", 0)], [old_long, late_short], now=41 * 3600, policy=policy))[POOL]]
    assert order == ["long", "late"]


def test_a_fixed_deadline_keeps_the_place_in_line_whatever_later_predictions_say() -> None:
    policy = Policy(stretch=4.0, fair_share_weight=0.0)
    queue = [job("a", runtime=600, submitted=0), job("b", runtime=1200, submitted=0)]
    s = state([node("n1", 0)], queue, now=100, policy=policy)
    due = deadlines_due(s)
    # The same formula the order uses: submission + stretch x runtime (one device).
    assert due == {"a": 2400.0, "b": 4800.0}
    fixed = [replace(j, deadline=due[j.id]) for j in queue]
    assert deadlines_due(replace(s, queued=tuple(fixed))) == {}
    # History now says "a" runs ten hours: unfixed, it would drop behind "b"; fixed, it keeps its place.
    longer = [replace(fixed[0], predicted_runtime=36_000.0), fixed[1]]
    assert [j.id for j in queue_order(replace(s, queued=tuple(longer)))[POOL]] == ["a", "b"]
    unfixed = [replace(j, deadline=None) for j in longer]
    assert [j.id for j in queue_order(replace(s, queued=tuple(unfixed)))[POOL]] == ["b", "a"]


def test_deadlines_follow_fair_share_at_the_time_and_fifo_pools_need_none() -> None:
    queue = [job("heavy", team="vision"), job("light", team="nlp")]
    usage = [TeamUsage("vision", POOL, 9e6), TeamUsage("nlp", POOL, 1e5)]
    quotas = [TeamQuota("vision", POOL, 4), TeamQuota("nlp", POOL, 4)]
    s = state([node("n1", 0)], queue, usage=usage, quotas=quotas, policy=Policy(fair_share_weight=1.0))
    due = deadlines_due(s)
    factors = fair_share_factors(["vision", "nlp"], {"vision": 9e6, "nlp": 1e5}, {"vision": 4, "nlp": 4})
    policy = Policy(fair_share_weight=1.0)
    assert due["heavy"] == pytest.approx(virtual_deadline(queue[0], policy, factors["vision"]))
    assert due["light"] == pytest.approx(virtual_deadline(queue[1], policy, factors["nlp"]))
    assert due["light"] < due["heavy"]
    assert deadlines_due(state([node("n1", 0)], queue, policy=FIFO)) == {}


def test_fair_share_prefers_the_team_that_used_less() -> None:
    queue = [job("heavy", team="vision", submitted=0), job("light", team="nlp", submitted=50)]
    usage = [TeamUsage("vision", POOL, 9e6), TeamUsage("nlp", POOL, 1e5)]
    quotas = [TeamQuota("vision", POOL, 4), TeamQuota("nlp", POOL, 4)]
    d = schedule(state([node("n1", 1)], queue, usage=usage, quotas=quotas, policy=Policy(guarantee_first=False)))
    assert list(placed(d)) == ["light"]
    assert entry(d, "heavy").code in {WaitCode.RESOURCES, WaitCode.FAIR_SHARE}
    factors = fair_share_factors(["vision", "nlp"], {"vision": 9e6, "nlp": 1e5}, {"vision": 4, "nlp": 4})
    assert factors["nlp"] > factors["vision"]
    assert fair_share_factors(["a", "b"], {}, {}) == {"a": 1.0, "b": 1.0}


def test_jobs_inside_their_guarantee_go_before_borrowers() -> None:
    quotas = [TeamQuota("vision", POOL, 4), TeamQuota("nlp", POOL, 4)]
    running = [run("r1", (("n1", 6),), team="vision")]  # vision already borrows 2
    queue = [
        job("borrower", team="vision", devices=2, runtime=60, submitted=0),
        job("owner", team="nlp", devices=2, runtime=7200, submitted=50),
    ]
    d = schedule(state([node("n1", 2)], queue, running, quotas=quotas, policy=Policy(guarantee_first=True)))
    assert list(placed(d)) == ["owner"]
    # Without the tier, borrowing follows Kueue: idle means not in use, and the order decides.
    d = schedule(state([node("n1", 2)], queue, running, quotas=quotas, policy=Policy(guarantee_first=False)))
    assert list(placed(d)) == ["borrower"]


def test_quota_limits_a_team_without_blocking_others() -> None:
    quotas = [TeamQuota("vision", POOL, 2, borrow_limit=1), TeamQuota("nlp", POOL, 2, borrow_limit=1)]
    running = [run("r1", (("n1", 3),), team="vision")]
    queue = [job("over", team="vision", submitted=0), job("fine", team="nlp", submitted=10)]
    d = schedule(state([node("n1", 5)], queue, running, quotas=quotas, policy=FIFO))
    assert entry(d, "over").code == WaitCode.QUOTA
    assert "holds 3 of the 3" in entry(d, "over").message
    assert "fine" in placed(d)


def test_borrowing_uses_idle_devices_up_to_the_limit() -> None:
    quotas = [TeamQuota("vision", POOL, 2, borrow_limit=4), TeamQuota("nlp", POOL, 6)]
    queue = [job(f"v{i}", team="vision", devices=2, submitted=i) for i in range(4)]
    d = schedule(state([node("n1", 8)], queue, quotas=quotas))
    assert len(placed(d)) == 3  # 2 guaranteed + 4 borrowed = 6 devices
    assert entry(d, "v3").code == WaitCode.QUOTA


# -- backfill ----------------------------------------------------------------------------------


def backfill_cluster(policy: Policy):
    # n1 has 6 free and a run ending at t=1000; the head needs all 8 devices of one node.
    nodes = [node("n1", 6), node("n2", 0)]
    running = [run("r1", (("n1", 2),), end=1000), run("r2", (("n2", 8),), end=5000)]
    queue = [
        job("head", devices=8, submitted=0, runtime=100),
        job("short", devices=2, submitted=10, runtime=500),  # ends at 600 < 1000
        job("long", devices=2, submitted=20, runtime=5000),  # would run past the reservation
    ]
    return schedule(state(nodes, queue, running, now=100, policy=policy))


def test_easy_backfill_never_delays_the_reserved_head() -> None:
    policy = Policy(ordering=Ordering.FIFO, backfill=True, preemption=False, guarantee_first=False)
    d = backfill_cluster(policy)
    assert set(placed(d)) == {"short"}
    head = entry(d, "head")
    assert head.code == WaitCode.RESOURCES and head.reserved_start == 1000
    assert entry(d, "long").code == WaitCode.BACKFILL_TOO_LONG


def test_a_reserved_start_is_said_without_a_time_of_its_own() -> None:
    # The message is stored and read long after the pass ("in about 15 minutes" would go stale),
    # and the estimate beside it names the time from the live ETA of the runs ahead: one time only.
    head = entry(backfill_cluster(Policy(ordering=Ordering.FIFO, preemption=False, guarantee_first=False)), "head")
    assert head.reserved_start == 1000
    assert head.message.endswith(" Devices are reserved for it: it starts next, as running runs end (see its estimated start)."), \
        head.message
    assert "in about" not in head.message and "UTC" not in head.message


def test_backfill_may_use_devices_the_reservation_does_not_need() -> None:
    nodes = [node("n1", 6), node("n2", 3)]
    running = [run("r1", (("n1", 2),), end=1000), run("r2", (("n2", 5),), end=9000)]
    queue = [job("head", devices=8, submitted=0), job("long", devices=2, submitted=5, runtime=50_000)]
    policy = Policy(ordering=Ordering.FIFO, guarantee_first=False)
    d = schedule(state(nodes, queue, running, policy=policy))
    assert placed(d)["long"] == (("n2", 2),)


def test_strict_fifo_stops_at_the_first_blocked_job() -> None:
    d = backfill_cluster(FIFO)
    assert placed(d) == {}
    assert entry(d, "short").code == WaitCode.IN_LINE


# -- preemption --------------------------------------------------------------------------------


def test_urgent_preempts_borrowed_low_runs_losing_least_work() -> None:
    quotas = [TeamQuota("nlp", POOL, 0), TeamQuota("vision", POOL, 8)]
    running = [
        run("fresh-ckpt", (("n1", 4),), klass=L, started=0, checkpoint=950),
        run("stale-ckpt", (("n1", 4),), klass=L, started=0, checkpoint=100),
    ]
    d = schedule(state([node("n1", 0)], [job("u", devices=4, klass=U, team="vision")], running, now=1000, quotas=quotas))
    assert [p.victim_id for p in d.preemptions] == ["fresh-ckpt"]
    assert d.preemptions[0].for_job_id == "u"
    assert d.preemptions[0].work_lost_device_s == 4 * 50
    assert entry(d, "u").code == WaitCode.PREEMPTING


def test_never_preempts_inside_a_guarantee_or_non_preemptible() -> None:
    quotas = [TeamQuota("nlp", POOL, 4)]
    running = [
        run("guaranteed", (("n1", 4),), klass=L, started=0),
        run("pinned", (("n1", 4),), klass=L, started=10, preemptible=False),
    ]
    d = schedule(state([node("n1", 0)], [job("u", devices=4, klass=U, team="vision")], running, quotas=quotas))
    assert d.preemptions == ()
    assert runs_within_guarantee(running, {"nlp": 4}) == {"guaranteed": True, "pinned": False}


def test_same_class_never_preempts_unless_reclaiming() -> None:
    quotas = [TeamQuota("vision", POOL, 4), TeamQuota("nlp", POOL, 0)]
    running = [run("borrowed", (("n1", 8),), team="nlp")]
    queue = [job("owner", devices=4, team="vision")]
    d = schedule(state([node("n1", 0)], queue, running, quotas=quotas))
    assert d.preemptions == ()
    d = schedule(state([node("n1", 0)], queue, running, quotas=quotas, policy=Policy(reclaim_borrowed=True)))
    assert [p.victim_id for p in d.preemptions] == ["borrowed"]
    assert "reclaimed" in d.preemptions[0].reason
    assert d.preemptions[0].kind == "reclaimed"


def test_runs_already_stopping_are_not_preempted_twice() -> None:
    running = [run("going", (("n1", 4),), klass=L, stopping=True), run("other", (("n1", 4),), klass=L)]
    d = schedule(state([node("n1", 0)], [job("u", devices=4, klass=U)], running))
    assert d.preemptions == ()
    assert entry(d, "u").code == WaitCode.PREEMPTING


def test_preemption_holds_the_nodes_for_the_preemptor() -> None:
    running = [run("victim", (("n1", 6),), klass=L)]
    queue = [job("u", devices=8, klass=U, submitted=0), job("sneaky", devices=2, submitted=1)]
    d = schedule(state([node("n1", 2)], queue, running))
    assert [p.victim_id for p in d.preemptions] == ["victim"]
    assert "sneaky" not in placed(d)


# -- headroom, explanations, determinism -------------------------------------------------------


def test_headroom_is_kept_for_short_jobs() -> None:
    policy = Policy(headroom_devices=4, headroom_max_runtime_s=3600, fair_share_weight=0)
    queue = [job("long", devices=2, runtime=86400, submitted=0), job("short", devices=2, runtime=600, submitted=1)]
    d = schedule(state([node("n1", 5)], queue, policy=policy))
    assert set(placed(d)) == {"short"}
    assert entry(d, "long").code == WaitCode.HEADROOM
    d = schedule(state([node("n1", 8)], queue[:1], policy=policy))
    assert "long" in placed(d)


def test_every_queued_job_gets_a_position_and_reason() -> None:
    queue = [job(f"j{i}", devices=1 + i % 8, submitted=i) for i in range(30)]
    d = schedule(state([node("n1", 8), node("n2", 4)], queue))
    assert sorted(e.job_id for e in d.queue) == sorted(j.id for j in queue)
    assert [e.position for e in d.queue] == list(range(1, 31))
    assert all(e.message for e in d.queue)
    assert list(d.order[POOL]) == [e.job_id for e in d.queue]


def test_same_input_same_answer_whatever_the_input_order() -> None:
    rng = random.Random(7)
    nodes = [node(f"n{i}", rng.randint(0, 8)) for i in range(6)]
    queue = [job(f"j{i}", devices=rng.choice([1, 2, 4, 8]), submitted=rng.randint(0, 50), team=rng.choice("ab")) for i in range(40)]
    first = schedule(state(nodes, queue))
    for _ in range(3):
        rng.shuffle(nodes)
        rng.shuffle(queue)
        assert schedule(state(nodes, queue)) == first


def test_explain_policy_speaks_plainly() -> None:
    rules = explain_policy(Policy())
    assert any("reserved" in r for r in rules)
    assert any("checkpoint" in r for r in rules)
    assert any("submitted" in r for r in explain_policy(FIFO))
    assert any("No job may start ahead" in r for r in explain_policy(FIFO))


def test_usage_decay_and_accrual() -> None:
    assert decay_usage(100.0, 3600, 3600) == 50.0
    # Accrual does not depend on how often it is updated.
    once = accrue_usage(0.0, 8, 7200, 3600)
    twice = accrue_usage(accrue_usage(0.0, 8, 3600, 3600), 8, 3600, 3600)
    assert abs(once - twice) < 1e-6
    assert 0 < once < 8 * 7200


# -- invariants over random clusters -----------------------------------------------------------

shapes = st.sampled_from([(1, 1), (1, 2), (1, 4), (1, 8), (2, 8), (3, 4)])


@st.composite
def clusters(draw):  # type: ignore[no-untyped-def]
    count = draw(st.integers(1, 6))
    states = st.sampled_from([NodeState.READY] * 4 + [NodeState.DRAINING])
    nodes = [node(f"n{i}", draw(st.integers(0, 8)), state=draw(states)) for i in range(count)]
    queue = []
    for i in range(draw(st.integers(0, 25))):
        k, d = draw(shapes)
        queue.append(
            job(
                f"j{i}",
                nodes=k,
                devices=d,
                team=draw(st.sampled_from(["a", "b", "c"])),
                runtime=draw(st.floats(60, 1e5)),
                submitted=draw(st.floats(0, 1000)),
                klass=draw(st.sampled_from(list(PriorityClass))),
            )
        )
    running = []
    for n in nodes:
        used = n.total_devices - n.free_devices
        if used:
            klass = draw(st.sampled_from(list(PriorityClass)))
            running.append(run(f"r-{n.id}", ((n.id, used),), klass=klass, end=draw(st.floats(1000, 1e5))))
    quotas = [TeamQuota(t, POOL, draw(st.integers(0, 16)), borrow_limit=draw(st.one_of(st.none(), st.integers(0, 16)))) for t in "abc"]
    policy = draw(st.sampled_from([Policy(), FIFO, Policy(ordering=Ordering.FIFO), Policy(reserve_depth=3), Policy(headroom_devices=4)]))
    return state(nodes, queue, running, now=1000.0, quotas=quotas, policy=policy)


@settings(max_examples=150, deadline=None)
@given(clusters())
def test_placements_respect_capacity_gangs_and_quotas(s: ClusterState) -> None:
    d = schedule(s)
    free = {n.id: (n.free_devices if n.state == NodeState.READY else 0) for n in s.nodes}
    jobs = {j.id: j for j in s.queued}
    limits = {q.team: q.guaranteed_devices + (10**6 if q.borrow_limit is None else q.borrow_limit) for q in s.quotas}
    held: dict[str, int] = {}
    for r in s.running:
        held[r.team] = held.get(r.team, 0) + r.devices
    assert len({p.job_id for p in d.placements}) == len(d.placements)
    for p in d.placements:
        j = jobs[p.job_id]
        assert len(p.allocation) == j.nodes and len({n for n, _ in p.allocation}) == j.nodes
        for node_id, count in p.allocation:
            assert count == j.devices_per_node
            free[node_id] -= count
        held[j.team] = held.get(j.team, 0) + j.devices
        assert held[j.team] <= limits[j.team]
    assert all(v >= 0 for v in free.values())
    # Reasons never change the decision.
    quiet = schedule(s, explain=False)
    assert quiet.placements == d.placements and quiet.preemptions == d.preemptions


# -- capacity index, prediction, estimates -----------------------------------------------------


def test_reservation_is_the_earliest_time_the_gang_fits() -> None:
    running = [run("a", (("n1", 8),), end=500), run("b", (("n2", 8),), end=300), run("c", (("n3", 4),), end=900)]
    cap = PoolCapacity([node("n1", 0), node("n2", 0), node("n3", 4)], running, Packing.BEST_FIT)
    assert cap.reserve(2, 8, now=100) == 500
    assert cap.reserve(1, 4, now=100) == 100  # n3's free half is not needed by the first reservation


def test_predictor_widens_history_and_never_peeks() -> None:
    history = [FinishedRun("vision", "resnet", 1, 100.0 * (i + 1), finished_at=float(i)) for i in range(5)]
    q = RuntimeQuery("vision", "resnet", 1)
    assert predict_runtime(history, q, now=10).runtime_s == 300.0
    assert predict_runtime(history, q, now=1.5).samples == 2  # runs finished later are not seen
    other_team = predict_runtime(history, RuntimeQuery("nlp", "resnet", 1), now=10)
    assert other_team.runtime_s == 300.0 and "type" in other_team.basis
    fallback = predict_runtime([], RuntimeQuery("nlp", "lm", 1, template_max_runtime_s=7200), now=10)
    assert fallback.basis == "template maximum" and fallback.runtime_s == 7200


def test_predictor_conditions_on_elapsed_and_uses_progress() -> None:
    p = RuntimePredictor()
    for value in (100, 200, 300, 400, 5000, 6000, 7000):
        p.observe(FinishedRun("t", "job", 1, value, finished_at=0))
    assert p.predict(RuntimeQuery("t", "job", 1)).runtime_s == 400
    survivor = p.predict(RuntimeQuery("t", "job", 1, elapsed_s=1000))
    assert survivor.runtime_s == 6000
    live = p.predict(RuntimeQuery("t", "job", 1, elapsed_s=100, progress=Progress(250, 1000, 2.5)))
    assert live.runtime_s == 400 and live.basis == "live progress"
    beyond = p.predict(RuntimeQuery("t", "job", 1, elapsed_s=10_000))
    assert beyond.runtime_s >= 10_000

def test_predictor_scales_seconds_per_step_to_the_steps_asked_for() -> None:
    p = RuntimePredictor()
    # The same template, team and devices, run at 300 steps: 0.1 s a step, with some spread.
    for i, seconds in enumerate((27.0, 30.0, 33.0)):
        p.observe(FinishedRun("t", "job", 1, seconds, finished_at=float(i), params_key="steps=300", steps=300))
    longer = p.predict(RuntimeQuery("t", "job", 1, params_key="steps=4000", steps=4000))
    assert longer.runtime_s == pytest.approx(400.0) and longer.basis == "history: team+type+devices, per step"
    assert longer.low_s < longer.runtime_s < longer.high_s and longer.mean_s == pytest.approx(400.0)
    # Enough runs with the very same parameters still come first.
    same = p.predict(RuntimeQuery("t", "job", 1, params_key="steps=300", steps=300))
    assert same.runtime_s == 30.0 and same.basis == "history: team+type+params+devices"
    # A running run that outlived its peers' per-step pace is conditioned on it like any other.
    survivor = p.predict(RuntimeQuery("t", "job", 1, params_key="steps=4000", steps=4000, elapsed_s=420.0))
    assert survivor.runtime_s == pytest.approx(440.0)
    # Without the steps the run asked for, the per-step history is not used.
    plain = p.predict(RuntimeQuery("t", "job", 1, params_key="steps=4000"))
    assert plain.runtime_s == 30.0 and plain.basis == "history: team+type+devices"
    # Many runs of other sizes make a coarser level "settled" for the mean; it must not win.
    for i in range(20):
        p.observe(FinishedRun("t", "job", 2, 3000.0, finished_at=10.0 + i, params_key="steps=300", steps=300))
    again = p.predict(RuntimeQuery("t", "job", 1, params_key="steps=4000", steps=4000))
    assert again.runtime_s == pytest.approx(400.0) and again.mean_s == pytest.approx(400.0)
    # Runs that did not say their steps add nothing per step.
    q = RuntimePredictor()
    q.observe(FinishedRun("t", "job", 1, 30.0, finished_at=0.0))
    assert q.predict(RuntimeQuery("t", "job", 1, steps=4000)).runtime_s == 30.0



def test_predictor_fits_start_up_and_pace_to_runs_of_different_lengths() -> None:
    p = RuntimePredictor()
    # 10 s to start, then 0.01 s a step, with a little noise: short runs are mostly start-up.
    for i, (steps, seconds) in enumerate(((100, 11.2), (200, 11.8), (1000, 20.3), (100, 10.8))):
        p.observe(FinishedRun("t", "job", 1, seconds, finished_at=float(i), params_key=f"steps={steps}", steps=steps))
    long = p.predict(RuntimeQuery("t", "job", 1, params_key="steps=10000", steps=10000))
    # Seconds per step alone would say about 0.06 x 10,000 = 600 s.
    assert long.runtime_s == pytest.approx(110.0, rel=0.05)
    assert long.basis == "history: team+type+devices, start-up + per step"
    assert long.low_s <= long.runtime_s <= long.high_s and long.mean_s == pytest.approx(110.0, rel=0.05)
    # A running run past its fitted runtime is conditioned on it like any other.
    assert p.predict(RuntimeQuery("t", "job", 1, params_key="steps=10000", steps=10000, elapsed_s=130.0)).runtime_s >= 130.0
    # Runs all of one length cannot tell start-up from pace: seconds per step, as before.
    q = RuntimePredictor()
    for i in range(3):
        q.observe(FinishedRun("t", "job", 1, 30.0, finished_at=float(i), params_key="steps=300", steps=300))
    assert q.predict(RuntimeQuery("t", "job", 1, steps=600)).basis == "history: team+type+devices, per step"


def test_affine_fit_keeps_start_up_and_pace_non_negative() -> None:
    assert affine_fit([100, 1000], [11.0, 20.0]) == pytest.approx((10.0, 0.01))
    # Longer runs relatively faster than a line through the origin allows: no negative start-up.
    startup, pace = affine_fit([100, 1000], [1.0, 20.0]) or (None, None)
    assert startup == 0.0 and pace is not None and pace > 0
    assert affine_fit([300, 300, 400], [30.0, 31.0, 40.0]) is None  # not a factor of 2 apart
    assert affine_fit([100, 1000], [20.0, 10.0]) is None  # longer runs faster: no pace to fit


def test_estimates_replay_the_queue_with_the_core() -> None:
    running = [run("r", (("n1", 8),), end=1000)]
    queue = [job("a", devices=8, runtime=500, submitted=0), job("b", devices=8, runtime=500, submitted=1)]
    s = state([node("n1", 0)], queue, running, now=100, policy=FIFO)
    est = queue_estimates(s)
    assert (est["a"].start, est["b"].start) == (1000, 1500)
    assert est["b"].low is not None and est["b"].high is not None
    assert est["b"].low <= est["b"].start <= est["b"].high
    assert simulate_starts(s, targets=["a"]).starts == {"a": 1000}


def test_estimate_extrapolates_past_the_pass_limit() -> None:
    running = [run("r", (("n1", 8),), end=1000)]
    queue = [job(f"q{i}", devices=8, runtime=100, submitted=i) for i in range(10)]
    s = state([node("n1", 0)], queue, running, now=100, policy=FIFO)
    exact = simulate_starts(s).starts
    rough = simulate_starts(s, max_passes=3)
    assert exact["q9"] == 1900
    assert "q9" in rough.extrapolated and rough.starts["q9"] >= 1000


def test_a_minimum_step_reaches_further_on_few_passes_and_reports_mid_jump() -> None:
    # Eight one-device runs end 100 s apart; the gang needs the whole node: 800 s exactly.
    running = [run(f"r{i}", (("n1", 1),), end=100.0 * (i + 1)) for i in range(8)]
    s = state([node("n1", 0)], [job("gang", devices=8, runtime=100)], running, now=0, policy=FIFO)
    assert simulate_starts(s).starts["gang"] == 800
    assert "gang" in simulate_starts(s, max_passes=3).extrapolated
    # Steps of at least 600 s: two jumps (to 600, then from the end at 700 to 1200) free the
    # node, and the start is reported mid-jump, (700 + 1200) / 2: within half a step of 800.
    coarse = simulate_starts(s, max_passes=3, min_step_s=600.0)
    assert "gang" not in coarse.extrapolated and coarse.starts["gang"] == 950
    assert coarse.passes == 3


def test_estimate_counts_expected_arrivals_that_overtake() -> None:
    running = [run("r", (("n1", 8),), end=1000)]
    queue = [job("long", devices=8, runtime=50_000, submitted=0)]
    s = state([node("n1", 0)], queue, running, now=100, policy=Policy(fair_share_weight=0))
    assert simulate_starts(s).starts["long"] == 1000
    soon = [replace(job("short", devices=8, runtime=300), submitted_at=500)]
    assert simulate_starts(s, arrivals=soon).starts["long"] == 1300


def test_predictor_prefers_the_pool_it_will_run_on() -> None:
    p = RuntimePredictor(mean_min_samples=3)
    # Plenty of history from slow hardware: 1 s a step on pool "a10".
    for i in range(10):
        p.observe(FinishedRun("t", "job", 1, 1000.0, finished_at=float(i), params_key="steps=1000", steps=1000, pool="a10"))
    query = RuntimeQuery("t", "job", 1, params_key="steps=2000", steps=2000, pool="h100")
    slow = p.predict(query)
    assert slow.runtime_s == pytest.approx(2000.0) and "on pool" not in slow.basis
    # Two runs on the new pool are not enough to go on: still every pool's history.
    for i in range(2):
        p.observe(FinishedRun("t", "job", 1, 100.0, finished_at=20.0 + i, params_key="steps=1000", steps=1000, pool="h100"))
    assert p.predict(query).runtime_s == pytest.approx(2000.0)
    # A third settles it: the point estimate and the mean (what waits add up) follow the new pool.
    p.observe(FinishedRun("t", "job", 1, 100.0, finished_at=30.0, params_key="steps=1000", steps=1000, pool="h100"))
    fast = p.predict(query)
    assert fast.runtime_s == pytest.approx(200.0) and fast.mean_s == pytest.approx(200.0)
    assert fast.basis == "history: team+type+devices, per step on pool h100"
    # The very same parameters on the pool still come first, as without pools.
    same = p.predict(replace(query, params_key="steps=1000", steps=1000))
    assert same.runtime_s == 100.0 and same.basis == "history: team+type+params+devices on pool h100"
    # The old pool keeps its own pace, and a run that names no pool sees all of it.
    assert p.predict(replace(query, pool="a10")).runtime_s == pytest.approx(2000.0)
    assert p.predict(replace(query, pool="")).basis == "history: team+type+devices, per step"
    # A running run that outlived all its pool's peers widens to every pool's history.
    survivor = p.predict(replace(query, params_key="steps=1000", steps=1000, elapsed_s=500.0))
    assert "on pool" not in survivor.basis and survivor.runtime_s == pytest.approx(1000.0)


def test_predictor_mean_is_for_sums_and_survivors() -> None:
    p = RuntimePredictor(mean_min_samples=3)
    for value in (100, 200, 300, 400, 5000, 6000, 7000):
        p.observe(FinishedRun("t", "job", 1, value, finished_at=0))
    pred = p.predict(RuntimeQuery("t", "job", 1))
    # The median is the point estimate; the heavy tail shows in the mean, which waits add up.
    assert pred.runtime_s == 400 and pred.mean_s == pytest.approx(19_000 / 7) and pred.expected_s == pred.mean_s
    survivor = p.predict(RuntimeQuery("t", "job", 1, elapsed_s=1000))
    assert survivor.mean_s == pytest.approx(6000)
    # Means rest on a longer window than the median does.
    q = RuntimePredictor(window=4, mean_window=8, mean_min_samples=1)
    for value in (1000, 1000, 1000, 1000, 10, 10, 10, 10):
        q.observe(FinishedRun("t", "job", 1, value, finished_at=0))
    short = q.predict(RuntimeQuery("t", "job", 1))
    assert short.runtime_s == 10 and short.mean_s == pytest.approx(505)
    assert RuntimePredictor().predict(RuntimeQuery("t", "none", 1)).expected_s == 3600.0


def test_the_replay_runs_medians_and_the_fluid_guess_adds_up_means() -> None:
    # A running run ends at its live ETA (`expected_end`) where it has one; the replay runs each
    # queued job for its median (`predicted_runtime`): which run frees devices first is a
    # question about single runs, and means of a heavy tail put those ends too late.
    running = [replace(run("r", (("n1", 8),), end=1000), expected_end=4000)]
    queue = [
        replace(job("a", devices=8, runtime=500, submitted=0), expected_runtime=3000),
        job("b", devices=8, runtime=500, submitted=1),
    ]
    s = state([node("n1", 0)], queue, running, now=100, policy=FIFO)
    assert simulate_starts(s).starts == {"a": 4000, "b": 4500}
    # Without a live ETA the run ends at its predicted end.
    plain = state([node("n1", 0)], queue, [run("r", (("n1", 8),), end=1000)], now=100, policy=FIFO)
    assert simulate_starts(plain).starts == {"a": 1000, "b": 1500}
    # Past the pass limit the fluid guess sums the work ahead by its means: b waits for a's 3000 s.
    rough = simulate_starts(s, max_passes=1)
    assert rough.starts == {"a": 4000, "b": 7000} and rough.extrapolated == {"a", "b"}


def test_where_the_pool_demotes_the_fluid_guess_counts_work_ahead_up_to_the_threshold() -> None:
    # Under least attained service a job ahead holds its devices only until it is demoted below
    # a new job: two 10-hour jobs ahead of c count 1 hour each, not 10 (issue 28: whole runs put
    # the trace's fluid guesses 4-10x late). The one pass ends at r's end, 1000.
    running = [run("r", (("n1", 8),), end=1000)]
    queue = [job(n, devices=8, runtime=36_000, submitted=i) for i, n in enumerate("abc")]
    las = Policy(demote_after_s=3600, fair_share_weight=0)
    rough = simulate_starts(state([node("n1", 0)], queue, running, now=100, policy=las), max_passes=1)
    assert rough.extrapolated == {"a", "b", "c"} and rough.starts["c"] == 1000 + 2 * 3600
    # A job ahead that ran already counts what it has left to the threshold.
    served = [queue[0], replace(queue[1], attained_s=3000), queue[2]]
    rough = simulate_starts(state([node("n1", 0)], served, running, now=100, policy=las), max_passes=1)
    assert rough.starts["c"] == 1000 + 3600 + 600
    # A pool that does not demote counts whole runs.
    fifo = simulate_starts(state([node("n1", 0)], queue, running, now=100, policy=FIFO), max_passes=1)
    assert fifo.starts["c"] == 1000 + 2 * 36_000


def test_a_run_started_inside_a_coarse_jump_runs_from_its_middle() -> None:
    # Eight one-device runs end 100 s apart, and 700-second one-device jobs wait behind them;
    # q8 really starts at 800, when q0 (started at 100) ends. With 600-second steps, q0..q5 start
    # mid-jump at 350 (the jump from 100 to 600) and run from there, to 1050: inside the next
    # jump (700 to 1200), so q8 starts in that one, at 950. Run from the jump's end, they held
    # their devices to 1300 and q8 started a jump later, at 1550.
    running = [run(f"r{i}", (("n1", 1),), end=100.0 * (i + 1)) for i in range(8)]
    queue = [job(f"q{i}", runtime=700, submitted=i) for i in range(9)]
    s = state([node("n1", 0)], queue, running, now=0, policy=FIFO)
    coarse = simulate_starts(s, min_step_s=600.0)
    assert coarse.starts["q0"] == 350 and coarse.starts["q5"] == 350
    assert coarse.starts["q8"] == 950


def test_queue_lag_places_a_job_by_the_recent_lag_of_starts() -> None:
    lag = QueueLag(window_s=1000, min_samples=3)
    assert lag.eta(500, now=100) is None  # too few starts to judge
    for t, rank in ((10, 0), (20, 5), (30, 10), (40, 25)):
        lag.observe(t, rank)
    # Lags 10, 15, 20, 15: the median 15 puts rank 500 at 515, never before now.
    assert lag.eta(500, now=100) == 515
    assert lag.eta(0, now=100) == 100
    lag.observe(5000, 4000)  # the older starts leave the window
    assert lag.eta(500, now=5000) is None


def test_jobs_far_back_are_placed_by_the_lag_without_a_replay() -> None:
    # One full node, a FIFO line of three: with max_ahead=1 the last job skips the replay.
    running = [run("r", (("n1", 8),), end=1000)]
    queue = [job(f"q{i}", devices=8, runtime=500, submitted=i) for i in range(3)]
    s = state([node("n1", 0)], queue, running, now=100, policy=FIFO)
    # Too few starts seen yet: the fluid guess, now + the work ahead spread over the pool.
    fluid = simulate_starts(s, targets=["q2"], max_ahead=1, lag=QueueLag(min_samples=3))
    # (q0 and q1 ahead: 2 x 8 x 500 device-seconds over 8 devices.)
    assert fluid.passes == 0 and fluid.extrapolated == {"q2"} and fluid.starts["q2"] == 1100
    lag = QueueLag(min_samples=3)
    for t in (40.0, 50.0, 60.0):
        lag.observe(t, t - 300)  # jobs have been starting 300 s behind their rank times
    assert lag.lag_at(100) == 300
    placed = simulate_starts(s, targets=["q2"], max_ahead=1, lag=lag)
    # Under FIFO the rank time is the submission time: 2 + 300, never before now.
    assert placed.passes == 0 and placed.rank_times == {"q2": 2} and placed.starts == {"q2": 302}
    for t in (70.0, 80.0, 90.0):
        lag.observe(t, t - 2000)  # new starts move the median at once (no stale cached figure)
    assert lag.lag_at(100) == 2000
    assert simulate_starts(s, targets=["q2"], max_ahead=1, lag=lag).starts == {"q2": 2002}


def test_front_is_replayed_and_the_back_placed_by_its_own_pools_lag_with_a_range() -> None:
    # Pool a100: one full node, a FIFO line of four. Pool t4: the same, but no recent starts.
    t4 = [replace(node("m1", 0), pool="t4")]
    running = [run("r", (("n1", 8),), end=1000), replace(run("s", (("m1", 8),), end=1000), pool="t4")]
    queue = [job(f"q{i}", devices=8, runtime=500, submitted=i) for i in range(4)]
    queue += [replace(job(f"t{i}", devices=8, runtime=500, submitted=i), pool="t4") for i in range(3)]
    s = replace(state([node("n1", 0), *t4], queue, running, now=100, policy=FIFO), policies={POOL: FIFO, "t4": FIFO})
    lag = QueueLag(min_samples=3)
    for t, behind in ((40.0, 400.0), (50.0, 200.0), (60.0, 300.0), (70.0, 250.0), (80.0, 350.0)):
        lag.observe(t, t - behind)
    # Nearest-rank 20th, 50th and 80th percentiles of the lags, past the rank time.
    assert lag.eta_range(10, now=100) == (210, 310, 360)
    est = queue_estimates(s, lags={POOL: lag}, max_ahead=2)
    # The first two of each line are replayed: one after the other as the node frees.
    assert (est["q0"].start, est["q1"].start) == (1000, 1500) and not est["q1"].extrapolated
    assert (est["t0"].start, est["t1"].start) == (1000, 1500)
    # Further back in a100: the median lag (300 s) past the rank time (the submission, under
    # FIFO), never before now, with the 20th to 80th percentile lags as the range.
    assert est["q3"].extrapolated and (est["q3"].low, est["q3"].start, est["q3"].high) == (203, 303, 353)
    # t4 has no lag of its own: the fluid guess (work ahead over the pool), with a scaled range.
    assert est["t2"].extrapolated and est["t2"].start == 1100
    assert (est["t2"].low, est["t2"].high) == (100 + 0.5 * 1000, 100 + 2 * 1000)
    # One lag for every pool places t4's back of the line too.
    assert queue_estimates(s, lags=lag, max_ahead=2)["t2"].start == 302
