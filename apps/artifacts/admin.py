from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from apps.artifacts.models import Artifact


@admin.register(Artifact)
class ArtifactAdmin(admin.ModelAdmin):
    """Read-only: artifacts are stored through apps.artifacts.services (hashed, audited)."""

    list_display = ["id", "run", "name", "size", "content_type", "created_at", "updated_at"]
    search_fields = ["=run__id", "name", "sha256"]
    list_select_related = ["run"]
    raw_id_fields = ["run", "created_by"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
