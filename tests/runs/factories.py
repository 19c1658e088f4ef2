"""Templates and pools for submission tests (schemas shaped like the shipped recipes')."""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

from apps.jobtemplates.models import JobTemplate, TemplateKind
from apps.jobtemplates.recipes import CUSTOM_SCHEMA, LOCAL_RESOURCES, SWEEP_ENTRYPOINT, SWEEP_SCHEMA
from apps.jobtemplates.services import template_create
from apps.nodes.models import NodePool

DIGITS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "steps": {"type": "integer", "minimum": 1, "maximum": 100000, "default": 300, "description": "Optimizer steps."},
        "lr": {"type": "number", "exclusiveMinimum": 0, "maximum": 1.0, "default": 0.003, "description": "Learning rate."},
        "hidden": {"type": "integer", "minimum": 8, "maximum": 2048, "default": 128},
        "arch": {"type": "string", "enum": ["mlp", "cnn"], "default": "mlp"},
        "amp": {"type": "boolean", "default": False},
        "classes": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9}, "default": [0, 1, 2]},
    },
}

GOOD_TAGS = {"task": "classification", "dataset": "digits", "candidate": "baseline", "family": "digits-mlp"}


def local_pool(price: str = "2.0") -> NodePool:
    pool, _ = NodePool.objects.get_or_create(name="local", defaults={"price_per_device_hour": Decimal(price)})
    return pool


def make_template(slug: str = "digits-classifier", kind: str = TemplateKind.TRAIN, schema: dict[str, Any] | None = None,
                  publish: bool = True, **extra: Any) -> JobTemplate:
    fields: dict[str, Any] = {
        "title": slug.replace("-", " ").title(),
        "kind": kind,
        "entrypoint": f"python -m recipes.{slug.replace('-', '_')}",
        "param_schema": DIGITS_SCHEMA if schema is None else schema,
        "resources": dict(LOCAL_RESOURCES),
        "checkpoint_policy": {"every_steps": 50, "keep_last": 2},
        "total_steps_param": "steps",
    }
    fields.update(extra)
    return template_create(slug=slug, publish=publish, **fields)


def make_sweep_template() -> JobTemplate:
    return make_template("sweep", TemplateKind.SWEEP, SWEEP_SCHEMA, entrypoint=SWEEP_ENTRYPOINT, total_steps_param="")


def make_custom_template() -> JobTemplate:
    return make_template("custom", TemplateKind.CUSTOM, CUSTOM_SCHEMA, entrypoint="{command}")


def body(cast: Any, **changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = {"project": cast.digits.pk, "template": "digits-classifier", "params": {"steps": 20}, "tags": dict(GOOD_TAGS),
                            "priority": "normal", "resources": {}}
    data.update(changes)
    return data


def form_data(cast: Any, **changes: str) -> dict[str, Any]:
    """The submit form's fields for a small digits run, as the page posts them."""
    data: dict[str, Any] = {
        "project": str(cast.digits.pk), "template": "digits-classifier", "priority": "normal", "p_steps": "25",
        "tag_task": "classification", "tag_dataset": "digits", "tag_candidate": "baseline", "tag_family": "ux",
        "res_pool": "local", "res_nodes": "1", "res_devices_per_node": "1", "res_max_runtime_s": "1800",
    }
    data.update(changes)
    return data


def field_block(html: str, name: str) -> str:
    """The submit page's block for one field (its input and its errors)."""
    match = re.search(rf'<div class="[^"]*" data-field="{name}">(.*?)</div>\s*(?=<div|</div>)', html, re.S)
    assert match, f"no block for {name}"
    return match.group(0)
