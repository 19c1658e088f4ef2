"""digits_classifier under DistributedDataParallel, across every rank of the job.

    torchrun --nproc-per-node 2 -m recipes.ddp_train       # by hand; the agent sets the env
    python -m recipes.ddp_train                             # one process, no MASTER_ADDR

Backend NCCL when CUDA is available, else gloo; rendezvous from MASTER_ADDR, MASTER_PORT, RANK,
WORLD_SIZE (the agent's env). Each rank takes the disjoint ``rank``-th slice of every global
batch (same global batches as digits_classifier); gradients are averaged by DDP; training
loss and accuracy are all-reduced so rank 0 logs the global figures (validation runs on rank
0). Every step the ranks all-reduce their stop flags, so a SIGTERM on any rank stops all of
them after the same step; rank 0 writes the checkpoint, with every rank's RNG state, and all
exit 0. On resume rank 0 reads the checkpoint and broadcasts it, since other nodes' checkpoint
directories may be empty.
"""

from __future__ import annotations

from typing import Any

PARAM_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "ddp_train parameters",
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
            "description": "Global samples per optimizer step, split evenly across ranks:"
            " must be divisible by world size x grad_accum, and at most the number of"
            " training samples of the chosen classes (about 125 per class).",
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
            "description": "Micro-batches per rank per optimizer step; world size x grad_accum must divide batch_size.",
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
    },
}

RECIPE = "ddp_train"


def main() -> int:
    # Deferred so that reading PARAM_SCHEMA does not load torch and scikit-learn.
    from recipes import common, digits, schema

    def body() -> int:
        import trainyard

        params = schema.resolve_params(PARAM_SCHEMA, trainyard.params())
        schema.check_divisible(PARAM_SCHEMA, params, world_size=trainyard.world_size())
        device = common.choose_device(trainyard.local_rank())
        with common.process_group(common.init_distributed(device)) as dist_info:
            spec = common.TrainSpec(
                recipe=RECIPE,
                params=params,
                model_config=digits.ModelConfig(arch=params["arch"], hidden=params["hidden"], dropout=params["dropout"]),
            )
            resume = common.find_resume(RECIPE, dist_info)
            common.train(spec, resume=resume, dist_info=dist_info, device=device)
        return 0

    return common.run_main(body, RECIPE)


if __name__ == "__main__":
    raise SystemExit(main())
