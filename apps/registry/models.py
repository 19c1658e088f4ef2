"""Registered models of a project and their versions.

A version is a frozen pointer at what a run produced (a checkpoint or an artifact) plus a copy of that run's
lineage at registration. Its stage moves through services only; production needs evidence (an
evaluate run of the version meeting the model's thresholds), and at most one version of a model
is in production at a time.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models


class Stage(models.TextChoices):
    CANDIDATE = "candidate", "Candidate"
    STAGING = "staging", "Staging"
    PRODUCTION = "production", "Production"
    ARCHIVED = "archived", "Archived"


class RegisteredModel(models.Model):
    project = models.ForeignKey("tenants.Project", on_delete=models.PROTECT, related_name="registered_models")
    name = models.CharField(max_length=100)
    description = models.TextField(blank=True, default="")
    # What an evaluate run must reach before a version goes to production:
    # [{"metric": "val_accuracy", "op": ">=", "value": 0.9}, ...] (checked by services.thresholds_check).
    thresholds = models.JSONField(default=list, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["project_id", "name"]
        constraints = [models.UniqueConstraint(fields=["project", "name"], name="registry_model_unique_name")]

    def __str__(self) -> str:
        return self.name


class ModelVersion(models.Model):
    model = models.ForeignKey(RegisteredModel, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    description = models.TextField(blank=True, default="")
    source_run = models.ForeignKey("runs.Run", on_delete=models.PROTECT, related_name="+")
    # What the version is: a checkpoint of the source run, or one of its artifacts (a model file); exactly one.
    checkpoint = models.ForeignKey("runs.Checkpoint", null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    artifact = models.ForeignKey("artifacts.Artifact", null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    # The source run's lineage as it was at registration (a later change of the run does not move it).
    lineage = models.JSONField(default=dict, blank=True)
    stage = models.CharField(max_length=16, choices=Stage.choices, default=Stage.CANDIDATE, db_index=True)
    stage_changed_at = models.DateTimeField(null=True, blank=True)
    # The evaluate run that let it into production, and that run's figures for each threshold then.
    evidence_run = models.ForeignKey("runs.Run", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    evidence = models.JSONField(default=dict, blank=True)
    # The production version this one replaced when promoted: what a rollback from it restores.
    replaced = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["model_id", "-number"]
        constraints = [
            models.UniqueConstraint(fields=["model", "number"], name="registry_version_unique_number"),
            models.UniqueConstraint(fields=["model"], condition=models.Q(stage="production"), name="registry_one_production"),
            models.CheckConstraint(condition=models.Q(checkpoint__isnull=False, artifact__isnull=True)
                                   | models.Q(checkpoint__isnull=True, artifact__isnull=False), name="registry_version_one_source"),
        ]

    def __str__(self) -> str:
        return f"{self.model.name} v{self.number}"
