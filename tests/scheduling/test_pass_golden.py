"""The scheduler core decides as it did when the golden answers were recorded (`pass_golden.py`).

800 seeded cluster states (pools with and without nodes, draining and lost nodes, gangs, quotas,
usage, budget and backoff holds, avoided nodes, demoted and stopping runs, every policy switch):
placements, preemptions, queue entries with their codes and messages, fragmentation, order,
order keys, the policy words and three queue replays, each as recorded before the pass was split
into phases.
"""

from __future__ import annotations

import json

from tests.scheduling.pass_golden import FULL, GOLDEN, STATES, answers, digests


def test_every_seeded_state_gets_the_recorded_answers() -> None:
    recorded = json.loads(GOLDEN.read_text())
    assert len(recorded["digests"]) == STATES and len(recorded["full"]) == FULL
    differ: list[str] = []
    for seed in range(STATES):
        answer = answers(seed)
        if seed < FULL:
            assert answer == recorded["full"][seed], f"seed {seed}"
        mine, theirs = digests(answer), recorded["digests"][seed]
        differ += [f"seed {seed}: {part}" for part in theirs if mine.get(part) != theirs[part]]
    assert not differ, differ[:20]
