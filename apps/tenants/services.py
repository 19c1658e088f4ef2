"""Writes to teams, projects and memberships. Each one leaves an AuditEvent."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.db import transaction

from apps.audit.services import audit_record, snapshot
from apps.tenants.models import Membership, Project, Role, Team

TEAM_FIELDS = ["slug", "name"]
PROJECT_FIELDS = ["team", "slug", "name", "description"]
MEMBERSHIP_FIELDS = ["team", "user", "role"]


@transaction.atomic
def team_create(*, slug: str, name: str) -> Team:
    team = Team(slug=slug, name=name)
    team.full_clean()
    team.save()
    audit_record(action="team.create", target=team, team_id=team.pk, after=snapshot(team, TEAM_FIELDS))
    return team


@transaction.atomic
def team_update(*, team: Team, **changes: Any) -> Team:
    before = snapshot(team, TEAM_FIELDS)
    for key, value in changes.items():
        setattr(team, key, value)
    team.full_clean()
    team.save()
    audit_record(action="team.update", target=team, team_id=team.pk, before=before, after=snapshot(team, TEAM_FIELDS))
    return team


@transaction.atomic
def team_delete(*, team: Team) -> None:
    # Record what is stored, not what a possibly stale instance says.
    team = Team.objects.select_for_update().get(pk=team.pk)
    before = snapshot(team, TEAM_FIELDS)
    pk = team.pk
    audit_record(action="team.delete", target=team, team_id=pk, before=before)
    team.delete()


@transaction.atomic
def project_create(*, team: Team, slug: str, name: str, description: str = "") -> Project:
    project = Project(team=team, slug=slug, name=name, description=description)
    project.full_clean()
    project.save()
    audit_record(action="project.create", target=project, team_id=team.pk, after=snapshot(project, PROJECT_FIELDS))
    return project


@transaction.atomic
def project_update(*, project: Project, **changes: Any) -> Project:
    before = snapshot(project, PROJECT_FIELDS)
    for key, value in changes.items():
        setattr(project, key, value)
    project.full_clean()
    project.save()
    audit_record(
        action="project.update", target=project, team_id=project.team_id, before=before, after=snapshot(project, PROJECT_FIELDS)
    )
    return project


@transaction.atomic
def project_delete(*, project: Project) -> None:
    project = Project.objects.select_for_update().select_related("team").get(pk=project.pk)  # see team_delete
    audit_record(action="project.delete", target=project, team_id=project.team_id, before=snapshot(project, PROJECT_FIELDS))
    project.delete()


@transaction.atomic
def membership_set(*, team: Team, user: User, role: str = Role.ENGINEER) -> Membership:
    """Adds the user to the team, or changes their role; idempotent."""
    Role(role)  # raises ValueError on an unknown role
    existing = Membership.objects.select_for_update().filter(team=team, user=user).first()
    if existing is None:
        membership = Membership.objects.create(team=team, user=user, role=role)
        audit_record(action="membership.create", target=membership, team_id=team.pk, after=snapshot(membership, MEMBERSHIP_FIELDS))
        return membership
    if existing.role != role:
        before = snapshot(existing, MEMBERSHIP_FIELDS)
        existing.role = role
        existing.save(update_fields=["role"])
        audit_record(
            action="membership.update", target=existing, team_id=team.pk, before=before, after=snapshot(existing, MEMBERSHIP_FIELDS)
        )
    return existing


@transaction.atomic
def membership_delete(*, membership: Membership) -> None:
    membership = Membership.objects.select_for_update().get(pk=membership.pk)  # see team_delete
    audit_record(
        action="membership.delete", target=membership, team_id=membership.team_id, before=snapshot(membership, MEMBERSHIP_FIELDS)
    )
    membership.delete()
