"""Reads scoped by membership. The scoped querysets here are what every view builds on."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AnonymousUser, User
from django.db.models import QuerySet

from apps.core.errors import FieldError
from apps.core.text import is_id
from apps.tenants.models import ROLE_RANK, Membership, Project, Role, Team

FINANCE_GROUP = "finance"

AnyUser = User | AnonymousUser


def user_is_finance(*, user: AnyUser) -> bool:
    if not user.is_authenticated:
        return False
    if getattr(user, "is_superuser", False):
        return True
    return user.groups.filter(name=FINANCE_GROUP).exists()


def team_ids_for_user(*, user: AnyUser) -> QuerySet[Any, int]:
    """Ids of the teams the user belongs to; a subquery, so it never loads rows."""
    if not user.is_authenticated:
        return Team.objects.none().values_list("pk", flat=True)
    if getattr(user, "is_superuser", False):
        return Team.objects.values_list("pk", flat=True)
    return Membership.objects.filter(user=user).values_list("team_id", flat=True)


def team_list(*, user: AnyUser) -> QuerySet[Team]:
    return Team.objects.filter(pk__in=team_ids_for_user(user=user))


def project_list(*, user: AnyUser) -> QuerySet[Project]:
    return Project.objects.filter(team_id__in=team_ids_for_user(user=user)).select_related("team")


def project_by_ref(*, user: AnyUser, ref: Any) -> Project | None:
    """One of the user's projects by id or 'team/slug'; None for anything else (another team's reads as absent)."""
    text = str(ref if ref is not None else "").strip()
    projects = project_list(user=user)
    if is_id(text):
        return projects.filter(pk=int(text)).first()
    if text.count("/") == 1:
        team, slug = text.split("/")
        return projects.filter(team__slug=team, slug=slug).first()
    return None


def project_ref_problem(ref: Any) -> str:
    """The error for a project reference that `project_by_ref` did not find, naming what was given."""
    given = str(ref if ref is not None else "").strip()
    return f"no such project {given!r} in your teams (give its id or team/project, e.g. vision/digits)"


def project_by_ref_or_error(*, user: AnyUser, ref: Any, field: str = "project") -> Project:
    """`project_by_ref`, or a 400 on `field` naming what was given."""
    project = project_by_ref(user=user, ref=ref)
    if project is None:
        raise FieldError(field, project_ref_problem(ref))
    return project


def role_for(*, user: AnyUser, team_id: int) -> str | None:
    if not user.is_authenticated:
        return None
    if getattr(user, "is_superuser", False):
        return Role.ADMIN
    return Membership.objects.filter(user=user, team_id=team_id).values_list("role", flat=True).first()


def has_role(*, user: AnyUser, team_id: int, at_least: str) -> bool:
    role = role_for(user=user, team_id=team_id)
    return role is not None and ROLE_RANK[Role(role)] >= ROLE_RANK[Role(at_least)]
