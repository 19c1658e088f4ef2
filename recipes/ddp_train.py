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

from recipes.params import BATCH_DIVISIBLE, object_schema, param

PARAM_SCHEMA: dict[str, Any] = object_schema("ddp_train parameters", {
    "steps": param("steps"),
    "lr": param("lr"),
    "batch_size": param(
        "batch_size",
        description="Global samples per optimizer step, split evenly across ranks:"
        " must be divisible by world size x grad_accum, and at most the number of"
        " training samples of the chosen classes (about 125 per class).",
    ),
    **{name: param(name) for name in ("hidden", "arch", "dropout", "seed", "amp", "amp_dtype")},
    "grad_accum": param(
        "grad_accum",
        description="Micro-batches per rank per optimizer step; world size x grad_accum must divide batch_size.",
    ),
    **{name: param(name) for name in ("eval_every", "warmup_steps", "weight_decay", "classes")},
}, divisible=BATCH_DIVISIBLE)

RECIPE = "ddp_train"


def main() -> int:
    # Deferred so that reading PARAM_SCHEMA does not load torch and scikit-learn.
    from recipes import common, digits

    def train(params: dict[str, Any], device: Any, dist_info: Any, resume: Any) -> None:
        config = digits.ModelConfig(arch=params["arch"], hidden=params["hidden"], dropout=params["dropout"])
        common.train(common.TrainSpec(recipe=RECIPE, params=params, model_config=config), resume=resume,
                     dist_info=dist_info, device=device)

    return common.distributed_main(RECIPE, PARAM_SCHEMA, train)


if __name__ == "__main__":
    raise SystemExit(main())
