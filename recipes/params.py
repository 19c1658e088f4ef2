"""The parameter-schema blocks the recipes share: one definition of each parameter, which every
recipe that takes it references (``param("lr")``), changing only what it words differently.

Standard library only, like :mod:`recipes.schema`: reading a recipe's PARAM_SCHEMA never loads
torch.
"""

from __future__ import annotations

import copy
from typing import Any

DIALECT = "https://json-schema.org/draft/2020-12/schema"

# The global batch splits evenly over ranks, then over micro-batches (recipes.schema reads
# this; the portal too, so a submission that breaks it is refused instead of failing).
BATCH_DIVISIBLE: list[dict[str, Any]] = [{"param": "batch_size", "by": ["world_size", "grad_accum"]}]

BLOCKS: dict[str, dict[str, Any]] = {
    "steps": {
        "type": "integer",
        "minimum": 1,
        "maximum": 100000,
        "default": 300,
        "description": "Optimizer steps to train for.",
    },
    "lr": {
        "type": "number",
        "exclusiveMinimum": 0,
        "maximum": 1,
        "default": 0.003,
        "description": "Peak AdamW learning rate, reached after warm-up; cosine decay to 5% of it by the last step.",
    },
    "batch_size": {
        "type": "integer",
        "minimum": 1,
        "maximum": 1024,
        "default": 64,
        "description": "Samples per optimizer step. At most the number of training"
        " samples of the chosen classes (about 125 per class).",
    },
    "hidden": {
        "type": "integer",
        "minimum": 8,
        "maximum": 2048,
        "default": 128,
        "description": "Width of the hidden layers.",
    },
    "arch": {
        "type": "string",
        "enum": ["mlp", "cnn"],
        "default": "mlp",
        "description": "mlp: 64-hidden-hidden-10; cnn: two conv blocks then hidden-10.",
    },
    "dropout": {
        "type": "number",
        "minimum": 0,
        "maximum": 0.9,
        "default": 0.1,
        "description": "Dropout probability after each hidden layer.",
    },
    "seed": {
        "type": "integer",
        "minimum": 0,
        "maximum": 2147483647,
        "default": 0,
        "description": "Seed of initialisation, dropout and data order. The train/val/test split is fixed and does not depend on it.",
    },
    "amp": {
        "type": "boolean",
        "default": False,
        "description": "Mixed precision. CUDA: autocast to amp_dtype (float16 adds a"
        " GradScaler). CPU: bfloat16 autocast whatever amp_dtype says.",
    },
    "amp_dtype": {
        "type": "string",
        "enum": ["bfloat16", "float16"],
        "default": "bfloat16",
        "description": "Autocast dtype on CUDA when amp is on (float16 on GPUs without bfloat16).",
    },
    "grad_accum": {
        "type": "integer",
        "minimum": 1,
        "maximum": 64,
        "default": 1,
        "description": "Micro-batches per optimizer step; world size (nodes x devices per node, 1 on"
        " one device) x grad_accum must divide batch_size.",
    },
    "eval_every": {
        "type": "integer",
        "minimum": 0,
        "maximum": 100000,
        "default": 50,
        "description": "Validate every this many steps (0: only at the end).",
    },
    "warmup_steps": {
        "type": "integer",
        "minimum": 0,
        "maximum": 10000,
        "default": 10,
        "description": "Linear learning-rate warm-up steps.",
    },
    "weight_decay": {
        "type": "number",
        "minimum": 0,
        "maximum": 1,
        "default": 0.01,
        "description": "AdamW weight decay.",
    },
    "classes": {
        "type": "array",
        "items": {"type": "integer", "minimum": 0, "maximum": 9},
        "minItems": 2,
        "maxItems": 10,
        "uniqueItems": True,
        "default": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9],
        "description": "Digits to train on (the output layer always has 10 units, so a"
        " model trained on some digits can be fine-tuned on others).",
    },
}


def param(name: str, **changes: Any) -> dict[str, Any]:
    """The shared block for ``name`` (a copy: a recipe cannot change another's), with ``changes``
    to keys it already has; an unknown key is refused, so a typo cannot add a keyword silently."""
    block = copy.deepcopy(BLOCKS[name])
    unknown = sorted(set(changes) - set(block))
    if unknown:
        raise KeyError(f"parameter block {name!r} has no {unknown[0]!r}")
    return {**block, **copy.deepcopy(changes)}


def object_schema(title: str, properties: dict[str, dict[str, Any]], *,
                  divisible: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A recipe's PARAM_SCHEMA: a closed object of ``properties`` (in display order)."""
    schema: dict[str, Any] = {"$schema": DIALECT, "title": title, "type": "object", "additionalProperties": False}
    if divisible is not None:
        schema["x-divisible"] = copy.deepcopy(divisible)
    schema["properties"] = properties
    return schema
