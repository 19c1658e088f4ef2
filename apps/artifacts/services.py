"""Storing run artifacts: the name's rules, the size limit, and the sha256 and size computed while
the bytes stream into the object store (apps.core.storage)."""

from __future__ import annotations

import hashlib
import mimetypes
import re
import uuid
from typing import IO, Any

from django.conf import settings
from django.core import signing
from django.db import transaction

from apps.artifacts.models import Artifact
from apps.audit.services import audit_record
from apps.core.errors import FieldError, Forbidden
from apps.core.storage import CHUNK, ObjectMissing, UploadPlan, object_digest, store
from apps.runs.models import Run
from apps.tenants.selectors import has_role

NAME_MAX_CHARS = 500
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
TOKEN_SALT = "trainyard.artifacts.upload.v1"
CONTENT_TYPE_RE = re.compile(r"^[A-Za-z0-9!#$&^_.+-]{1,100}/[A-Za-z0-9!#$&^_.+-]{1,100}(;[ -~]{0,100})?$")
# Types the standard table may lack on a bare system.
_EXTRA_TYPES = {".webp": "image/webp", ".svg": "image/svg+xml", ".csv": "text/csv", ".json": "application/json",
                ".jsonl": "application/x-ndjson", ".md": "text/markdown", ".yaml": "application/yaml", ".yml": "application/yaml",
                ".pt": "application/octet-stream", ".safetensors": "application/octet-stream"}


def artifact_name_check(name: Any) -> str:
    """The name if it is a safe relative path inside the run; FieldError("name", rule) if not."""
    if not isinstance(name, str) or not name:
        raise FieldError("name", "must be a non-empty relative path such as plots/loss.png")
    if len(name) > NAME_MAX_CHARS:
        raise FieldError("name", f"must be at most {NAME_MAX_CHARS} characters (got {len(name)})")
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise FieldError("name", "must not contain control characters")
    if name.startswith("/"):
        raise FieldError("name", "must be a relative path (no leading /)")
    if "\\" in name:
        raise FieldError("name", "must separate folders with /, not \\")
    parts = name.split("/")
    if ".." in parts:
        raise FieldError("name", "must not contain '..'")
    if any(part in ("", ".") for part in parts):
        raise FieldError("name", "must not contain empty or '.' path segments (no //, no trailing /)")
    return name


def artifact_content_type(*, name: str, content_type: str = "") -> str:
    """The given type if it is a well-formed media type other than the generic one; else guessed from the name."""
    content_type = (content_type or "").strip()
    if content_type and content_type != "application/octet-stream":
        if not CONTENT_TYPE_RE.match(content_type):
            raise FieldError("content_type", "must be a media type such as image/png (at most 200 characters)")
        return content_type
    suffix = "." + name.rsplit(".", 1)[-1].lower() if "." in name.rsplit("/", 1)[-1] else ""
    guessed = _EXTRA_TYPES.get(suffix) or mimetypes.guess_type(name, strict=False)[0]
    return guessed or "application/octet-stream"


def artifact_max_bytes() -> int:
    return int(settings.TRAINYARD_ARTIFACT_MAX_BYTES)


def artifact_too_large(limit: int) -> FieldError:
    return FieldError("file", f"must be at most {limit} bytes ({_human(limit)}), the per-file artifact limit "
                              "(TRAINYARD_ARTIFACT_MAX_BYTES)", code="too_large")


def artifact_key(*, run_id: int, name: str) -> str:
    # A fresh folder per upload: a replacement never overwrites bytes being read, and the names
    # "a" and "a/b" can both exist in a store that is a real folder tree.
    return f"artifacts/{run_id}/{uuid.uuid4().hex}/{name}"


def artifact_write_check(*, run: Run, actor: Any = None) -> None:
    """Forbidden unless `actor` is an engineer of the run's team; actor None is the system."""
    if actor is not None and not has_role(user=actor, team_id=run.project.team_id, at_least="engineer"):
        raise Forbidden("Only engineers of the project's team may add artifacts to its runs.")


def artifact_store(*, run: Run, name: str, fileobj: IO[bytes], content_type: str = "", actor: Any = None) -> Artifact:
    """Store `fileobj` as the run's artifact `name`, replacing the file and metadata of one of the
    same name. A signed-in actor must be an engineer of the run's team (Forbidden otherwise);
    actor None is the system (an agent's upload, an import)."""
    name = artifact_name_check(name)
    content_type = artifact_content_type(name=name, content_type=content_type)
    user = actor if actor is not None and getattr(actor, "is_authenticated", False) else None
    artifact_write_check(run=run, actor=actor)
    limit = artifact_max_bytes()
    known = getattr(fileobj, "size", None)
    if isinstance(known, int) and known > limit:
        raise artifact_too_large(limit)

    key = artifact_key(run_id=run.pk, name=name)
    objects = store()
    reader = _HashingReader(fileobj, limit)
    objects.put(key, reader)  # type: ignore[arg-type]
    if reader.too_large:
        objects.delete(key)
        raise artifact_too_large(limit)
    try:
        return _artifact_save(run=run, name=name, key=key, size=reader.size, sha256=reader.digest.hexdigest(),
                              content_type=content_type, user=user, actor=actor)
    except BaseException:
        objects.delete(key)
        raise


