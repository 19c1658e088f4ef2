"""A run with every card of the run page filled, in amounts that grow with `scale`: attempts on
two nodes each with the job's lineage report and environment records (a few hundred packages),
kept and retention-deleted checkpoints, artifacts of every kind the artifacts card draws (images,
CSV and JSON tables, downloads), model versions registered from it, agent log notes, audit
history, energy samples and metric points. Used by the run page's query-count test and by
measuring the page in-process (apps/tracking/views.run_detail_page)."""

from __future__ import annotations

import io
import json
from datetime import timedelta
from typing import Any

from django.utils import timezone

from apps.artifacts.services import artifact_store
from apps.audit.services import audit_record
from apps.jobtemplates.models import JobTemplate
from apps.nodes.models import Node
from apps.registry import services as registry
from apps.runs.models import Assignment, Attempt, Checkpoint, EnergySample, LogChunk, Run, RunStatus
from apps.tracking.models import AttemptEnvironment, PackageSet
from apps.tracking.services import metric_points_store
from tests.runs.factories import local_pool

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64


def full_run(cast: Any, *, scale: int = 1, attempts: int = 2) -> Run:
    """A finished run of alice's vision/digits with every card of its page present."""
    pool = local_pool()
    template = JobTemplate.objects.get_or_create(slug="page-world", version=1, defaults={
        "title": "Page world", "kind": "train", "entrypoint": "python -c pass"})[0]
    nodes = [Node.objects.get_or_create(pool=pool, hostname=f"world-{i}", defaults={"agent_uid": f"world-{i}"})[0] for i in range(2)]
    end = timezone.now() - timedelta(minutes=5)
    start = end - timedelta(hours=1)
    run = Run.objects.create(project=cast.digits, template=template, pool=pool, entrypoint="python -c pass", name="page world",
                             status=RunStatus.SUCCEEDED, started_at=start, finished_at=end, nodes=2, devices_per_node=1,
                             total_steps=1000, steps_done=1000, params={"lr": 0.003, "hidden": 128}, tags={"family": "world"},
                             notes="Baseline with the wider layer.", energy_j=12345.0)
    audit_record(action="run.submit", target=run, team_id=cast.digits.team_id, actor=cast.alice)
    packages = [f"pkg-{i:04d}==1.{i}.0" for i in range(300)]
    for number in range(1, attempts + 1):
        attempt = Attempt.objects.create(run=run, number=number, status="succeeded" if number == attempts else "failed",
                                         started_at=start, ended_at=end, energy_j=1000.0,
                                         lineage={"dataset": f"digits-v{number}", "files": [f"shard-{i}" for i in range(20 * scale)],
                                                  "git": {"commit": "0" * 40, "dirty": False}})
        for rank, node in enumerate(nodes):
            Assignment.objects.create(attempt=attempt, node=node, node_rank=rank, devices=[0], state="exited", started_at=start,
                                      ended_at=end)
            pset = PackageSet.objects.get_or_create(sha256=f"{number:064x}", defaults={"packages": packages + [f"extra=={number}"]})[0]
            AttemptEnvironment.objects.create(attempt=attempt, node_rank=rank, hostname=node.hostname, package_set=pset, environment={
                "python": {"version": "3.12.3", "implementation": "CPython"}, "platform": "Linux-6.1-x86_64",
                "torch": {"version": "2.13.0", "cuda": "12.8", "cudnn": 91000}, "seed": 7,
                "devices": [{"kind": "cuda", "index": 0, "model": "H100", "uuid": f"GPU-{rank}"}]})
            EnergySample.objects.bulk_create([
                EnergySample(attempt=attempt, node=node, device_index=0, at=start + timedelta(seconds=10 * i), power_w=300.0,
                             energy_j=300.0 * 10 * (i + 1), utilization=0.9) for i in range(180 * scale)])
        LogChunk.objects.bulk_create([LogChunk(run=run, attempt=attempt, rank=0, seq=i, stream="agent" if i % 3 == 0 else "stdout",
                                               text=f"line {i}\n") for i in range(30 * scale)])
        audit_record(action="run.status", target=attempt, team_id=cast.digits.team_id, before={"status": "running"},
                     after={"status": attempt.status})
    last = run.attempts.order_by("-number").first()
    assert last is not None
    Checkpoint.objects.bulk_create([
        Checkpoint(run=run, attempt=last, step=step, file_name=f"step-{step}.pt", size=1 << 20, sha256=f"{step:064x}",
                   metrics={"loss": 1.0 / step, "accuracy": 0.9}, deleted_at=end if i < 20 * scale else None)
        for i, step in enumerate(range(10, 10 * (23 * scale + 1), 10))])
    for i in range(4 * scale):
        artifact_store(run=run, name=f"plots/p{i}.png", fileobj=io.BytesIO(PNG))
        artifact_store(run=run, name=f"tables/t{i}.csv", fileobj=io.BytesIO(b"step,loss\n" + b"".join(
            f"{s},{1 / (s + 1):.4f}\n".encode() for s in range(100))))
        artifact_store(run=run, name=f"tables/s{i}.json", fileobj=io.BytesIO(json.dumps({"accuracy": 0.93, "i": i}).encode()))
        artifact_store(run=run, name=f"model/w{i}.bin", fileobj=io.BytesIO(b"\x00" * 2048))
    model = registry.model_create(project=cast.digits, name=f"world-{run.pk}", user=cast.alice)
    for ckpt in run.checkpoints.filter(deleted_at__isnull=True).order_by("step")[:scale]:
        registry.version_create(model=model, user=cast.alice, checkpoint=ckpt.pk)
    metric_points_store(run_id=run.pk, attempt=attempts, rows=[
        (key, step, 1.0 / (step + 1), 0, 1_700_000_000.0 + step) for key in ("loss", "accuracy") for step in range(200 * scale)])
    return run
