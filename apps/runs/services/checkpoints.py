"""Checkpoint files in the object store (apps.core.storage): upload plans for agents, the check
of size and sha256 before a checkpoint counts as stored, download links, and removal.

A checkpoint is stored once `stored_path` (its key in the store) is set, and only after the
server itself read the object back and found the size and sha256 the agent reported. For a
direct upload that reading is a worker's (runs.checkpoint_verify), never a web request's: the
web checks only the size (a HEAD) and answers at once.
"""

from __future__ import annotations

import hashlib
import logging
from datetime import timedelta
from typing import IO, Any

from celery import signature
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from apps.core.errors import FieldError, NotFound
from apps.core.queueing import enqueue
from apps.core.storage import ObjectMissing, UploadPlan, object_digest, store
from apps.runs.models import Attempt, Checkpoint, Run

log = logging.getLogger(__name__)
# By name: apps.runs.tasks imports this module.
VERIFY_TASK = "runs.checkpoint_verify"


def checkpoint_key(*, checkpoint: Checkpoint) -> str:
    return f"checkpoints/{checkpoint.run_id}/{checkpoint.step:010d}-{checkpoint.sha256[:16]}-{checkpoint.file_name}"


def checkpoint_upload_plan(*, checkpoint: Checkpoint) -> UploadPlan | None:
    """Where the agent puts the file: None when it is stored already or retention removed it."""
    if checkpoint.stored_path or checkpoint.deleted_at is not None:
        return None
    return store().presigned_put(checkpoint_key(checkpoint=checkpoint), checkpoint.size)


def checkpoint_upload_complete(*, checkpoint: Checkpoint, upload_id: str, parts: list[tuple[int, str]]) -> bool:
    """The agent finished its upload: assemble the parts and check the size now (a missing or
    short object is a 400, and is deleted); the sha256 is a worker's to check. True once stored."""
    if checkpoint.stored_path:
        return True  # a replay of the same confirmation
    key = checkpoint_key(checkpoint=checkpoint)
    objects = store()
    objects.complete(key, upload_id, parts)
    size = objects.size(key)
    if size != checkpoint.size:
        objects.delete(key)
        raise FieldError("upload", f"expected {checkpoint.size} bytes in the store; found {size if size is not None else 'none'}")
    Checkpoint.objects.filter(pk=checkpoint.pk, stored_path="").update(uploaded_at=timezone.now())
    transaction.on_commit(lambda: enqueue(signature(VERIFY_TASK), args=[checkpoint.pk], what=f"checkpoint {checkpoint.pk} check"))
    return False


def checkpoint_verify(*, checkpoint_id: int) -> bool:
    """Read an uploaded checkpoint back: the reported size and sha256 make it stored; anything
    else deletes the object (the agent's copy may be uploaded again). Idempotent."""
    checkpoint = Checkpoint.objects.filter(pk=checkpoint_id, uploaded_at__isnull=False).first()
    if checkpoint is None or checkpoint.stored_path:
        return bool(checkpoint and checkpoint.stored_path)
    key = checkpoint_key(checkpoint=checkpoint)
    try:
        size, sha = object_digest(key=key, limit=checkpoint.size)
    except ObjectMissing:
        size, sha = 0, ""
    if size != checkpoint.size or sha != checkpoint.sha256:
        log.warning("checkpoint %d of run %d: the store holds %d bytes with sha256 %s, not the %d bytes with %s reported; "
                    "deleted", checkpoint.pk, checkpoint.run_id, size, sha or "-", checkpoint.size, checkpoint.sha256)
        store().delete(key)
        Checkpoint.objects.filter(pk=checkpoint.pk, stored_path="").update(uploaded_at=None)
        return False
    return _record(checkpoint=checkpoint, key=key)


def checkpoints_verify_pending(*, older_than: timedelta) -> int:
    """The beat's counterpart of the queued checks (a broker outage drops a message, never a check)."""
    due = Checkpoint.objects.filter(uploaded_at__lt=timezone.now() - older_than, stored_path="", deleted_at__isnull=True)
    return sum(checkpoint_verify(checkpoint_id=pk) for pk in due.values_list("pk", flat=True)[:100])


