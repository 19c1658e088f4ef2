"""Reads over run artifacts. Callers scope the run first (apps.runs.selectors.run_list)."""

from __future__ import annotations

from typing import IO

from django.core.cache import cache
from django.db.models import QuerySet

from apps.artifacts.models import Artifact
from apps.artifacts.previews import PREVIEW_BYTES, Table, csv_table, json_table
from apps.core.errors import NotFound
from apps.core.storage import ObjectMissing, store
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

# A store URL handed to a browser: long enough to follow the redirect (a download that has started
# goes on past it), short enough that a copied link soon stops working.
DOWNLOAD_URL_TTL_S = 300


def artifact_served_inline(*, artifact: Artifact) -> bool:
    return artifact.content_type.split(";", 1)[0].strip().lower() in INLINE_IMAGE_TYPES


def artifact_download_url(*, artifact: Artifact) -> str | None:
    """A short-lived URL the client fetches the bytes from, straight from the store; None when the
    store is the local folder (the web serves those bytes itself). The caller has scoped the run."""
    objects = store()
    if not objects.direct:
        return None
    # The web's sandboxing CSP does not travel with a store URL: an SVG (it may hold scripts) is
    # only ever an attachment there; an <img> shows it all the same.
    media = artifact.content_type.split(";", 1)[0].strip().lower()
    inline = artifact_served_inline(artifact=artifact) and media != "image/svg+xml"
    return objects.presigned_get(artifact.storage_key, filename=artifact.name.rsplit("/", 1)[-1],
                                 content_type=artifact.content_type or "application/octet-stream", inline=inline,
                                 expires_s=DOWNLOAD_URL_TTL_S)


def artifact_kind(*, artifact: Artifact) -> str:
    """How the run page shows it: "image", "csv", "json" or "file" (a download link)."""
    media = artifact.content_type.split(";", 1)[0].strip().lower()
    lower = artifact.name.lower()
    if media in INLINE_IMAGE_TYPES:
        return "image"
    if media in ("text/csv", "text/tab-separated-values") or lower.endswith((".csv", ".tsv")):
        return "csv"
    if media == "application/json" or lower.endswith(".json"):
        return "json"
    return "file"


# A stored artifact is never changed in place (a replacement has its own sha256), so its preview
# is kept: the run page showed up to PANEL_MAX_TABLES of them, each an object-store read, on every view.
PREVIEW_CACHE_S = 24 * 3600


def artifact_preview(*, artifact: Artifact) -> Table:
    """A table of a CSV or JSON artifact's head, within apps.artifacts.previews' limits."""
    key = f"artifact-preview:v1:{artifact.pk}:{artifact.sha256}:{artifact_kind(artifact=artifact)}"
    cached = cache.get(key)
    if isinstance(cached, Table):
        return cached
    try:
        body = artifact_open(artifact=artifact)
    except ObjectMissing:
        return Table(problem="missing from the store")
    try:
        data = body.read(PREVIEW_BYTES + 1)
    finally:
        body.close()
    truncated = len(data) > PREVIEW_BYTES
    data = data[:PREVIEW_BYTES]
    table = json_table(data, truncated=truncated) if artifact_kind(artifact=artifact) == "json" else csv_table(data, truncated=truncated)
    cache.set(key, table, PREVIEW_CACHE_S)
    return table
