"""Fine-tune another run's digits model: start from its weights, freeze leading layers.

    python -m recipes.finetune       # TRAINYARD_INIT_CHECKPOINT = a digits_classifier,
                                     # ddp_train or finetune checkpoint of another run

The typical use: pre-train digits_classifier on classes 0-4, fine-tune on 5-9. The model's
architecture comes from the source checkpoint; only its weights are taken (a fresh optimizer
and schedule start here). ``freeze`` leading layers (an MLP has 3, a CNN 4) keep their
weights; ``reset_head`` re-initialises the output layer first. Lineage records the source
checkpoint's sha256, step and run. When this run is itself resumed after preemption it
continues from its own latest checkpoint, not the source.
"""

from __future__ import annotations

from typing import Any

PARAM_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "finetune parameters",
    "type": "object",
    "additionalProperties": False,
    # The global batch splits evenly over ranks, then over micro-batches (recipes.schema reads
    # this; the portal too, so a submission that breaks it is refused instead of failing).
    "x-divisible": [{"param": "batch_size", "by": ["world_size", "grad_accum"]}],
    "properties": {
        "steps": {
            "type": "integer",
            "minimum": 1,
            "maximum": 100000,
            "default": 200,
            "description": "Optimizer steps to fine-tune for.",
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
        "freeze": {
            "type": "integer",
            "minimum": 0,
            "maximum": 3,
            "default": 1,
            "description": "Leading layers to freeze (MLP: at most 2 of its 3; CNN: at most 3 of its 4).",
        },
        "reset_head": {
            "type": "boolean",
            "default": True,
            "description": "Re-initialise the output layer before fine-tuning. A head"
            " trained on other digits starts out confidently wrong on new ones.",
        },
        "seed": {
            "type": "integer",
            "minimum": 0,
            "maximum": 2147483647,
            "default": 0,
            "description": "Seed of dropout and data order. The train/val/test split is fixed and does not depend on it.",
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
            "default": [5, 6, 7, 8, 9],
            "description": "Digits to fine-tune on.",
        },
    },
}

RECIPE = "finetune"


def main() -> int:
    # Deferred so that reading PARAM_SCHEMA does not load torch and scikit-learn.
    from recipes import common, digits, schema

    def body() -> int:
        import trainyard

        params = schema.resolve_params(PARAM_SCHEMA, trainyard.params())
        schema.check_divisible(PARAM_SCHEMA, params, world_size=trainyard.world_size())
        device = common.choose_device(trainyard.local_rank())
        dist_info = common.Dist()
        resume = common.find_resume(RECIPE, dist_info)
        if resume is not None:
            # Our own checkpoint holds the model config and the source's lineage.
            spec = common.TrainSpec(
                recipe=RECIPE,
                params=params,
                model_config=digits.ModelConfig.from_dict(resume.state["model_config"]),
                freeze=params["freeze"],
            )
        else:
            source_path = trainyard.init_checkpoint()
            if source_path is None:
                raise schema.ParamError("finetune starts from another run's checkpoint: TRAINYARD_INIT_CHECKPOINT is not set")
            source = common.load_state(source_path)
            if source.get("recipe") not in common.TRAINING_RECIPES:
                raise schema.ParamError(
                    f"{source_path} was written by {source.get('recipe')!r}, not a training recipe ({', '.join(common.TRAINING_RECIPES)})"
                )
            spec = common.TrainSpec(
                recipe=RECIPE,
                params=params,
                model_config=digits.ModelConfig.from_dict(source["model_config"]),
                freeze=params["freeze"],
                init_weights=source["model"],
                reset_head=params["reset_head"],
                extra_lineage={
                    "init_checkpoint_sha256": common.file_sha256(source_path),
                    "init_checkpoint_step": int(source["step"]),
                    "init_run_id": str(source["run_id"]),
                    "init_recipe": str(source["recipe"]),
                    "init_classes": list(source["params"]["classes"]),
                    "freeze": params["freeze"],
                    "reset_head": params["reset_head"],
                },
            )
        common.train(spec, resume=resume, dist_info=dist_info, device=device)
        return 0

    return common.run_main(body, RECIPE)


if __name__ == "__main__":
    raise SystemExit(main())
