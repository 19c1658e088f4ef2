"""Runs and their placements.

Run states: queued -> scheduled -> running -> succeeded | failed | cancelled;
running -> preempted -> queued (resumes from its latest checkpoint);
running -> lost -> queued (node silent past the timeout; up to max restarts, then failed).
Each placement of a run is an Attempt; its per-node share is an Assignment. The attempt's
``number`` doubles as the fencing token: only the run's current attempt may report.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models


class RunStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    SCHEDULED = "scheduled", "Scheduled"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"
    PREEMPTED = "preempted", "Preempted"
    LOST = "lost", "Lost"


FINISHED_STATUSES = {RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED}
ACTIVE_STATUSES = {RunStatus.SCHEDULED, RunStatus.RUNNING}


class Priority(models.TextChoices):
    URGENT = "urgent", "Urgent"
    NORMAL = "normal", "Normal"
    LOW = "low", "Low / ad hoc"


class Run(models.Model):
    project = models.ForeignKey("tenants.Project", on_delete=models.PROTECT, related_name="runs")
    template = models.ForeignKey("jobtemplates.JobTemplate", on_delete=models.PROTECT, related_name="runs")
    submitted_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    name = models.CharField(max_length=200, blank=True)
    notes = models.TextField(blank=True, default="", help_text="Free text from the submitter (at most 2,000 characters).")
    params = models.JSONField(default=dict)
    tags = models.JSONField(default=dict)
    family = models.CharField(max_length=200, blank=True, db_index=True)
    priority = models.CharField(max_length=8, choices=Priority.choices, default=Priority.NORMAL)
    preemptible = models.BooleanField(default=True)

    pool = models.ForeignKey("nodes.NodePool", on_delete=models.PROTECT, related_name="runs")
    # Acceptable pools (names) of a run that may use several, `pool` among them: each scheduling
    # pass moves a queued one to the pool where it is predicted to finish first
    # (apps.scheduling.pools), saying why in `pool_reason`. Empty: `pool` only.
    pools = models.JSONField(default=list, blank=True)
    pool_reason = models.TextField(blank=True, default="")
    nodes = models.PositiveIntegerField(default=1)
    devices_per_node = models.PositiveIntegerField(default=1)
    # Memory and CPU cores the job asks per device: scheduled as the node's capacity and enforced
    # by the agent's cgroup; 0: none asked (the agent's own per-device default applies).
    memory_bytes_per_device = models.PositiveBigIntegerField(default=0)
    cpus_per_device = models.FloatField(default=0.0)
    max_runtime_s = models.PositiveIntegerField(default=3600)
    grace_period_s = models.PositiveIntegerField(default=30)
    max_restarts = models.PositiveIntegerField(default=3)
    restarts = models.PositiveIntegerField(default=0)
    # After an infrastructure failure: not placed again before retry_at (backoff), nor on the
    # nodes suspected of causing it (Node ids).
    retry_at = models.DateTimeField(null=True, blank=True)
    avoid_nodes = models.JSONField(default=list, blank=True)
    entrypoint = models.CharField(max_length=500)
    checkpoint_policy = models.JSONField(default=dict)
    # Names (never values) of project secrets (apps.vault) the job gets in its environment.
    secrets = models.JSONField(default=list, blank=True)
    # Logged by an outside client (the MLflow API, apps.mlflow_api): never queued, placed, billed
    # or swept; only its metrics, params, tags and artifacts are Trainyard's.
    tracked_only = models.BooleanField(default=False)

    status = models.CharField(max_length=16, choices=RunStatus.choices, default=RunStatus.QUEUED, db_index=True)
    reason_code = models.CharField(max_length=32, blank=True, help_text="Why the run is in its status: quota, budget, ...")
    status_reason = models.TextField(blank=True)
    cancel_requested_at = models.DateTimeField(null=True, blank=True)

    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="children")
    init_checkpoint = models.ForeignKey(
        "runs.Checkpoint", null=True, blank=True, on_delete=models.PROTECT, related_name="+", help_text="Fine-tune / evaluate source."
    )
    code_snapshot = models.ForeignKey("runs.CodeSnapshot", null=True, blank=True, on_delete=models.PROTECT, related_name="runs")

    total_steps = models.PositiveBigIntegerField(null=True, blank=True)
    steps_done = models.PositiveBigIntegerField(default=0)
    progress_at = models.DateTimeField(null=True, blank=True)
    # The current attempt's first progress report (when, at which step): its rate is measured
    # from there, so start-up (interpreter, framework, data) does not read as slow training.
    progress_from_at = models.DateTimeField(null=True, blank=True)
    progress_from_step = models.PositiveBigIntegerField(null=True, blank=True)
    energy_j = models.FloatField(default=0.0)
    energy_estimated = models.BooleanField(default=False)

    estimated_start = models.DateTimeField(null=True, blank=True)
    estimated_start_low = models.DateTimeField(null=True, blank=True)
    estimated_start_high = models.DateTimeField(null=True, blank=True)
    queue_position = models.PositiveIntegerField(null=True, blank=True)
    # The run's virtual deadline in its pool's line (apps.scheduling.policies.virtual_deadline),
    # fixed by the first scheduling pass that sees it queued and kept across requeues, so its
    # place in line never moves back when predictions or fair share change.
    queue_deadline = models.DateTimeField(null=True, blank=True)

    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    queued_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["project", "status"]), models.Index(fields=["pool", "status", "queued_at"])]

    def __str__(self) -> str:
        return f"run {self.pk} ({self.template.slug})"

    @property
    def is_finished(self) -> bool:
        return self.status in FINISHED_STATUSES

    @property
    def progress(self) -> float | None:
        if not self.total_steps:
            return None
        return min(1.0, self.steps_done / self.total_steps)


class AttemptStatus(models.TextChoices):
    STARTING = "starting", "Starting"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"
    PREEMPTED = "preempted", "Preempted"
    LOST = "lost", "Lost"
    ABORTED = "aborted", "Aborted"


ATTEMPT_ENDED = {
    AttemptStatus.SUCCEEDED,
    AttemptStatus.FAILED,
    AttemptStatus.CANCELLED,
    AttemptStatus.PREEMPTED,
    AttemptStatus.LOST,
    AttemptStatus.ABORTED,
}


class StopKind(models.TextChoices):
    CANCEL = "cancel", "Cancel"
    PREEMPT = "preempt", "Preempt"
    DRAIN = "drain", "Drain"
    ABORT = "abort", "Abort"


class Attempt(models.Model):
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="attempts")
    number = models.PositiveIntegerField()
    status = models.CharField(max_length=16, choices=AttemptStatus.choices, default=AttemptStatus.STARTING)
    reason = models.TextField(blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    signal = models.IntegerField(null=True, blank=True)
    master_addr = models.CharField(max_length=253, blank=True)
    master_port = models.PositiveIntegerField(null=True, blank=True)
    # When rank 0's agent reported the port it bound (master_port): other nodes wait for it.
    rendezvous_at = models.DateTimeField(null=True, blank=True)
    # Set when the server wants the attempt stopped; agents see it on heartbeat and SIGTERM it.
    stop_kind = models.CharField(max_length=16, choices=StopKind.choices, blank=True)
    stop_requested_at = models.DateTimeField(null=True, blank=True)
    # A preempted attempt: the waiting run it stops for, which has first claim on its devices.
    stopping_for = models.ForeignKey(Run, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    lineage = models.JSONField(default=dict, blank=True)
    energy_j = models.FloatField(default=0.0)
    resumed_from_step = models.PositiveBigIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["run_id", "number"]
        constraints = [models.UniqueConstraint(fields=["run", "number"], name="attempt_unique_number")]

    def __str__(self) -> str:
        return f"run {self.run_id} attempt {self.number}"


class AssignmentState(models.TextChoices):
    PENDING = "pending", "Pending"
    CLAIMED = "claimed", "Claimed"
    STARTED = "started", "Started"
    EXITED = "exited", "Exited"
    FAILED_TO_START = "failed_to_start", "Failed to start"
    ABORTED = "aborted", "Aborted"


ASSIGNMENT_HOLDS_DEVICES = {AssignmentState.PENDING, AssignmentState.CLAIMED, AssignmentState.STARTED}


class Assignment(models.Model):
    """One node's share of an attempt: which devices, which ranks."""

    attempt = models.ForeignKey(Attempt, on_delete=models.CASCADE, related_name="assignments")
    node = models.ForeignKey("nodes.Node", on_delete=models.PROTECT, related_name="assignments")
    node_rank = models.PositiveIntegerField(default=0)
    devices = models.JSONField(default=list, help_text="Device indexes on the node.")
    state = models.CharField(max_length=16, choices=AssignmentState.choices, default=AssignmentState.PENDING, db_index=True)
    exit_code = models.IntegerField(null=True, blank=True)
    signal = models.IntegerField(null=True, blank=True)
    # Each process's exit on the node ({rank, local_rank, exit_code, signal, seconds}), and how
    # the node's share failed, if it did (apps.runs.services.failures): the gang's outcome is
    # decided from these once every node has reported.
    ranks = models.JSONField(default=list, blank=True)
    failure_code = models.CharField(max_length=32, blank=True)
    failure = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    claimed_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["attempt_id", "node_rank"]
        constraints = [models.UniqueConstraint(fields=["attempt", "node_rank"], name="assignment_unique_rank")]

    def __str__(self) -> str:
        return f"{self.attempt} on {self.node_id} rank {self.node_rank}"


