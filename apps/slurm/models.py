"""A Slurm-backed pool's settings, and the Slurm batch job that serves each run there.

A pool whose backend is `slurm` (apps.nodes.NodePool.backend) has one SlurmPool row: how the
portal's worker reaches the cluster (`sbatch` and friends, locally or behind a command prefix
such as `ssh login-node`) and how runs map onto it (partition, accounts, QoS, devices).
"""

from __future__ import annotations

from django.db import models


class DeviceMode(models.TextChoices):
    GPU = "gpu", "GPUs (--gpus-per-node)"
    CPU = "cpu", "CPU slots (--cpus-per-task), for clusters or partitions without GPUs"


class SlurmPool(models.Model):
    pool = models.OneToOneField("nodes.NodePool", on_delete=models.CASCADE, related_name="slurm")
    partition = models.CharField(max_length=100)
    # Words before every Slurm command, e.g. ["ssh", "trainyard@login1"]; empty: run them here.
    submit_command = models.JSONField(default=list, blank=True)
    # Project ("team/project") -> Slurm account, and "*" for any other; no entry: no --account.
    accounts = models.JSONField(default=dict, blank=True)
    # Run priority (urgent, normal, low) -> Slurm QoS; no entry: no --qos.
    qos = models.JSONField(default=dict, blank=True)
    device_mode = models.CharField(max_length=8, choices=DeviceMode.choices, default=DeviceMode.GPU)
    # Where job folders go on the cluster (shared by its nodes); the portal URL as the nodes reach it.
    workdir = models.CharField(max_length=500, help_text="A folder every compute node sees (job files, spools).")
    server_url = models.CharField(max_length=500, help_text="The portal's URL as seen from the compute nodes.")
    python = models.CharField(max_length=500, blank=True, help_text="Python with Trainyard's agents/ and sdk/ on the nodes; "
                              "empty: the worker's own.")
    repo_root = models.CharField(max_length=500, blank=True, help_text="The Trainyard checkout on the nodes; empty: the worker's.")
    extra_sbatch = models.JSONField(default=list, blank=True, help_text="More sbatch options, e.g. [\"--constraint=a100\"].")
    # Held by the worker syncing the pool now (apps.slurm.services._sync_lease).
    sync_lease_until = models.DateTimeField(null=True, blank=True, editable=False)

    def __str__(self) -> str:
        return f"Slurm partition {self.partition} for pool {self.pool_id}"


class SlurmJob(models.Model):
    """One sbatch submission of a run. Slurm may start it more than once (requeue): each start
    is a new Attempt of the run; `attempt` is the current one."""

    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="slurm_jobs")
    job_id = models.CharField(max_length=32, blank=True, db_index=True)
    # The node row whose credential the batch job reports with (scoped to this run; revoked at the end).
    node = models.OneToOneField("nodes.Node", on_delete=models.PROTECT, related_name="slurm_job")
    attempt = models.ForeignKey("runs.Attempt", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    state = models.CharField(max_length=32, blank=True)
    reason = models.CharField(max_length=200, blank=True)
    restarts = models.PositiveIntegerField(default=0)
    exit_code = models.IntegerField(null=True, blank=True)
    submitted_at = models.DateTimeField(auto_now_add=True)
    # When Slurm last showed the job ended, while the attempt waited for the job's own exit report.
    ended_seen_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True, db_index=True)

    class Meta:
        ordering = ["pk"]

    def __str__(self) -> str:
        return f"Slurm job {self.job_id or '(unsubmitted)'} of run {self.run_id}"
