"""Fine-tune another run's digits model: start from its weights, freeze leading layers.

    python -m recipes.finetune       # TRAINYARD_INIT_CHECKPOINT = a digits_classifier,
                                     # ddp_train or finetune checkpoint of another run

The typical use: pre-train digits_classifier on classes 0-4, fine-tune on 5-9. The model's
architecture comes from the source checkpoint; only its weights are taken (a fresh optimizer
and schedule start here). ``freeze`` leading layers (an MLP has 3, a CNN 4) keep their
weights; ``reset_head`` re-initialises the output layer first. Lineage records the source
checkpoint's sha256, step and run. When this run is itself resumed after preemption it
continues from its own latest checkpoint, not the source.

An ``lm_pretrain`` checkpoint is fine-tuned as a language model on the ``corpus`` slice
(``recipes.lm_pretrain.finetune_lm``); ``freeze``, ``reset_head`` and ``classes`` are digits' only.
"""

from __future__ import annotations

from typing import Any

from recipes.lm_pretrain import CORPUS_CHOICES
from recipes.params import BATCH_DIVISIBLE, object_schema, param

PARAM_SCHEMA: dict[str, Any] = object_schema("finetune parameters", {
    "steps": param("steps", default=200, description="Optimizer steps to fine-tune for."),
    "lr": param("lr"),
    "batch_size": param("batch_size"),
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
    "seed": param(
        "seed",
        description="Seed of dropout and data order. The train/val/test split is fixed and does not depend on it.",
    ),
    **{name: param(name) for name in ("amp", "amp_dtype", "grad_accum", "eval_every", "warmup_steps", "weight_decay")},
    "classes": param("classes", default=[5, 6, 7, 8, 9], description="Digits to fine-tune on."),
    "corpus": {"type": "string", "enum": CORPUS_CHOICES, "default": "stdlib-packages",
               "description": "lm_pretrain checkpoints only: the slice of the standard library's source to fine-tune on."},
}, divisible=BATCH_DIVISIBLE)

RECIPE = "finetune"


def main() -> int:
    # Deferred so that reading PARAM_SCHEMA does not load torch and scikit-learn.
    from recipes import common, digits, lm_pretrain, schema

    def body() -> int:
        import trainyard

        params = schema.resolve_params(PARAM_SCHEMA, trainyard.params())
        schema.check_divisible(PARAM_SCHEMA, params, world_size=trainyard.world_size())
        device = common.choose_device(trainyard.local_rank())
        dist_info = common.Dist()
        resume = common.find_resume(RECIPE, dist_info)
        if resume is not None and resume.state.get("model_kind") == "gpt":
            return lm_pretrain.finetune_lm(params, resume=resume, source_path=None, device=device, dist_info=dist_info)
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
            if source.get("model_kind") == "gpt":
                return lm_pretrain.finetune_lm(params, resume=None, source_path=source_path, device=device, dist_info=dist_info)
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