class Checkpoint(models.Model):
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="checkpoints")
    attempt = models.ForeignKey(Attempt, on_delete=models.CASCADE, related_name="checkpoints")
    step = models.PositiveBigIntegerField()
    file_name = models.CharField(max_length=255)
    size = models.PositiveBigIntegerField()
    sha256 = models.CharField(max_length=64)
    metrics = models.JSONField(default=dict, blank=True)
    # Its key in the object store (apps.core.storage; a path under MEDIA_ROOT for the local store):
    # empty until the upload arrived and the server checked its size and sha256.
    stored_path = models.CharField(max_length=500, blank=True)
    uploaded_at = models.DateTimeField(
        null=True, blank=True, help_text="The agent's direct upload arrived; a worker checks it before it counts as stored.")
    created_at = models.DateTimeField(auto_now_add=True)
    deleted_at = models.DateTimeField(null=True, blank=True, help_text="Removed by retention; the record stays.")

    class Meta:
        ordering = ["run_id", "step"]
        constraints = [models.UniqueConstraint(fields=["run", "sha256", "step"], name="checkpoint_unique_per_run")]

    def __str__(self) -> str:
        return f"run {self.run_id} checkpoint @ {self.step}"


class LogChunk(models.Model):
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="log_chunks")
    attempt = models.ForeignKey(Attempt, on_delete=models.CASCADE, related_name="log_chunks")
    rank = models.PositiveIntegerField(default=0)
    seq = models.PositiveIntegerField(help_text="Per attempt and rank; makes replays idempotent.")
    stream = models.CharField(max_length=8, default="stdout")
    text = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run_id", "attempt_id", "rank", "seq"]
        constraints = [models.UniqueConstraint(fields=["attempt", "rank", "seq"], name="logchunk_unique_seq")]

    def __str__(self) -> str:
        return f"run {self.run_id} attempt {self.attempt_id} rank {self.rank} chunk {self.seq}"


