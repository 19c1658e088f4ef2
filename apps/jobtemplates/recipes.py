"""The shipped recipes as templates: their parameter schemas and the demo seeding.

A recipe's PARAM_SCHEMA is read from the module's source with ``ast`` when it is a literal dict,
so the web process never imports torch to list templates. Otherwise (the shipped recipes build
theirs from the shared blocks in recipes/params.py) the module is imported in a child
interpreter, once per process and source, which keeps torch out of this process too.
"""

from __future__ import annotations

import ast
import copy
import functools
import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from django.conf import settings

from apps.jobtemplates.models import JobTemplate, TemplateKind
from apps.jobtemplates.services import template_create

RECIPES_DIR = Path(settings.BASE_DIR) / "recipes"
# A sweep parent runs no process; the marker says so wherever an entrypoint is shown.
SWEEP_ENTRYPOINT = "trainyard:sweep-controller"
TOTAL_STEPS_CANDIDATES = ("steps", "total_steps", "max_steps")
# The last three, and the best by validation loss (retention must never delete the best one).
DEFAULT_CHECKPOINT_POLICY = {"every_steps": 100, "every_seconds": 60, "keep_last": 3, "keep_best": "val_loss:min"}
LOCAL_RESOURCES = {"pool": "local", "nodes": 1, "devices_per_node": 1, "max_runtime_s": 1800,
                   "max_nodes": 2, "max_devices_per_node": 4, "max_runtime_limit_s": 6 * 3600}


def recipe_source(module: str) -> str | None:
    path = RECIPES_DIR / f"{module}.py"
    return path.read_text() if path.exists() else None


def recipe_param_schema(*, module: str) -> dict[str, Any] | None:
    source = recipe_source(module)
    if source is None:
        return None
    targets: list[ast.expr]
    expr: ast.expr | None
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign):
            targets, expr = node.targets, node.value
        elif isinstance(node, ast.AnnAssign):
            targets, expr = [node.target], node.value
        else:
            continue
        if any(isinstance(t, ast.Name) and t.id == "PARAM_SCHEMA" for t in targets) and expr is not None:
            try:
                value = ast.literal_eval(expr)
            except ValueError:
                break
            return value if isinstance(value, dict) else None
    schema = _imported_param_schema(module, _source_key(module, source))
    return copy.deepcopy(schema) if schema is not None else None


def _source_key(module: str, source: str) -> str:
    # The recipe and the shared blocks it builds its schema from: a change to either is read anew.
    shared = recipe_source("params") or ""
    return hashlib.sha256(f"{module}\0{source}\0{shared}".encode()).hexdigest()


@functools.lru_cache(maxsize=64)
def _imported_param_schema(module: str, source_key: str) -> dict[str, Any] | None:
    code = "import importlib, json, sys; print(json.dumps(importlib.import_module(sys.argv[1]).PARAM_SCHEMA))"
    proc = subprocess.run([sys.executable, "-c", code, f"recipes.{module}"], cwd=settings.BASE_DIR, capture_output=True,
                          text=True, timeout=120, check=False)
    if proc.returncode != 0:
        return None
    schema = json.loads(proc.stdout)
    return schema if isinstance(schema, dict) else None


# Sweep and custom are portal-side templates, not recipe modules.
SWEEP_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["template", "space"],
    "properties": {
        "template": {"type": "string", "default": "digits-classifier", "description": "Slug of the template each trial runs."},
        "strategy": {"type": "string", "enum": ["grid", "random"], "default": "grid",
                     "description": "grid: every combination; random: max_runs samples."},
        "space": {"type": "object", "default": {"lr": [0.001, 0.003], "hidden": [64, 128]},
                  "description": "Parameter -> list of values (or {\"min\", \"max\", \"log\"} for random)."},
        "params": {"type": "object", "default": {}, "description": "Fixed parameters every trial gets."},
        "max_runs": {"type": "integer", "minimum": 1, "maximum": 50, "default": 4, "description": "Most trials to start."},
        "seed": {"type": "integer", "minimum": 0, "maximum": 2147483647, "default": 0, "description": "Seed of random sampling."},
        "objective": {"type": "object", "additionalProperties": False,
                      "description": "The metric the sweep optimises and which way, e.g. {\"metric\": \"val_loss\", \"goal\": \"min\"};"
                                     " the sweep page marks the best trial by it.",
                      "properties": {"metric": {"type": "string", "minLength": 1, "maxLength": 250},
                                     "goal": {"type": "string", "enum": ["min", "max"]}}},
    },
}
CUSTOM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["command"],
    "properties": {
        "command": {"type": "string", "minLength": 1, "maxLength": 500, "default": "python train.py",
                    "description": "Command run in the unpacked snapshot, e.g. 'python train.py --steps 50'."},
        "steps": {"type": "integer", "minimum": 0, "maximum": 10_000_000, "default": 0,
                  "description": "Expected total steps, for progress (0 if unknown)."},
    },
}