def checkpoint_store_stream(*, checkpoint: Checkpoint, stream: IO[bytes]) -> bool:
    """Protocol < 5: the agent sent the bytes to the web, which passes them on to the store."""
    if checkpoint.stored_path:
        return True
    key = checkpoint_key(checkpoint=checkpoint)
    reader = _HashingReader(stream, checkpoint.size)
    store().put(key, reader)  # type: ignore[arg-type]
    if reader.size != checkpoint.size or reader.digest.hexdigest() != checkpoint.sha256:
        store().delete(key)
        raise FieldError("body", f"expected {checkpoint.size} bytes with sha256 {checkpoint.sha256}; "
                                 f"got {reader.size} bytes with another digest")
    return _record(checkpoint=checkpoint, key=key)


def _record(*, checkpoint: Checkpoint, key: str) -> bool:
    Checkpoint.objects.filter(pk=checkpoint.pk).update(stored_path=key)
    # Retention may have removed the record meanwhile: then the object goes too.
    if Checkpoint.objects.filter(pk=checkpoint.pk, deleted_at__isnull=False).exists():
        checkpoint_file_delete(checkpoint=checkpoint, key=key)
        return False
    return True


def checkpoint_download_url(*, checkpoint: Checkpoint, filename: str = "") -> str:
    return store().presigned_get(checkpoint.stored_path, filename=filename)


def checkpoint_open(*, checkpoint: Checkpoint) -> IO[bytes]:
    """The stored bytes, for a client that cannot follow a store URL (agents of protocol < 5)."""
    if not checkpoint.stored_path:
        raise ObjectMissing(f"checkpoint {checkpoint.pk}")
    return store().get(checkpoint.stored_path)


def checkpoint_file_delete(*, checkpoint: Checkpoint, key: str = "") -> None:
    key = key or checkpoint.stored_path
    if key:
        store().delete(key)


def checkpoint_report(*, attempt: Attempt, sha256: str, step: int, file_name: str, size: int, metrics: dict[str, Any]) -> Checkpoint:
    """The record of a checkpoint an agent wrote for the attempt (a replayed report finds it again)."""
    ckpt, _ = Checkpoint.objects.get_or_create(
        run_id=attempt.run_id, sha256=sha256, step=step,
        defaults={"attempt": attempt, "file_name": file_name, "size": size, "metrics": metrics})
    return ckpt


def checkpoint_for_node(*, node_id: int, checkpoint_id: int) -> Checkpoint:
    """A checkpoint the node may read or write: of a run it held an attempt of, or the init
    checkpoint of one; any other is not found (NotFound), like one that does not exist."""
    ckpt = Checkpoint.objects.filter(pk=checkpoint_id).first()
    if ckpt is None:
        raise NotFound(f"checkpoint {checkpoint_id} not found")
    allowed = Attempt.objects.filter(assignments__node_id=node_id).filter(Q(run_id=ckpt.run_id) | Q(run__init_checkpoint=ckpt)).exists()
    if not allowed:
        raise NotFound(f"checkpoint {checkpoint_id} not found")
    return ckpt


def checkpoint_mark_deleted(*, attempt: Attempt, step: int, file_name: str) -> int:
    """Keep-last-K removed a checkpoint file on the node: mark its records deleted (they stay).

    The server's copy goes too, so retention bounds storage here as well, except while a run
    starts from it (a fine-tune or evaluation's init checkpoint), which still has to download it.
    """
    now = timezone.now()
    count = 0
    for ckpt in Checkpoint.objects.filter(run_id=attempt.run_id, step=step, file_name=file_name, deleted_at__isnull=True):
        if not Checkpoint.objects.filter(pk=ckpt.pk, deleted_at__isnull=True).update(deleted_at=now):
            continue  # a replay of the same report got there first
        count += 1
        if ckpt.stored_path and not Run.objects.filter(init_checkpoint=ckpt).exists():
            checkpoint_file_delete(checkpoint=ckpt)
    return count


class _HashingReader:
    """Reads a request body through, counting and hashing, and stops one byte past `limit`."""

    def __init__(self, stream: IO[bytes], limit: int) -> None:
        self.stream, self.limit = stream, limit
        self.size = 0
        self.digest = hashlib.sha256()

    def read(self, n: int = -1) -> bytes:
        left = self.limit + 1 - self.size
        if left <= 0:
            return b""
        chunk = self.stream.read(min(n if n > 0 else 1 << 20, left))
        self.size += len(chunk)
        self.digest.update(chunk)
        return chunk
