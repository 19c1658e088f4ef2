"""Which object-store keys artifact rows point at, for the orphan sweep
(apps.runs.services.storage_orphans; registered in ArtifactsConfig.ready)."""

from __future__ import annotations

from apps.artifacts.models import Artifact


def artifact_keys_referenced(keys: list[str]) -> set[str]:
    # Each upload gets a fresh key (apps.artifacts.services.artifact_key), so bytes whose
    # confirmation never came have no row at all; a replaced file's old key goes on commit.
    return set(Artifact.objects.filter(storage_key__in=keys).values_list("storage_key", flat=True))
