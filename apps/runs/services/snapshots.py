"""Code snapshots for the custom template: content-addressed .tar.gz uploads, checked before
they are stored and again (by the agent, with the same sdk function) before they are unpacked."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import IO

from django.conf import settings
from django.contrib.auth.base_user import AbstractBaseUser
from django.db import IntegrityError, transaction
from trainyard.snapshot import MAX_UNPACKED_BYTES, SnapshotError, SnapshotSummary, snapshot_check, snapshot_unpack

from apps.audit.services import audit_record
from apps.core.errors import FieldError, Forbidden
from apps.core.storage import store
from apps.runs.models import CodeSnapshot
from apps.tenants.models import Project
from apps.tenants.selectors import AnyUser, has_role

DEFAULT_MAX_SNAPSHOT_BYTES = 20 * 1024 * 1024
GIT_COMMIT_RE = re.compile(r"^[0-9a-f]{7,64}$")


def snapshot_limits() -> tuple[int, int]:
    return (int(getattr(settings, "TRAINYARD_MAX_SNAPSHOT_BYTES", DEFAULT_MAX_SNAPSHOT_BYTES)),
            int(getattr(settings, "TRAINYARD_MAX_SNAPSHOT_UNPACKED_BYTES", MAX_UNPACKED_BYTES)))


def snapshot_key(*, snapshot: CodeSnapshot) -> str:
    """Its key in the object store (apps.core.storage): the same as its path under MEDIA_ROOT."""
    return snapshot.stored_path


def snapshot_open(*, snapshot: CodeSnapshot) -> IO[bytes]:
    """The stored archive; ObjectMissing when the store has none."""
    return store().get(snapshot_key(snapshot=snapshot))


def snapshot_download_url(*, snapshot: CodeSnapshot) -> str:
    return store().presigned_get(snapshot_key(snapshot=snapshot), filename=f"{snapshot.sha256}.tar.gz")


def snapshot_create(*, project: Project, user: AnyUser, fileobj: IO[bytes], size: int, git_commit: str = "") -> CodeSnapshot:
    """Checks and stores an upload; the same bytes uploaded again return the existing snapshot."""
    if not has_role(user=user, team_id=project.team_id, at_least="engineer"):
        raise Forbidden("Only engineers of the project's team may upload code.")
    max_bytes, max_unpacked = snapshot_limits()
    if size > max_bytes:
        raise FieldError("file", f"must be at most {max_bytes} bytes (got {size})")
    git_commit = (git_commit or "").strip().lower()
    if git_commit and not GIT_COMMIT_RE.match(git_commit):
        raise FieldError("git_commit", "must be a hex commit id of 7-64 characters")
    digest = hashlib.sha256()
    # Written to a temporary file first: the check reads it back, and a refused or partial
    # upload never reaches the store under its content address.
    with tempfile.NamedTemporaryFile(prefix="trainyard-snapshot-", delete=False) as tmp:
        written = 0
        for chunk in iter(lambda: fileobj.read(1 << 20), b""):
            written += len(chunk)
            if written > max_bytes:
                break
            digest.update(chunk)
            tmp.write(chunk)
    tmp_path = Path(tmp.name)
    try:
        if written > max_bytes:
            raise FieldError("file", f"must be at most {max_bytes} bytes (got more)")
        with tmp_path.open("rb") as fh:
            try:
                snapshot_check(fh, max_unpacked_bytes=max_unpacked)
            except SnapshotError as err:
                raise FieldError("file", str(err), code="unsafe_snapshot") from err
        sha = digest.hexdigest()
        relative = f"snapshots/{sha[:2]}/{sha}.tar.gz"
        objects = store()
        if objects.size(relative) != written:
            with tmp_path.open("rb") as fh:
                objects.put(relative, fh)
    finally:
        tmp_path.unlink(missing_ok=True)
    existing = CodeSnapshot.objects.filter(project=project, sha256=sha).first()
    if existing is not None:
        return existing
    try:
        with transaction.atomic():
            uploader = user if isinstance(user, AbstractBaseUser) else None
            snapshot = CodeSnapshot.objects.create(project=project, sha256=sha, size=written, git_commit=git_commit,
                                                   stored_path=str(relative), uploaded_by=uploader)
            audit_record(action="snapshot.upload", target=snapshot, team_id=project.team_id,
                         after={"sha256": sha, "size": written, "git_commit": git_commit})
    except IntegrityError:
        return CodeSnapshot.objects.get(project=project, sha256=sha)  # a concurrent identical upload won
    return snapshot


def snapshot_unpack_safely(*, snapshot: CodeSnapshot, dest: str | os.PathLike[str]) -> SnapshotSummary:
    """Unpacks a stored snapshot into ``dest`` after re-checking its hash and every member."""
    _, max_unpacked = snapshot_limits()
    try:
        with tempfile.NamedTemporaryFile(prefix="trainyard-snapshot-", suffix=".tar.gz") as local:
            with snapshot_open(snapshot=snapshot) as body:
                shutil.copyfileobj(body, local, 1 << 20)
            local.flush()
            return snapshot_unpack(local.name, dest, max_unpacked_bytes=max_unpacked, expected_sha256=snapshot.sha256)
    except SnapshotError as err:
        raise FieldError("code_snapshot", str(err), code="unsafe_snapshot") from err
