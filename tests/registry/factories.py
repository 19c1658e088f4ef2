"""Runs for registry tests, made directly (no training): a train run with checkpoints, an evaluate
run of a checkpoint with final metrics (through tracking's own store, so summaries are real),
and ledger entries for a run's spend."""

from __future__ import annotations

import hashlib
from datetime import timedelta
from decimal import Decimal

from django.utils import timezone

from apps.artifacts.models import Artifact
from apps.billing.models import UsageEntry
from apps.jobtemplates.models import JobTemplate, TemplateKind
from apps.nodes.models import NodePool
from apps.runs.models import Attempt, Checkpoint, Run, RunStatus
from apps.tenants.models import Project
from apps.tracking.services import metric_points_store


def _template(kind: str) -> JobTemplate:
    slug = f"registry-{kind}"
    return JobTemplate.objects.get_or_create(slug=slug, version=1, defaults={"title": slug.title(), "kind": kind,
                                                                           "entrypoint": "python -c pass"})[0]


def _pool() -> NodePool:
    return NodePool.objects.get_or_create(name="local", defaults={"price_per_device_hour": Decimal("2.0")})[0]


def _run(project: Project, kind: str, *, status: str = RunStatus.SUCCEEDED, **fields: object) -> tuple[Run, Attempt]:
    end = timezone.now()
    run = Run.objects.create(project=project, template=_template(kind), pool=_pool(), entrypoint="python -c pass", status=status,
                             started_at=end - timedelta(minutes=10), finished_at=end, **fields)
    attempt = Attempt.objects.create(run=run, number=1, status="succeeded" if status == RunStatus.SUCCEEDED else "failed",
                                     started_at=run.started_at, ended_at=end)
    return run, attempt


def train_run(project: Project, *, family: str = "digits-mlp", name: str = "train", steps: tuple[int, ...] = (100, 200)
              ) -> tuple[Run, list[Checkpoint]]:
    run, attempt = _run(project, TemplateKind.TRAIN, family=family, name=name, params={"lr": 0.003},
                        tags={"family": family})
    ckpts = [Checkpoint.objects.create(run=run, attempt=attempt, step=s, file_name=f"step-{s}.pt", size=1024,
                                       sha256=hashlib.sha256(f"{run.pk}-{s}".encode()).hexdigest()) for s in steps]
    return run, ckpts


def evaluate_run(project: Project, checkpoint: Checkpoint | None, *, metrics: dict[str, float], status: str = RunStatus.SUCCEEDED,
                 name: str = "eval", tags: dict[str, str] | None = None) -> Run:
    run, _ = _run(project, TemplateKind.EVALUATE, status=status, init_checkpoint=checkpoint, name=name, tags=tags or {})
    # Two points per key: the summary's last value (the second) is what promotion reads.
    rows = [row for key, value in metrics.items() for row in ((key, 1, value / 2, 0, 1_700_000_001.0), (key, 2, value, 0, 1_700_000_002.0))]
    metric_points_store(run_id=run.pk, attempt=1, rows=rows)
    return run


def artifact(run: Run, name: str = "model/model.safetensors") -> Artifact:
    return Artifact.objects.create(run=run, name=name, size=2048, sha256=hashlib.sha256(name.encode()).hexdigest(),
                                   content_type="application/octet-stream", storage_key=f"artifacts/{run.pk}/{name}")


def spend(run: Run, cost: str) -> UsageEntry:
    attempt = run.attempts.order_by("number").first()
    assert attempt is not None
    now = timezone.now()
    return UsageEntry.objects.create(attempt=attempt, run=run, project=run.project, team=run.project.team, pool=run.pool,
                                     template=run.template, kind="close", period_start=now - timedelta(minutes=5), period_end=now,
                                     devices=1, cost=Decimal(cost))
