"""How long a run is expected to take, for the apps that must not import the scheduler.

The scheduler owns runtime prediction (its history of finished runs, apps.scheduling.predict);
billing needs the figure for admission (predicted runtime × devices × price) but sits below
it, so the scheduler registers an estimator here when the app registry is ready and callers
ask `runs_expected_runtimes`. Without one, or without history, the run's max runtime stands.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from apps.runs.models import Run

MAX_RUNTIME_BASIS = "its max runtime"


@dataclass(frozen=True)
class RuntimeEstimate:
    seconds: float
    # In words, for messages: "its max runtime", "the predicted runtime".
    basis: str


# A factory loads what it predicts from (the history, once per call) and returns the estimator,
# which answers None when it has nothing better than the run's max runtime.
RuntimeEstimator = Callable[[Run], float | None]
RUNTIME_ESTIMATORS: list[Callable[[], RuntimeEstimator]] = []


def runtime_estimator_register(factory: Callable[[], RuntimeEstimator]) -> None:
    if factory not in RUNTIME_ESTIMATORS:
        RUNTIME_ESTIMATORS.append(factory)


def runs_expected_runtimes(*, runs: Sequence[Run]) -> list[RuntimeEstimate]:
    """Per run (in order), the first registered estimate, capped at the run's max runtime (a
    run is stopped there, so it never costs more); else the max runtime itself. Each
    estimator loads its history once for all of them."""
    estimators = [factory() for factory in RUNTIME_ESTIMATORS] if runs else []
    out = []
    for run in runs:
        limit = float(run.max_runtime_s or 0)
        found = RuntimeEstimate(seconds=limit, basis=MAX_RUNTIME_BASIS)
        for estimator in estimators:
            seconds = estimator(run)
            if seconds is not None and 0 < seconds < limit:
                found = RuntimeEstimate(seconds=seconds, basis="the predicted runtime")
                break
        out.append(found)
    return out
