"""What runs report as metrics, stored so any chart reads a bounded number of rows.

MetricPoint holds one row per (run, key, step): a resumed attempt that re-logs a step replaces
the value, and a replayed batch changes nothing. Non-finite values keep their meaning in
``flag`` with ``value`` NULL, so no aggregate ever sees a fake number.

MetricRollup keeps min/max/sum/count per bucket of steps at a few bucket sizes (LEVELS), and
MetricSummary one row per (run, key). Both are recomputed from the level below for exactly the
buckets a batch touched, in the batch's transaction (apps.tracking.services), so they always
equal a recomputation from the raw points.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

# Bucket sizes, in steps, of rollup levels 0, 1, 2; each level is 16 buckets of the one below.
LEVELS: tuple[int, ...] = (64, 1024, 16384)
LEVEL_FANOUT = 16


class Flag(models.IntegerChoices):
    FINITE = 0, "finite"
    NAN = 1, "NaN"
    POS_INF = 2, "Infinity"
    NEG_INF = 3, "-Infinity"


class MetricPoint(models.Model):
    # The natural key is the primary key: a surrogate id would add a sequence call and a second
    # index entry to every inserted point, a third of the cost of ingesting it.
    pk = models.CompositePrimaryKey("run_id", "key", "step")
    # No database-level foreign key: its check runs once per inserted row at commit, which cost
    # as much as the insert itself. Points are written only for a fenced attempt of an existing
    # run, and deleting a run still deletes its points (Django's CASCADE).
    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="+", db_index=False, db_constraint=False)
    key = models.CharField(max_length=250)
    step = models.BigIntegerField()
    value = models.FloatField(null=True, blank=True, help_text="NULL when the value is not finite (see flag).")
    flag = models.SmallIntegerField(choices=Flag.choices, default=Flag.FINITE)
    wall_time = models.FloatField(help_text="Unix time the job logged the value.")
    attempt = models.PositiveIntegerField(help_text="Attempt number that logged it.")

    class Meta:
        db_table = "tracking_metricpoint"

    def __str__(self) -> str:
        return f"run {self.run_id} {self.key}@{self.step}"


class _Aggregate(models.Model):
    """Columns shared by a rollup bucket and a summary: aggregates over finite values, plus
    counts of each non-finite kind so a chart can still say a bucket held an infinity."""

    count = models.BigIntegerField(default=0)
    finite_count = models.BigIntegerField(default=0)
    sum = models.FloatField(default=0.0)
    min = models.FloatField(null=True, blank=True)
    max = models.FloatField(null=True, blank=True)
    nan_count = models.BigIntegerField(default=0)
    posinf_count = models.BigIntegerField(default=0)
    neginf_count = models.BigIntegerField(default=0)
    first_step = models.BigIntegerField(default=0)
    last_step = models.BigIntegerField(default=0)
    first_wall = models.FloatField(default=0.0)
    last_wall = models.FloatField(default=0.0)

    class Meta:
        abstract = True


class MetricRollup(_Aggregate):
    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="+", db_index=False)
    key = models.CharField(max_length=250)
    level = models.SmallIntegerField()
    bucket = models.BigIntegerField(help_text="step // LEVELS[level]")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "key", "level", "bucket"], name="metricrollup_unique_bucket")]

    def __str__(self) -> str:
        return f"run {self.run_id} {self.key} L{self.level}#{self.bucket}"


class MetricSummary(_Aggregate):
    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="+", db_index=False)
    key = models.CharField(max_length=250)
    first_value = models.FloatField(null=True, blank=True)
    first_flag = models.SmallIntegerField(default=Flag.FINITE)
    last_value = models.FloatField(null=True, blank=True)
    last_flag = models.SmallIntegerField(default=Flag.FINITE)
    # Wall time of the point at last_step (last_wall is the latest wall time seen).
    last_step_wall = models.FloatField(default=0.0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "key"], name="metricsummary_unique_key")]
        indexes = [models.Index(fields=["key", "run"])]

    def __str__(self) -> str:
        return f"run {self.run_id} {self.key} summary"


class PackageSet(models.Model):
    """One distinct list of installed distributions ("name==version", sorted), stored once and
    referenced by every attempt environment that had exactly it."""

    sha256 = models.CharField(max_length=64, unique=True, help_text="Of the sorted packages joined with newlines.")
    packages = models.JSONField(default=list)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{len(self.packages)} packages {self.sha256[:12]}"


class AttemptEnvironment(models.Model):
    """The environment one node ran an attempt in, as its agent captured it: written once, never
    changed (apps.tracking.services.attempt_environment_record refuses a different second report)."""

    attempt = models.ForeignKey("runs.Attempt", on_delete=models.CASCADE, related_name="environments")
    node_rank = models.PositiveIntegerField()
    hostname = models.CharField(max_length=253, help_text="The reporting node's name, as it registered.")
    environment = models.JSONField(default=dict)
    package_set = models.ForeignKey(PackageSet, on_delete=models.PROTECT, related_name="environments")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["attempt", "node_rank"], name="attemptenvironment_unique_rank")]

    def __str__(self) -> str:
        return f"{self.attempt} rank {self.node_rank} on {self.hostname}"


class SavedComparison(models.Model):
    """A named comparison in a project: its runs and the page's settings, for a link the team shares
    (/compare/v/<id>/). Settings left empty take the page's defaults."""

    project = models.ForeignKey("tenants.Project", on_delete=models.CASCADE, related_name="saved_comparisons")
    name = models.CharField(max_length=100)
    run_ids = models.JSONField(help_text="Run ids in the comparison's order.")
    keys = models.JSONField(default=list, blank=True, help_text="Chosen metric keys; empty for the page's default.")
    metric = models.CharField(max_length=250, blank=True, help_text="The parallel coordinates' final metric.")
    only_differences = models.BooleanField(null=True, blank=True, help_text="Unset: on above two runs.")
    x_axis = models.CharField(max_length=8, default="step")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["project", "name"], name="saved_comparison_name_unique")]
        ordering = ["name", "pk"]

    def __str__(self) -> str:
        return self.name
