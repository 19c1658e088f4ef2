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
