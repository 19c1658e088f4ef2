from __future__ import annotations

from django.apps import AppConfig


class ArtifactsConfig(AppConfig):
    name = "apps.artifacts"
    label = "artifacts"