# slug -> (recipe module or None, kind, title, description, resource overrides)
SHIPPED: list[tuple[str, str | None, str, str, str, dict[str, Any]]] = [
    ("digits-classifier", "digits_classifier", TemplateKind.TRAIN, "Digits classifier",
     "Train an MLP or CNN on scikit-learn's 8x8 digits.", {}),
    ("finetune", "finetune", TemplateKind.FINETUNE, "Fine-tune",
     "Continue training from another run's checkpoint (init_run).", {}),
    ("ddp-train", "ddp_train", TemplateKind.DISTRIBUTED, "Distributed training (DDP)",
     "Data-parallel training across nodes with torch.distributed.", {"nodes": 2, "devices_per_node": 1, "max_nodes": 8}),
    ("evaluate", "evaluate", TemplateKind.EVALUATE, "Evaluate a checkpoint",
     "Evaluate another run's checkpoint on the held-out split.", {}),
    ("lm-pretrain", "lm_pretrain", TemplateKind.TRAIN, "Language model pre-training",
     "Pre-train a GPT-style byte-level language model (tiny to 124M) on the Python standard library's source;"
     " reports tokens/s, MFU and memory.", {}),
    ("image-classifier", "image_classifier", TemplateKind.TRAIN, "Image classifier",
     "Train a small ResNet on generated 32x32 shapes; channels-last and mixed precision on GPUs.", {}),
    ("sweep", None, TemplateKind.SWEEP, "Hyper-parameter sweep",
     "Grid or random search: one child run per point, grouped in a family.", {}),
    ("custom", None, TemplateKind.CUSTOM, "Custom code",
     "Run your own code from an uploaded snapshot (.tar.gz) in the approved environment.", {}),
]


def shipped_template_fields(slug: str, module: str | None, kind: str, title: str, description: str,
                            overrides: dict[str, Any]) -> dict[str, Any] | None:
    if module is None:
        schema = SWEEP_SCHEMA if kind == TemplateKind.SWEEP else CUSTOM_SCHEMA
        source = json.dumps(schema, sort_keys=True)
        entrypoint = SWEEP_ENTRYPOINT if kind == TemplateKind.SWEEP else "{command}"
    else:
        found = recipe_param_schema(module=module)
        if found is None:
            return None
        schema = found
        # The schema too: a recipe's own source stays the same when a shared block changes.
        source = (recipe_source(module) or "") + json.dumps(schema, sort_keys=True)
        entrypoint = f"python -m recipes.{module}"
    properties = schema.get("properties", {})
    total_steps_param = next((name for name in TOTAL_STEPS_CANDIDATES if name in properties), "")
    return {
        "title": title,
        "description": description,
        "kind": kind,
        "entrypoint": entrypoint,
        "param_schema": schema,
        "resources": {**LOCAL_RESOURCES, **overrides},
        "checkpoint_policy": dict(DEFAULT_CHECKPOINT_POLICY),
        "grace_period_s": 30,
        "max_restarts": 3,
        "environment": {"python": f"{sys.version_info.major}.{sys.version_info.minor}", "image": "trainyard-local"},
        "total_steps_param": total_steps_param,
        "source_hash": hashlib.sha256(source.encode()).hexdigest(),
    }


def seed_templates(*, users: dict[str, Any], teams: dict[str, Any], stdout: Any) -> None:
    """One published template per shipped recipe; a changed recipe gets a new version."""
    for slug, module, kind, title, description, overrides in SHIPPED:
        fields = shipped_template_fields(slug, module, kind, title, description, overrides)
        if fields is None:
            stdout.write(f"template {slug}: recipe {module} not found; skipped")
            continue
        latest = JobTemplate.objects.filter(slug=slug, published=True).order_by("-version").first()
        if latest is not None and latest.source_hash == fields["source_hash"]:
            continue
        template = template_create(slug=slug, publish=True, **fields)
        stdout.write(f"template {template} published")
