"""Train a small ResNet on generated shapes (recipes.images), resumably and bit-for-bit on a CPU.

    python -m recipes.image_classifier     # params from TRAINYARD_PARAMS (JSON); DDP when the agent sets MASTER_ADDR

On a GPU: channels-last tensors and autocast (bfloat16 where supported). Logs loss, accuracy,
lr, throughput (images/s), model TFLOP/s, MFU (GPUs in recipes.lm_loop's peak table), peak
memory every step; val_loss and val_accuracy every ``eval_every`` steps and at the end.
"""

from __future__ import annotations

from typing import Any

from recipes.params import BATCH_DIVISIBLE, object_schema, param

PARAM_SCHEMA: dict[str, Any] = object_schema("image_classifier parameters", {
    "steps": param("steps", default=200),
    "lr": param("lr", default=0.003),
    "batch_size": param("batch_size", default=64, description="Images per optimizer step (global)."),
    "grad_accum": param("grad_accum"),
    "width": {"type": "integer", "minimum": 4, "maximum": 512, "default": 16,
              "description": "Channels of the first stage; each later stage doubles them."},
    "stages": {"type": "integer", "minimum": 1, "maximum": 4, "default": 2, "description": "Resolution stages (stride 2 between them)."},
    "blocks": {"type": "integer", "minimum": 1, "maximum": 8, "default": 1, "description": "Residual blocks per stage."},
    "train_samples": {"type": "integer", "minimum": 64, "maximum": 200000, "default": 2000,
                      "description": "Generated training images (validation: a fifth as many more)."},
    "warmup_steps": param("warmup_steps"),
    "weight_decay": param("weight_decay"),
    "eval_every": param("eval_every"),
    "seed": param("seed", description="Seed of initialisation and data order. The generated images do not depend on it."),
    "amp": param("amp", default=True, description="CUDA: autocast to amp_dtype (float16 adds a GradScaler). CPU: always float32."),
    "amp_dtype": param("amp_dtype"),
    "compile": {"type": "boolean", "default": False, "description": "Compile the model with torch.compile."},
}, divisible=BATCH_DIVISIBLE)

RECIPE = "image_classifier"


def main() -> int:
    # Deferred so that reading PARAM_SCHEMA does not load torch.
    from recipes import common

    return common.distributed_main(RECIPE, PARAM_SCHEMA, _train)


def _train(params: dict[str, Any], device: Any, dist_info: Any, resume: Any) -> str:
    import numpy as np
    import torch
    import torch.nn.functional as F

    from recipes import common, images, lm_loop

    common.seed_everything(params["seed"])
    data = images.load_images(params["train_samples"], max(64, params["train_samples"] // 5))
    precision = common.choose_precision(device, bool(params["amp"]) and device.type == "cuda", params["amp_dtype"])
    memory_format = torch.channels_last if device.type == "cuda" else torch.contiguous_format
    model = images.ResNet(params["width"], params["stages"], params["blocks"]).to(device)
    if device.type == "cuda":
        model = model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]  # stubs lack memory_format
    flops = images.training_flops_per_sample(model)
    train_x = data.train_x.to(device).contiguous(memory_format=memory_format)
    train_y = data.train_y.to(device)
    val_x = data.val_x.to(device).contiguous(memory_format=memory_format)
    val_y = data.val_y.to(device)

    def batch(step_index: int, begin: int, end: int) -> tuple[Any, Any]:
        order = np.random.default_rng([params["seed"], step_index]).permutation(len(train_y))[: params["batch_size"]]
        index = torch.from_numpy(order[begin:end]).to(device)
        return train_x[index], train_y[index]

    def loss(logits: Any, targets: Any) -> tuple[Any, Any]:
        return F.cross_entropy(logits.float(), targets, reduction="sum"), (logits.detach().argmax(dim=1) == targets).sum()

    def evaluate(net: Any) -> dict[str, float]:
        was_training = net.training
        net.eval()
        total, correct = 0.0, 0
        with torch.no_grad():
            for start in range(0, len(val_y), 512):
                with precision.autocast():
                    logits = net(val_x[start : start + 512])
                s, c = loss(logits, val_y[start : start + 512])
                total, correct = total + float(s), correct + int(c)
        net.train(was_training)
        return {"val_loss": total / len(val_y), "val_accuracy": correct / len(val_y)}

    config = {"kind": "resnet", "width": params["width"], "stages": params["stages"], "blocks": params["blocks"]}
    task = lm_loop.LoopTask(
        recipe=RECIPE, params=params, model=model, model_config=config, batch=batch, loss=loss, evaluate=evaluate,
        flops_per_sample=flops, lineage={**data.lineage(), "memory_format": str(memory_format).removeprefix("torch.")},
        saved={"data": data.lineage()}, compile=bool(params["compile"]),
    )
    return lm_loop.train(task, resume=resume, dist_info=dist_info, device=device, precision=precision)


if __name__ == "__main__":
    raise SystemExit(main())
