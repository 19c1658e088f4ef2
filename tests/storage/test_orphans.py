"""The orphan sweep (apps.runs.services.storage_orphans), against both stores: bytes of a direct
upload whose confirmation never came are deleted once past the grace; younger ones and every
object a checkpoint (stored or pending) or artifact row references stay; a dry run deletes
nothing; a second sweep finds nothing. Plus the beat entry and the management command."""

from __future__ import annotations

import hashlib
import io
import os
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.core.management import call_command
from django.utils import timezone

from apps.artifacts.models import Artifact
from apps.artifacts.services import artifact_key, artifact_upload_plan
from apps.audit.models import AuditEvent
from apps.core.storage import store
from apps.nodes.models import NodePool
from apps.runs.models import Attempt, Checkpoint, Run
from apps.runs.services.checkpoints import checkpoint_key, checkpoint_upload_plan
from apps.runs.services.storage_orphans import STORAGE_REFERENCES, orphan_grace_s, storage_orphans_sweep
from tests.agents.server import make_run
from tests.storage.test_backends import upload

DAY = timedelta(hours=24)


@pytest.fixture
def grace(settings: Any) -> None:
    settings.TRAINYARD_ORPHAN_GRACE_S = 24 * 3600
    settings.TRAINYARD_STORAGE_URL_TTL_S = 3600


def checkpoint(run: Run, attempt: Attempt, step: int, data: bytes, **fields: Any) -> Checkpoint:
    return Checkpoint.objects.create(run=run, attempt=attempt, step=step, file_name=f"ckpt-{step}.pt", size=len(data),
                                     sha256=hashlib.sha256(data).hexdigest(), **fields)


def put(key: str, data: bytes) -> str:
    store().put(key, io.BytesIO(data))
    return key


@pytest.fixture
def world(backend: str, cast: Any, grace: None) -> dict[str, Any]:
    """A run with: a stored checkpoint, a pending one whose upload arrived, an artifact; and the
    bytes of an artifact upload and of a retention-removed checkpoint that no row claims."""
    run = make_run(cast, NodePool.objects.create(name="local"))
    attempt = Attempt.objects.create(run=run, number=1)
    stored = checkpoint(run, attempt, 1, b"a" * 100)
    put(checkpoint_key(checkpoint=stored), b"a" * 100)
    Checkpoint.objects.filter(pk=stored.pk).update(stored_path=checkpoint_key(checkpoint=stored))
    pending = checkpoint(run, attempt, 2, b"b" * 200)
    plan = checkpoint_upload_plan(checkpoint=pending)  # the agent uploaded; its confirm never came
    assert plan is not None
    upload(plan, b"b" * 200)
    removed = checkpoint(run, attempt, 3, b"c" * 300, deleted_at=timezone.now())
    put(checkpoint_key(checkpoint=removed), b"c" * 300)
    art_key = put(artifact_key(run_id=run.pk, name="plots/loss.png"), b"png")
    Artifact.objects.create(run=run, name="plots/loss.png", size=3, sha256="0" * 64, storage_key=art_key)
    plan, _token = artifact_upload_plan(run=run, name="model.bin", size=400, sha256="d" * 64)
    upload(plan, b"d" * 400)  # the agent died before confirming
    kept = {checkpoint_key(checkpoint=stored), checkpoint_key(checkpoint=pending), art_key}
    orphans = {checkpoint_key(checkpoint=removed): 300, plan.key: 400}
    return {"run": run, "kept": kept, "orphans": orphans}


def keys() -> set[str]:
    return {o.key for prefix in ("checkpoints/", "artifacts/") for o in store().objects(prefix=prefix)}


def test_both_prefixes_are_registered() -> None:
    assert {"checkpoints/", "artifacts/"} <= set(STORAGE_REFERENCES)


