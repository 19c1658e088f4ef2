"""Demo spend for `make run` (`seed_demo --history`): three weeks of finished runs, priced by the
real ledger code, so the finance console, budgets and burn-downs have something to show.

Not part of plain `seed_demo`: tests want an empty ledger. Idempotent (skipped once the
history node exists). The runs ran on a retired node, "demo-history", left offline, in a pool of
its own ("v100-retired"): they stand for GPU runs of an hour or so, far slower per step than
this machine's CPU, and the runtime predictor learns each pool's own pace. In pool "local" they
would make every demo run's predicted runtime, and so every queue estimate, many times too long.
"""

from __future__ import annotations

import random
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from apps.billing.models import PoolPrice
from apps.billing.seed import DEMO_PRICE, DEMO_PRICE_FROM
from apps.billing.services import attempt_accrue
from apps.jobtemplates.models import JobTemplate
from apps.nodes.models import Node, NodePool, NodeState
from apps.runs.models import Assignment, AssignmentState, Attempt, AttemptStatus, Run, RunStatus
from apps.runs.services.demo import runs_seeded_record
from apps.runs.services.params import params_resolve
from apps.runs.services.transitions import run_new
from apps.tenants.models import Project

HISTORY_NODE = "demo-history"
HISTORY_POOL = "v100-retired"
HISTORY_DAYS = 21
# (team, project, template, family prefix, owner, hours of a typical run, devices)
WORKLOADS = [
    ("vision", "digits", "digits-classifier", "demo-history-digits", "alice", 0.6, 1),
    ("vision", "digits", "digits-classifier", "demo-history-digits-wide", "alice", 0.4, 2),
    ("nlp", "tiny-lm", "ddp-train", "demo-history-tinylm", "bob", 1.5, 2),
]
RUNS_PER_WORKLOAD = 12
# How runs end, in proportion: failures and cancellations are the waste the console shows.
OUTCOMES = [RunStatus.SUCCEEDED] * 8 + [RunStatus.FAILED, RunStatus.CANCELLED]
# What a page says of each: a failed run with no reason looks like a bug in the portal.
HISTORY_REASONS: dict[str, str] = {
    RunStatus.SUCCEEDED: "demo history: finished",
    RunStatus.FAILED: "demo history: rank 0 exited with code 1 (CUDA out of memory)",
    RunStatus.CANCELLED: "demo history: cancelled by its owner",
}


def seed_history(*, users: dict[str, Any], stdout: Any) -> int:
    """Create the history once; the number of runs made (0 when already there)."""
    if Node.objects.filter(hostname=HISTORY_NODE).exists():
        return 0
    rng = random.Random(20261101)
    now = timezone.now()
    made = 0
    with transaction.atomic():
        pool, _ = NodePool.objects.get_or_create(name=HISTORY_POOL, defaults={
            "description": "Retired GPU nodes where the demo history ran; none is online, so nothing new starts here.",
            "price_per_device_hour": DEMO_PRICE})
        if not PoolPrice.objects.filter(pool=pool).exists():
            PoolPrice.objects.create(pool=pool, price_per_device_hour=DEMO_PRICE, effective_from=DEMO_PRICE_FROM)
        node = Node.objects.create(pool=pool, hostname=HISTORY_NODE, agent_uid=f"{HISTORY_NODE}-retired", state=NodeState.OFFLINE,
                                   last_status={"note": "retired: ran the demo history"})
        attempts, runs = [], []
        for team, project_slug, slug, family, owner, hours, devices in WORKLOADS:
            template = JobTemplate.objects.filter(slug=slug, published=True).order_by("-version").first()
            project = Project.objects.filter(team__slug=team, slug=project_slug).first()
            if template is None or project is None:
                continue
            for i in range(RUNS_PER_WORKLOAD):
                start = now - timedelta(days=HISTORY_DAYS) + timedelta(hours=rng.uniform(0, 24 * (HISTORY_DAYS - 1)))
                status = rng.choice(OUTCOMES)
                runtime = timedelta(hours=hours * rng.lognormvariate(0, 0.35) * (0.4 if status != RunStatus.SUCCEEDED else 1))
                params = _history_params(template)
                # Steps, so finance's "Wh / step" has a figure (issue 29): all of them, or as far as
                # a failed or cancelled run got.
                total = params.get(template.total_steps_param) if template.total_steps_param else None
                total = total if isinstance(total, int) and total > 0 else None
                done = (total if status == RunStatus.SUCCEEDED else int(total * rng.uniform(0.2, 0.6))) if total else 0
                run = run_new(
                    status=status,
                    project=project, template=template, pool=pool, entrypoint=template.entrypoint, submitted_by=users.get(owner),
                    name=f"{slug} history #{i + 1}", params=params, total_steps=total, steps_done=done,
                    tags={"owner": owner, "task": template.kind, "dataset": "sklearn-digits", "candidate": "baseline",
                          "family": family},
                    family=family, nodes=1, devices_per_node=devices, max_runtime_s=int(hours * 3 * 3600),
                    status_reason=HISTORY_REASONS[status], started_at=start, finished_at=start + runtime,
                )
                run.save(force_insert=True)
                Run.objects.filter(pk=run.pk).update(created_at=start - timedelta(minutes=rng.uniform(1, 30)))
                # About 40-70 W a device: what the CPU fallback of the energy meter reports here.
                attempt = Attempt.objects.create(run=run, number=1, status=_attempt_status(status), started_at=start,
                                                 ended_at=start + runtime, reason=HISTORY_REASONS[status],
                                                 exit_code=1 if status == RunStatus.FAILED else None,
                                                 energy_j=devices * runtime.total_seconds() * rng.uniform(40, 70))
                Assignment.objects.create(attempt=attempt, node=node, node_rank=0, devices=list(range(devices)),
                                          state=AssignmentState.EXITED, started_at=start)
                attempts.append(attempt.pk)
                runs.append(run)
                made += 1
        runs_seeded_record(runs=runs)
    for attempt_id in attempts:
        attempt_accrue(attempt_id=attempt_id, now=now)
    stdout.write(f"Billing: {made} finished demo runs over the last {HISTORY_DAYS} days, priced in the ledger.")
    return made


def _attempt_status(status: str) -> str:
    ends: dict[str, str] = {RunStatus.SUCCEEDED: AttemptStatus.SUCCEEDED, RunStatus.FAILED: AttemptStatus.FAILED}
    return ends.get(status, AttemptStatus.CANCELLED)


def _history_params(template: JobTemplate) -> dict[str, Any]:
    """The template's defaults, but as many steps as it allows: these stand for GPU runs of half
    an hour and more, and the runtime predictor scales their pace to a new run's steps. At the
    default steps they would tell it that a run of seconds takes an hour."""
    properties = (template.param_schema or {}).get("properties", {})
    steps = properties.get(template.total_steps_param) if template.total_steps_param else None
    most = {template.total_steps_param: steps["maximum"]} if isinstance(steps, dict) and isinstance(steps.get("maximum"), int) else {}
    return params_resolve(schema=template.param_schema or {}, params=most)
