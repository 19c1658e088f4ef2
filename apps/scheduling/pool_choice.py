"""The pass's pool choice for runs that may use several pools: measure each pool's pace per
template from finished runs, ask the core (`pools.pools_choose`) where each such queued run
finishes first, and move it there (`Run.pool`, with the reason in `Run.pool_reason`), before
the placement pass. Queue estimates and the cost the budgets reserve then follow the chosen pool.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta

from apps.audit.services import audit_record_many
from apps.runs.models import Run, RunStatus
from apps.scheduling.estimate import Lags
from apps.scheduling.model import ClusterState
from apps.scheduling.pools import PaceSample, PoolChoice, PoolSpeed, pace_rates, pool_speeds, pools_choose
from apps.scheduling.snapshot import Snapshot, lags_load

PACE_DAYS = 30
PACE_RUNS = 2000
# Replay passes per option: the wait in each acceptable pool is the estimator's, bounded like the pass's.
CHOICE_MAX_PASSES = 400


def pace_samples(*, templates: Iterable[str], pools: Iterable[str], now: datetime) -> list[PaceSample]:
    """Speeds of recently finished runs of these templates in these pools: steps per second where
    they report steps, else one run per runtime."""
    rows = (Run.objects.filter(status=RunStatus.SUCCEEDED, template__slug__in=list(templates), pool__name__in=list(pools),
                               started_at__isnull=False, finished_at__gte=now - timedelta(days=PACE_DAYS))
            .order_by("-finished_at")
            .values_list("template__slug", "pool__name", "total_steps", "steps_done", "started_at", "finished_at")[:PACE_RUNS])
    samples: list[PaceSample] = []
    for template, pool, total, done, started, finished in rows:
        if finished is None or started is None:
            continue
        seconds = (finished - started).total_seconds()
        if seconds <= 0:
            continue
        steps = total or done
        samples.append(PaceSample(template, pool, (steps or 1) / seconds))
    return samples


def run_pools(run: Run) -> list[str]:
    """The pools a run may use: its list when it names several, else its one pool."""
    names = [p for p in (run.pools or []) if isinstance(p, str)]
    return names if len(names) > 1 else [run.pool.name]


def pools_choose_apply(*, snap: Snapshot, lags: Lags = None) -> list[PoolChoice]:
    """Move each queued multi-pool run of `snap` to the pool where it is predicted to finish first
    (rows and `snap.state`); returns the choices. The queued rows are locked by the pass."""
    multi = {job_id: run for job_id, run in snap.queued.items() if len(run_pools(run)) > 1}
    if not multi:
        return []
    names = {p for run in multi.values() for p in run_pools(run) if p in snap.pools}
    rates = pace_rates(pace_samples(templates={run.template.slug for run in multi.values()}, pools=names, now=snap.now))
    speeds: dict[str, tuple[PoolSpeed, ...]] = {
        job_id: pool_speeds(rates, template=run.template.slug, base=run.pool.name,
                            pools=[p for p in run_pools(run) if p in snap.pools])
        for job_id, run in multi.items()}
    if lags is None:
        lags = lags_load(now=snap.now, policies=dict(snap.state.policies))
    state, choices = pools_choose(snap.state, speeds, lags=lags, max_passes=CHOICE_MAX_PASSES)
    snap.state = state
    _apply(snap, choices)
    return choices


def _apply(snap: Snapshot, choices: list[PoolChoice]) -> None:
    audits = []
    for choice in choices:
        run = snap.queued[choice.job_id]
        old = run.pool.name
        if old == choice.pool and run.pool_reason == choice.reason:
            continue
        run.pool = snap.pools[choice.pool]
        run.pool_reason = choice.reason
        Run.objects.filter(pk=run.pk, status=RunStatus.QUEUED).update(pool=run.pool, pool_reason=choice.reason,
                                                                      updated_at=snap.now)
        if old != choice.pool:
            audits.append({"action": "run.pool_chosen", "target": run, "team_id": run.project.team_id,
                           "before": {"pool": old}, "after": {"pool": choice.pool, "reason": choice.reason}})
    if audits:
        audit_record_many(records=audits)



def probe_pool_choose(*, snap: Snapshot, state: ClusterState, job_id: str, pools: Sequence[str],
                      template: str) -> tuple[ClusterState, PoolChoice | None]:
    """A would-be run (`job_id` in `state`, the start forecast's probe) moved to the acceptable pool
    it would finish first in, as the next pass would choose; no choice for one pool."""
    names = [p for p in pools if p in snap.pools]
    job = next((j for j in state.queued if j.id == job_id), None)
    if job is None or len(names) < 2:
        return state, None
    rates = pace_rates(pace_samples(templates=[template], pools=names, now=snap.now))
    speeds = {job_id: pool_speeds(rates, template=template, base=job.pool, pools=names)}
    lags = lags_load(now=snap.now, policies=dict(state.policies))
    state, [choice] = pools_choose(state, speeds, lags=lags, max_passes=CHOICE_MAX_PASSES)
    return state, choice
