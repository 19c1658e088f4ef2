"""Runs that may use several pools (issue 28): the core places each where it is predicted to
finish first, by each pool's wait and its measured pace for the template (pure, no database)."""

from __future__ import annotations

from apps.scheduling.model import ClusterState, Node, Policy, PriorityClass, QueuedJob, RunningJob
from apps.scheduling.pools import (
    PaceSample,
    PoolOption,
    PoolSpeed,
    pace_rates,
    pool_choose,
    pool_speeds,
    pools_choose,
)

HOUR = 3600.0


def _job(job_id: str, pool: str = "a100", runtime: float = 2 * HOUR, submitted: float = 0.0) -> QueuedJob:
    return QueuedJob(id=job_id, team="t", pool=pool, priority_class=PriorityClass.NORMAL, submitted_at=submitted,
                     nodes=1, devices_per_node=1, predicted_runtime=runtime, preemptible=False)


def _busy(run_id: str, pool: str, node: str, end: float) -> RunningJob:
    return RunningJob(id=run_id, team="u", pool=pool, priority_class=PriorityClass.URGENT, allocation=((node, 1),),
                      started_at=0.0, predicted_end=end, preemptible=False)


def _state(*, h100_busy_until: float | None = None, a100_busy_until: float | None = None,
           queued: tuple[QueuedJob, ...] = ()) -> ClusterState:
    running = []
    if h100_busy_until is not None:
        running.append(_busy("h", "h100", "h1", h100_busy_until))
    if a100_busy_until is not None:
        running.append(_busy("a", "a100", "a1", a100_busy_until))
    nodes = (Node("a1", "a100", 1, 0 if a100_busy_until else 1), Node("h1", "h100", 1, 0 if h100_busy_until else 1))
    return ClusterState(now=10.0, nodes=nodes, running=tuple(running), queued=queued,
                        policies={"a100": Policy(), "h100": Policy()})


def test_pace_comes_from_finished_runs_and_falls_back_to_one() -> None:
    rates = pace_rates([PaceSample("lm", "a100", 10.0), PaceSample("lm", "a100", 12.0), PaceSample("lm", "h100", 20.0),
                        PaceSample("lm", "h100", 22.0), PaceSample("cnn", "a100", 5.0)])
    a100, h100 = pool_speeds(rates, template="lm", base="a100", pools=["a100", "h100"])
    assert (a100.pace, a100.measured) == (1.0, True)
    assert h100.measured and abs(h100.pace - 21.0 / 11.0) < 1e-9
    # No run of cnn ever finished in h100: same speed assumed, and marked unmeasured.
    assert pool_speeds(rates, template="cnn", base="a100", pools=["h100"]) == (PoolSpeed("h100", 1.0, False),)


def test_both_pools_idle_the_faster_pool_is_picked_and_the_reason_says_why() -> None:
    job = _job("run", runtime=2 * HOUR)
    speeds = {"run": (PoolSpeed("a100", 1.0, True), PoolSpeed("h100", 2.0, True))}
    state, [choice] = pools_choose(_state(queued=(job,)), speeds)
    assert choice.pool == "h100"
    assert choice.reason == "placed in h100: predicted to finish 1 h sooner than a100 (pace 2.0×)"
    [moved] = state.queued
    # Queued in h100 with the runtime it has there, so its estimate and placement are h100's.
    assert moved.pool == "h100" and moved.predicted_runtime == HOUR


def test_an_idle_slower_pool_wins_when_the_fast_pool_waits_long() -> None:
    job = _job("run", runtime=2 * HOUR)
    speeds = {"run": (PoolSpeed("a100", 1.0, True), PoolSpeed("h100", 2.0, True))}
    # h100 is held for 10 hours: 10 h + 1 h there against 2 h in the idle a100.
    state, [choice] = pools_choose(_state(h100_busy_until=10 * HOUR, queued=(job,)), speeds)
    assert choice.pool == "a100"
    assert choice.reason.startswith("placed in a100: predicted to finish 9 h")
    assert "sooner than h100 (pace 0.5×)" in choice.reason
    assert state.queued[0].pool == "a100" and state.queued[0].predicted_runtime == 2 * HOUR


def test_a_short_wait_in_the_fast_pool_still_beats_the_slow_pool() -> None:
    job = _job("run", runtime=4 * HOUR)
    speeds = {"run": (PoolSpeed("a100", 1.0, True), PoolSpeed("h100", 2.0, True))}
    # 30 min wait + 2 h in h100 against 4 h in a100.
    _, [choice] = pools_choose(_state(h100_busy_until=1800.0, queued=(job,)), speeds)
    assert choice.pool == "h100"
    wait = next(o for o in choice.options if o.pool == "h100").wait_s
    assert wait is not None and abs(wait - (1800.0 - 10.0)) < 1.0


def test_later_runs_see_the_choices_of_earlier_ones() -> None:
    first, second = _job("first", submitted=0.0), _job("second", submitted=1.0)
    speeds = {j: (PoolSpeed("a100", 1.0, True), PoolSpeed("h100", 2.0, True)) for j in ("first", "second")}
    state, choices = pools_choose(_state(queued=(first, second)), speeds)
    # The first takes the idle h100 (1 h); the second would wait 1 h there and finish at 2 h,
    # no sooner than the idle a100's 2 h: it stays where it is.
    assert [(c.job_id, c.pool) for c in choices] == [("first", "h100"), ("second", "a100")]


def test_unmeasured_pace_is_taken_as_one_and_said() -> None:
    job = _job("run", runtime=HOUR)
    speeds = {"run": (PoolSpeed("a100", 1.0, False), PoolSpeed("h100", 1.0, False))}
    _, [choice] = pools_choose(_state(a100_busy_until=3 * HOUR, queued=(job,)), speeds)
    assert choice.pool == "h100"
    assert "pace taken as 1.0×" in choice.reason


def test_a_pool_that_cannot_hold_it_is_not_chosen() -> None:
    choice = pool_choose("j", [PoolOption("a100", None, HOUR), PoolOption("h100", 0.0, HOUR)], current="a100")
    assert choice.pool == "h100"
    assert choice.reason == "placed in h100: the only acceptable pool that can hold it (a100 cannot)"
    nowhere = pool_choose("j", [PoolOption("a100", None, HOUR), PoolOption("h100", None, HOUR)], current="a100")
    assert nowhere.pool == "a100" and "none of a100, h100 can hold it" in nowhere.reason


def test_the_current_pool_is_kept_when_another_is_barely_faster() -> None:
    choice = pool_choose("j", [PoolOption("a100", 0.0, HOUR), PoolOption("h100", 0.0, HOUR - 30.0)], current="a100")
    assert choice.pool == "a100" and "about when h100 would" in choice.reason


def test_the_cli_sends_several_pools_as_resources_pools() -> None:
    from trainyard import cli

    args = cli.build_parser().parse_args(["submit", "digits-classifier", "-p", "vision/digits", "--pools", "a100, h100"])
    assert cli._submission(args)["resources"] == {"pools": ["a100", "h100"]}
    one = cli.build_parser().parse_args(["submit", "digits-classifier", "-p", "vision/digits"])
    assert "resources" not in cli._submission(one)
