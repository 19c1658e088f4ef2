from __future__ import annotations

from typing import Any

from django.db import models


class TemplateKind(models.TextChoices):
    TRAIN = "train", "Train"
    FINETUNE = "fine-tune", "Fine-tune"
    DISTRIBUTED = "distributed", "Distributed"
    EVALUATE = "evaluate", "Evaluate"
    SWEEP = "sweep", "Sweep"
    CUSTOM = "custom", "Custom code"


class LaunchMode(models.TextChoices):
    PER_DEVICE = "per_device", "One process per device"
    PER_NODE = "per_node", "One process per node"


class ApprovedImage(models.Model):
    """A container image admins allow jobs to run in (container mode), pinned by digest: the
    registry's manifest digest, or the local image id for an image built on the nodes."""

    name = models.CharField(max_length=255, unique=True, help_text="Image reference without digest, e.g. 'ghcr.io/acme/train:2.1'.")
    digest = models.CharField(
        max_length=71, help_text="sha256:<64 hex>: the manifest digest (RepoDigests) or the image id the nodes have."
    )
    description = models.TextField(blank=True)
    active = models.BooleanField(default=True, help_text="Unticked: no new submission may use it (runs that did keep it).")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(condition=models.Q(digest__regex=r"^sha256:[0-9a-f]{64}$"), name="approved_image_digest_sha256"),
        ]

    def __str__(self) -> str:
        return f"{self.name}@{self.digest[:19]}"

    @property
    def reference(self) -> str:
        return f"{self.name}@{self.digest}"


class JobTemplate(models.Model):
    """One version of a paved-road template. Published versions are immutable: an edit is a new
    version, and runs keep the version they were submitted with."""

    slug = models.SlugField(max_length=63)
    version = models.PositiveIntegerField()
    title = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    kind = models.CharField(max_length=16, choices=TemplateKind.choices)
    entrypoint = models.CharField(max_length=500, help_text="Command run by the agent, e.g. 'python -m recipes.digits_classifier'.")
    param_schema = models.JSONField(default=dict, help_text="JSON Schema of the parameters, with defaults and help text.")
    resources = models.JSONField(
        default=dict, help_text="Defaults and limits: pool, nodes, devices_per_node, max_runtime_s (and max_* limits)."
    )
    checkpoint_policy = models.JSONField(default=dict, help_text="every_steps, every_seconds, keep_last.")
    launch = models.CharField(
        max_length=16, choices=LaunchMode.choices, default=LaunchMode.PER_DEVICE,
        help_text="per_device: one process per device with torchrun's variables; per_node: one process that starts its own.",
    )
    grace_period_s = models.PositiveIntegerField(default=30)
    max_restarts = models.PositiveIntegerField(default=3)
    environment = models.JSONField(default=dict, help_text="Approved environment: python, torch, image.")
    image = models.ForeignKey(
        ApprovedImage, null=True, blank=True, on_delete=models.PROTECT, related_name="templates",
        help_text="The approved container image the job runs in on pools whose agents run containers.",
    )
    total_steps_param = models.CharField(max_length=100, blank=True, help_text="Parameter giving the run's total steps.")
    source_hash = models.CharField(max_length=64, blank=True)
    published = models.BooleanField(default=False)
    published_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["slug", "-version"]
        constraints = [models.UniqueConstraint(fields=["slug", "version"], name="template_unique_version")]

    def __str__(self) -> str:
        return f"{self.slug} v{self.version}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.pk is not None:
            stored = JobTemplate.objects.filter(pk=self.pk).values_list("published", flat=True).first()
            if stored:
                raise ValueError(f"{self} is published and immutable; create a new version instead")
        super().save(*args, **kwargs)
