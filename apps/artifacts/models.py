"""Files a run keeps besides checkpoints (plots, tables, model files), named by a relative path."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class Artifact(models.Model):
    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="artifacts")
    name = models.CharField(max_length=500, help_text="Relative path inside the run, such as plots/loss.png.")
    size = models.PositiveBigIntegerField()
    sha256 = models.CharField(max_length=64)
    content_type = models.CharField(max_length=200, blank=True)
    # Its key in the object store (apps.core.storage). Each upload gets a fresh key, so a
    # replacement never overwrites the bytes a reader may be streaming.
    storage_key = models.CharField(max_length=700)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["run_id", "name"]
        constraints = [models.UniqueConstraint(fields=["run", "name"], name="artifact_unique_name_per_run")]

    def __str__(self) -> str:
        return f"artifact {self.name} of run {self.run_id}"
