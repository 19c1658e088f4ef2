from __future__ import annotations

from django.conf import settings
from django.db import models


class SupersededPoint(models.Model):
    """A metric value an MLflow client logged at a step that holds another value with a later
    timestamp. apps.tracking keeps one point per key and step (charts, summaries, compare); MLflow
    keeps every value, so the others live here and metrics/get-history returns both."""

    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=250)
    step = models.BigIntegerField()
    value = models.FloatField(null=True, blank=True, help_text="NULL when the value is not finite (see flag).")
    flag = models.SmallIntegerField(default=0, help_text="apps.tracking.models.Flag: finite, NaN, +inf or -inf.")
    wall_time = models.FloatField(help_text="Unix time of the client's timestamp.")

    class Meta:
        indexes = [models.Index(fields=["run", "key", "step"], name="mlflow_superseded_run_key_step")]

    def __str__(self) -> str:
        return f"run {self.run_id} {self.key}@{self.step} ({self.wall_time})"


class DeletedRun(models.Model):
    """A run an MLflow client deleted (runs/delete): MLflow's soft delete, lifecycle_stage
    "deleted". The run itself stays (Trainyard has no run deletion: its ledger, metrics and audit
    point at it); runs/search leaves it out unless run_view_type asks, and runs/restore removes
    this row. Both are in the audit log."""

    run = models.OneToOneField("runs.Run", on_delete=models.CASCADE, primary_key=True, related_name="+")
    deleted_at = models.DateTimeField()
    deleted_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")

    def __str__(self) -> str:
        return f"run {self.run_id} deleted at {self.deleted_at:%Y-%m-%d %H:%M}"


class DatasetInput(models.Model):
    """A dataset an MLflow client logged as an input of a run (runs/log-inputs, ``mlflow.log_input``):
    MLflow's Dataset (name, digest, source type, source, schema, profile) with the input's tags
    (such as ``mlflow.data.context``). One per run, name and digest, as MLflow keeps it: logging the
    same dataset again changes nothing. runs/get returns them in ``inputs.dataset_inputs``."""

    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="+")
    name = models.CharField(max_length=500)
    digest = models.CharField(max_length=36)
    source_type = models.CharField(max_length=36)
    source = models.TextField()
    schema = models.TextField(blank=True, null=True)
    profile = models.TextField(blank=True, null=True)
    tags = models.JSONField(default=list, blank=True, help_text="The input's tags, [[key, value], ...] in the order logged.")
    logged_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "name", "digest"], name="mlflow_dataset_input_run_name_digest")]

    def __str__(self) -> str:
        return f"run {self.run_id} dataset {self.name} ({self.digest})"
