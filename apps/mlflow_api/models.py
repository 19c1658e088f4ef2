from __future__ import annotations

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
