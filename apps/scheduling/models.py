"""What the scheduler remembers between passes: estimate history, pool utilization, pass bookkeeping.

The scheduling decisions themselves live on the runs (status, reason, queue position, estimated
start); these tables exist so users can judge the estimates (how far off they were) and see how
full and how fragmented each pool has been.
"""

from __future__ import annotations

from django.db import models


class EstimateKind(models.TextChoices):
    # The first estimate a run got after it (re-)entered the queue: what its user saw on submit.
    AT_SUBMISSION = "at_submission", "At submission"
    # A later pass's estimate, kept when it moved noticeably (or every few minutes).
    PASS = "pass", "Scheduling pass"


class QueueEstimate(models.Model):
    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="queue_estimates")
    recorded_at = models.DateTimeField(db_index=True)
    kind = models.CharField(max_length=16, choices=EstimateKind.choices)
    position = models.PositiveIntegerField(null=True, blank=True)
    reason_code = models.CharField(max_length=32, blank=True)
    estimated_start = models.DateTimeField(null=True, blank=True)
    estimated_start_low = models.DateTimeField(null=True, blank=True)
    estimated_start_high = models.DateTimeField(null=True, blank=True)
    # The replay's own estimate before the learned correction (`estimate.WaitCalibration`),
    # which later estimates learn from; null where no correction applied.
    raw_estimated_start = models.DateTimeField(null=True, blank=True)
    # Filled when the run is placed: the error is actual minus estimate (positive = later).
    actual_start = models.DateTimeField(null=True, blank=True, db_index=True)
    error_s = models.FloatField(null=True, blank=True)

    class Meta:
        ordering = ["run_id", "recorded_at", "id"]
        indexes = [models.Index(fields=["run", "recorded_at"]), models.Index(fields=["kind", "actual_start"])]

    def __str__(self) -> str:
        return f"run {self.run_id} estimate @ {self.recorded_at:%Y-%m-%d %H:%M:%S} ({self.kind})"


class UtilizationSample(models.Model):
    """Devices of one pool at one moment, after a scheduling pass placed what it could."""

    pool = models.ForeignKey("nodes.NodePool", on_delete=models.CASCADE, related_name="utilization_samples")
    at = models.DateTimeField(db_index=True)
    total_devices = models.PositiveIntegerField(default=0)
    used_devices = models.PositiveIntegerField(default=0)
    free_devices = models.PositiveIntegerField(default=0)
    # Free devices that no waiting job's shape can use (fragmentation).
    stranded_devices = models.PositiveIntegerField(default=0)
    largest_free_block = models.PositiveIntegerField(default=0)
    queued_runs = models.PositiveIntegerField(default=0)
    queued_devices = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["pool_id", "at"]
        indexes = [models.Index(fields=["pool", "at"])]

    def __str__(self) -> str:
        return f"{self.pool_id} @ {self.at:%Y-%m-%d %H:%M}: {self.used_devices}/{self.total_devices}"


class SchedulerState(models.Model):
    """One row (pk 1). Passes take its row lock to run one at a time on any number of workers,
    and `pass_started_at` lets a queued request skip itself when a later pass already saw it."""

    SINGLETON = 1

    lock_taken_at = models.DateTimeField(null=True, blank=True)
    pass_started_at = models.DateTimeField(null=True, blank=True)
    pass_finished_at = models.DateTimeField(null=True, blank=True)
    passes = models.PositiveBigIntegerField(default=0)
    last_placed = models.PositiveIntegerField(default=0)
    last_preempted = models.PositiveIntegerField(default=0)
    last_duration_ms = models.FloatField(default=0.0)
    last_apply_ms = models.FloatField(default=0.0)

    def __str__(self) -> str:
        return f"scheduler: {self.passes} passes"
