"""Files a run keeps besides checkpoints (plots, tables, model files), with size, sha256 and type."""
from __future__ import annotations

from django.apps import AppConfig


class ArtifactsConfig(AppConfig):
    name = "apps.artifacts"
    label = "artifacts"

    def ready(self) -> None:
        from apps.artifacts import views
        from apps.runs.panels import RUN_PANELS

        if views.run_artifacts_panel not in RUN_PANELS:
            RUN_PANELS.append(views.run_artifacts_panel)

        # The orphan sweep looks under artifacts/ only because this names the keys in use.
        from apps.artifacts.references import artifact_keys_referenced
        from apps.runs.services.storage_orphans import storage_references_register

        storage_references_register(prefix="artifacts/", referenced=artifact_keys_referenced)
