"""How past estimates turned out, as the estimator learns from them: which estimate rows are a
requeue's, and the learned correction (`estimate.WaitCalibration`) fed from the rows.

One definition of a requeue serves the queue page's accuracy tally, the lag of recent first
waits (`snapshot.lags_load`) and the learned correction, as in the trace replay
(`trace_replay.Replay`): an at-submission estimate is a requeue's when an attempt of its run had
been placed before it was recorded. A run placed at once on submit has no estimate then, so
"the run had an earlier estimate" would miss it when it is preempted later. A pass applying the
correction classes a waiting run the same way (`snapshot.attempt_history`, `QueuedJob.placed_before`):
placed before, whether or not that attempt ever ran.

The correction reads up to `CALIBRATION_ROWS` outcomes a pool, on every pass and every forecast
of the submit form; `calibrations_cached` keeps what one read found in the shared cache, so the
next pass or forecast reuses it while no run has started since and for at most
`CALIBRATION_CACHE_S`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from datetime import datetime, timedelta

from django.core.cache import cache
from django.db.models import Exists, OuterRef

from apps.runs.models import Attempt
from apps.scheduling.estimate import CalibrationKey, WaitCalibration
from apps.scheduling.models import EstimateKind, QueueEstimate


def estimate_requeued() -> Exists:
    """For a QueueEstimate queryset: the row was recorded after an attempt of its run was placed
    (its wait is a requeue's, back in line after a preemption or a lost node)."""
    return Exists(Attempt.objects.filter(run=OuterRef("run"), created_at__lt=OuterRef("recorded_at")))


# How far back the correction learns from, and from at most how many outcomes a pool.
CALIBRATION_WINDOW = timedelta(days=14)
CALIBRATION_ROWS = 5000
# A pass runs every 10 s (portal/settings/celery.py): what one read, the next forecasts reuse.
CALIBRATION_CACHE_S = 10.0
CACHE_PREFIX = "scheduling:calibrations"

# One outcome: pool, the estimate's class, its estimated wait, the wait that followed, and when
# the run started (epoch seconds; a cached read drops those that left the window since).
Outcome = tuple[str, CalibrationKey, float, float, float]


def calibration_outcomes(*, now: datetime, pools: Iterable[str]) -> list[Outcome]:
    """The recent runs whose at-submission (or at-requeue) estimate was corrected and that have
    since started, pool by pool, each pool's oldest first, as the trace replay feeds them to the
    correction: the newest `CALIBRATION_ROWS` of each pool, so a busy pool never pushes a quiet
    pool's outcomes out.

    One query a pool, each stopping at its own `CALIBRATION_ROWS`, newest first: a window
    function ranking each pool's rows would rank every row of the window (and test each for a
    requeue) before keeping the newest."""
    outcomes: list[Outcome] = []
    for name in sorted(set(pools)):
        rows = list(
            QueueEstimate.objects.filter(kind=EstimateKind.AT_SUBMISSION, actual_start__gte=now - CALIBRATION_WINDOW,
                                         actual_start__lte=now, raw_estimated_start__isnull=False, run__pool__name=name)
            .annotate(requeued=estimate_requeued())
            .order_by("-actual_start", "-pk")
            .values_list("recorded_at", "raw_estimated_start", "actual_start", "requeued", "run__nodes",
                         "run__devices_per_node")[:CALIBRATION_ROWS]
        )
        for recorded, raw, started, requeued, nodes, per_node in reversed(rows):
            if raw is None or started is None:
                continue
            estimated_wait = (raw - recorded).total_seconds()
            key = WaitCalibration.key(estimated_wait=estimated_wait, requeued=bool(requeued), devices=nodes * per_node)
            outcomes.append((name, key, estimated_wait, (started - recorded).total_seconds(), started.timestamp()))
    return outcomes


def calibrations_from(outcomes: Iterable[Outcome], *, pools: Iterable[str]) -> dict[str, WaitCalibration]:
    """Per pool, a correction that observed `outcomes` in order."""
    calibrations = {pool: WaitCalibration() for pool in pools}
    for pool, key, estimated_wait, wait, _ in outcomes:
        calibration = calibrations.get(pool)
        if calibration is not None:
            calibration.observe(key, estimated_wait, wait)
    return calibrations


def _newest_start(now: datetime) -> tuple[float, int] | None:
    """The latest start of an at-submission estimate by `now` (and its row): one index read that
    changes whenever a run with an estimate starts, which is what feeds the correction."""
    row = (QueueEstimate.objects.filter(kind=EstimateKind.AT_SUBMISSION, actual_start__lte=now)
           .order_by("-actual_start").values_list("actual_start", "pk").first())
    return None if row is None or row[0] is None else (row[0].timestamp(), row[1])


def _cache_key(names: list[str], newest: tuple[float, int] | None) -> str:
    digest = hashlib.sha256(repr((names, newest)).encode()).hexdigest()[:32]
    return f"{CACHE_PREFIX}:{digest}"


def calibrations_cached(*, now: datetime, pools: Iterable[str]) -> dict[str, WaitCalibration]:
    """Per pool, the estimator's learned correction (`WaitCalibration`), fed the recent runs whose
    at-submission (or at-requeue) estimate was corrected and that have since started
    (`calibration_outcomes`): the class of that estimate (the replay's own wait, back in line or
    new, width) and the wait that followed, oldest first, as the trace replay feeds it. The passes
    and the forecast read it here, from the shared cache when an earlier pass or forecast read the
    same pools within `CALIBRATION_CACHE_S` and no run with an estimate has started since.

    The result is the same as a fresh read: the key changes with the newest start, and a reuse at
    a later `now` drops the outcomes that have left the window (the oldest: the rows a fresh read
    would find are the cached ones less those). A read for an earlier `now` reads afresh."""
    names = sorted(set(pools))
    key = _cache_key(names, _newest_start(now))
    hit = cache.get(key)
    now_s = now.timestamp()
    if isinstance(hit, tuple) and len(hit) == 2 and isinstance(hit[0], float) and hit[0] <= now_s:
        since = (now - CALIBRATION_WINDOW).timestamp()
        return calibrations_from((o for o in hit[1] if o[4] >= since), pools=names)
    outcomes = calibration_outcomes(now=now, pools=names)
    cache.set(key, (now_s, outcomes), CALIBRATION_CACHE_S)
    return calibrations_from(outcomes, pools=names)
