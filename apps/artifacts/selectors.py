"""Reads over run artifacts. Callers scope the run first (apps.runs.selectors.run_list)."""

from __future__ import annotations

from typing import IO

from django.db.models import QuerySet

from apps.artifacts.models import Artifact
from apps.core.errors import NotFound
from apps.core.storage import store
from apps.runs.models import Run


def artifact_list(*, run: Run, prefix: str = "") -> QuerySet[Artifact]:
    artifacts = Artifact.objects.filter(run=run)
    if prefix:
        artifacts = artifacts.filter(name__startswith=prefix)
    return artifacts.order_by("name")


def artifact_get(*, run: Run, name: str) -> Artifact:
    artifact = Artifact.objects.filter(run=run, name=name).first()
    if artifact is None:
        raise NotFound(f"run {run.pk} has no artifact {name[:200]!r}")
    return artifact


def artifact_open(*, artifact: Artifact) -> IO[bytes]:
    """The stored bytes (apps.core.storage.ObjectMissing if the store lost them)."""
    return store().get(artifact.storage_key)


# Shown in the page and served inline; every other type is a download (attachment).
INLINE_IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/svg+xml", "image/webp"})


def artifact_served_inline(*, artifact: Artifact) -> bool:
    return artifact.content_type.split(";", 1)[0].strip().lower() in INLINE_IMAGE_TYPES
