"""Reads of the vault: names and dates only. Values are read solely by services.run_secret_values."""

from __future__ import annotations

from django.db.models import QuerySet

from apps.tenants.models import Project
from apps.tenants.selectors import AnyUser, has_role
from apps.vault.models import Secret


def secret_list(*, project: Project) -> QuerySet[Secret]:
    # .only(): the ciphertext is not even loaded where names are listed.
    return Secret.objects.filter(project=project).only("name", "created_at", "updated_at", "updated_by", "project").select_related(
        "updated_by").order_by("name")


def secret_names(*, project: Project) -> list[str]:
    """Names only: what the submit form offers a run to ask for."""
    return list(Secret.objects.filter(project=project).order_by("name").values_list("name", flat=True))


def secrets_can_edit(*, user: AnyUser, project: Project) -> bool:
    return has_role(user=user, team_id=project.team_id, at_least="admin")
