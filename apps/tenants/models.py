from __future__ import annotations

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models

slug_validator = RegexValidator(r"^[a-z0-9][a-z0-9-]{0,62}$", "Use 1-63 lowercase letters, digits and dashes.")


class Role(models.TextChoices):
    VIEWER = "viewer", "Viewer"
    ENGINEER = "engineer", "Engineer"
    ADMIN = "admin", "Team admin"


ROLE_RANK = {Role.VIEWER: 0, Role.ENGINEER: 1, Role.ADMIN: 2}


class Team(models.Model):
    """A tenant: every object users see belongs to exactly one team, through its project."""

    slug = models.CharField(max_length=63, unique=True, validators=[slug_validator])
    name = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug


class Project(models.Model):
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="projects")
    slug = models.CharField(max_length=63, validators=[slug_validator])
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["team__slug", "slug"]
        constraints = [models.UniqueConstraint(fields=["team", "slug"], name="project_unique_slug_per_team")]

    def __str__(self) -> str:
        return f"{self.team.slug}/{self.slug}"

    @property
    def full_slug(self) -> str:
        return f"{self.team.slug}/{self.slug}"


class Membership(models.Model):
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.ENGINEER)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["team__slug", "user__username"]
        constraints = [models.UniqueConstraint(fields=["team", "user"], name="membership_unique_user_per_team")]

    def __str__(self) -> str:
        return f"{self.user} in {self.team} as {self.role}"