def _artifact_save(*, run: Run, name: str, key: str, size: int, sha256: str, content_type: str, user: Any, actor: Any) -> Artifact:
    """Create or replace the row for bytes already under `key`; the replaced bytes go after commit."""
    values = {"size": size, "sha256": sha256, "content_type": content_type, "storage_key": key, "created_by": user}
    with transaction.atomic():
        artifact, created = Artifact.objects.select_for_update().get_or_create(run=run, name=name, defaults=values)
        if not created and artifact.storage_key == key:
            return artifact  # a replayed confirmation of the same upload
        old_key = "" if created else artifact.storage_key
        if not created:
            for field, value in values.items():
                setattr(artifact, field, value)
            artifact.save()
        audit_record(action="artifact.replaced" if old_key else "artifact.stored", target=artifact,
                     team_id=run.project.team_id, actor=actor, after={"run": run.pk, "name": name, "size": size, "sha256": sha256})
    if old_key:
        objects = store()
        transaction.on_commit(lambda: objects.delete(old_key))
    return artifact


# --- agents: the job's files go to the store directly (apps.core.storage upload plans) ----------
def _token_max_age() -> int:
    # A plan's URLs last TRAINYARD_STORAGE_URL_TTL_S; the confirmation may come a while after the last part.
    return int(settings.TRAINYARD_STORAGE_URL_TTL_S) * 2


def artifact_upload_plan(*, run: Run, name: str, size: int, sha256: str) -> tuple[UploadPlan, str]:
    """Where an agent puts a job's artifact, and the signed token that confirms it (artifact_upload_complete)."""
    name = artifact_name_check(name)
    limit = artifact_max_bytes()
    if size > limit:
        raise artifact_too_large(limit)
    if not SHA256_RE.match(sha256):
        raise FieldError("sha256", "must be 64 lowercase hex digits")
    key = artifact_key(run_id=run.pk, name=name)
    plan = store().presigned_put(key, size)
    token = signing.dumps({"r": run.pk, "k": key, "n": name, "s": size, "h": sha256, "u": plan.upload_id}, salt=TOKEN_SALT)
    return plan, token


def artifact_upload_complete(*, run: Run, token: str, parts: list[tuple[int, str]], content_type: str = "") -> Artifact:
    """The agent put the bytes by the plan: assemble them, read them back, and record the artifact
    if the size and sha256 are those reported (the object is deleted otherwise: a 400)."""
    try:
        data = signing.loads(token, salt=TOKEN_SALT, max_age=_token_max_age())
    except signing.BadSignature:
        raise FieldError("token", "is not a valid or current upload token for this run") from None
    if not isinstance(data, dict) or data.get("r") != run.pk:
        raise FieldError("token", "is not a valid or current upload token for this run")
    key, name, size, sha256 = str(data["k"]), str(data["n"]), int(data["s"]), str(data["h"])
    existing = Artifact.objects.filter(run=run, name=name, storage_key=key).first()
    if existing is not None:
        return existing  # a replay
    content_type = artifact_content_type(name=name, content_type=content_type)
    objects = store()
    objects.complete(key, str(data.get("u") or ""), parts)
    try:
        got_size, got_sha = object_digest(key=key, limit=size)
    except ObjectMissing:
        got_size, got_sha = -1, ""
    if got_size != size or got_sha != sha256:
        objects.delete(key)
        found = "nothing" if got_size < 0 else f"{got_size} bytes with sha256 {got_sha}"
        raise FieldError("upload", f"expected {size} bytes with sha256 {sha256} in the store; found {found}")
    try:
        return _artifact_save(run=run, name=name, key=key, size=size, sha256=sha256, content_type=content_type, user=None,
                              actor=None)
    except BaseException:
        objects.delete(key)
        raise


def artifact_delete(*, artifact: Artifact, actor: Any = None) -> None:
    key = artifact.storage_key
    with transaction.atomic():
        audit_record(action="artifact.deleted", target=artifact, team_id=artifact.run.project.team_id, actor=actor,
                     before={"run": artifact.run_id, "name": artifact.name, "sha256": artifact.sha256})
        artifact.delete()
    transaction.on_commit(lambda: store().delete(key))


def _human(size: int) -> str:
    value = float(size)
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:g} {unit}" if unit != "bytes" else f"{size} bytes"
        value /= 1024
    return f"{size} bytes"


class _HashingReader:
    """Reads a stream through, counting and hashing; past `limit` it stops and says so."""

    def __init__(self, stream: IO[bytes], limit: int) -> None:
        self.stream, self.limit = stream, limit
        self.size = 0
        self.too_large = False
        self.digest = hashlib.sha256()

    def read(self, n: int = -1) -> bytes:
        if self.too_large:
            return b""
        chunk = self.stream.read(n if n and n > 0 else CHUNK)
        self.size += len(chunk)
        if self.size > self.limit:
            self.too_large = True
            return b""
        self.digest.update(chunk)
        return chunk