class EnergySample(models.Model):
    attempt = models.ForeignKey(Attempt, on_delete=models.CASCADE, related_name="energy_samples")
    node = models.ForeignKey("nodes.Node", on_delete=models.CASCADE, related_name="+")
    device_index = models.IntegerField(help_text="-1 for the whole node (RAPL / estimate).")
    at = models.DateTimeField()
    power_w = models.FloatField(null=True, blank=True)
    energy_j = models.FloatField(help_text="Energy used by this attempt on this device so far.")
    utilization = models.FloatField(null=True, blank=True)
    estimated = models.BooleanField(default=False)

    class Meta:
        ordering = ["attempt_id", "at"]
        constraints = [models.UniqueConstraint(fields=["attempt", "node", "device_index", "at"], name="energy_unique_sample")]

    def __str__(self) -> str:
        return f"attempt {self.attempt_id} device {self.device_index} @ {self.at:%H:%M:%S}: {self.energy_j:.0f} J"


class CodeSnapshot(models.Model):
    """A content-addressed tarball of user code for the custom template."""

    project = models.ForeignKey("tenants.Project", on_delete=models.CASCADE, related_name="code_snapshots")
    sha256 = models.CharField(max_length=64)
    size = models.PositiveBigIntegerField()
    git_commit = models.CharField(max_length=64, blank=True)
    stored_path = models.CharField(max_length=500)
    uploaded_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["project", "sha256"], name="snapshot_unique_per_project")]

    def __str__(self) -> str:
        return f"snapshot {self.sha256[:12]} ({self.size} bytes)"
