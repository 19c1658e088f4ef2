"""Per-project secrets. Only the encrypted value is stored; the plaintext never touches a row,
an audit record or a log line (see apps.vault.services)."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class Secret(models.Model):
    project = models.ForeignKey("tenants.Project", on_delete=models.CASCADE, related_name="secrets")
    name = models.CharField(max_length=64, help_text="Environment variable name the job sees.")
    ciphertext = models.TextField(help_text="Fernet token (apps.vault.crypto); never the value.")
    key_id = models.CharField(max_length=12, help_text="Fingerprint of the key that encrypted it.")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    updated_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")

    class Meta:
        ordering = ["project_id", "name"]
        constraints = [models.UniqueConstraint(fields=["project", "name"], name="secret_unique_name_per_project")]

    def __str__(self) -> str:
        # Used as the audit record's object_repr: the name only, never the value.
        return f"secret {self.name} of project {self.project_id}"