def test_unconfirmed_uploads_past_the_grace_go_and_referenced_objects_stay(world: dict[str, Any]) -> None:
    everything = world["kept"] | set(world["orphans"])
    assert keys() == everything

    # Younger than the grace: nothing is touched, whatever references it.
    assert storage_orphans_sweep(delete=True).count == 0
    assert keys() == everything

    later = timezone.now() + DAY + timedelta(minutes=5)
    dry = storage_orphans_sweep(delete=False, now=later)
    assert {o.key: o.size for o in dry.orphans} == world["orphans"] and dry.bytes == 700
    assert all(o.age_s > DAY.total_seconds() for o in dry.orphans)
    assert keys() == everything  # a dry run deletes nothing
    assert not AuditEvent.objects.filter(action="storage.orphans_deleted").exists()

    swept = storage_orphans_sweep(delete=True, now=later)
    assert {o.key for o in swept.orphans} == set(world["orphans"]) and (swept.count, swept.bytes) == (2, 700)
    assert keys() == world["kept"]
    [event] = AuditEvent.objects.filter(action="storage.orphans_deleted")
    assert event.after["count"] == 2 and event.after["bytes"] == 700

    again = storage_orphans_sweep(delete=True, now=later)
    assert again.count == 0 and keys() == world["kept"]
    assert AuditEvent.objects.filter(action="storage.orphans_deleted").count() == 1


def test_grace_is_never_shorter_than_an_upload_may_be_confirmed(settings: Any) -> None:
    settings.TRAINYARD_ORPHAN_GRACE_S = 60
    settings.TRAINYARD_STORAGE_URL_TTL_S = 3600
    assert orphan_grace_s() == 7200
    assert orphan_grace_s(timedelta(hours=5)) == 5 * 3600
    settings.TRAINYARD_STORAGE_URL_TTL_S = 10
    assert orphan_grace_s() == 60


def test_local_ages_come_from_the_file_and_the_command_lists_then_deletes(local_media: Path, cast: Any, grace: None,
                                                                          capsys: Any) -> None:
    run = make_run(cast, NodePool.objects.create(name="local"))
    old = put(artifact_key(run_id=run.pk, name="old.bin"), b"x" * 10)
    young = put(artifact_key(run_id=run.pk, name="young.bin"), b"y" * 20)
    stale = time.time() - 30 * 3600
    os.utime(local_media / old, (stale, stale))

    call_command("storage_orphans")  # the default grace: 24 h
    out = capsys.readouterr().out
    assert old in out and young not in out and "1 orphaned objects, 10 bytes" in out and "dry run" in out
    assert keys() == {old, young}

    call_command("storage_orphans", "--delete", "--older-than", "25")
    out = capsys.readouterr().out
    assert old in out and "1 orphaned objects, 10 bytes" in out and "deleted" in out
    assert keys() == {young}

    call_command("storage_orphans", "--delete")
    assert "0 orphaned objects, 0 bytes" in capsys.readouterr().out


def test_local_listing_stays_in_the_folder(local_media: Path) -> None:
    put("checkpoints/1/a.pt", b"1")
    (local_media / "elsewhere.bin").write_bytes(b"2")
    assert {o.key for o in store().objects(prefix="checkpoints/")} == {"checkpoints/1/a.pt"}
    assert list(store().objects(prefix="../")) == []
    assert list(store().objects(prefix="missing/")) == []


def test_the_beat_runs_the_sweep_hourly() -> None:
    from apps.runs.tasks import storage_orphans_sweep_task

    entries = [e for e in django_settings.CELERY_BEAT_SCHEDULE.values() if e["task"] == "runs.storage_orphans_sweep"]
    assert entries and entries[0]["schedule"] == 3600.0
    assert storage_orphans_sweep_task.name == "runs.storage_orphans_sweep"


@pytest.fixture
def local_media(settings: Any, tmp_path: Path, db: Any) -> Path:
    settings.MEDIA_ROOT = tmp_path / "media"
    settings.TRAINYARD_STORAGE_BACKEND = "local"
    (tmp_path / "media").mkdir()
    return tmp_path / "media"
