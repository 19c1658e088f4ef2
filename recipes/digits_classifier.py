"""Train a small classifier on scikit-learn's digits, resumably and bit-for-bit reproducibly.

    python -m recipes.digits_classifier          # params from TRAINYARD_PARAMS (JSON)

Logs loss, accuracy, lr, throughput every optimizer step and val_loss, val_accuracy every
``eval_every`` steps and at the end; checkpoints when the portal's policy says so, at the end,
and when preempted (then exits 0). See :mod:`recipes.digits` for the data and models, and
:mod:`recipes.common` for determinism and precision.
"""

from __future__ import annotations

from typing import Any

from recipes.params import BATCH_DIVISIBLE, object_schema, param

PARAM_SCHEMA: dict[str, Any] = object_schema("digits_classifier parameters", {
    name: param(name)
    for name in ("steps", "lr", "batch_size", "hidden", "arch", "dropout", "seed", "amp", "amp_dtype", "grad_accum",
                 "eval_every", "warmup_steps", "weight_decay", "classes")
}, divisible=BATCH_DIVISIBLE)

RECIPE = "digits_classifier"


def main() -> int:
    # Deferred so that reading PARAM_SCHEMA does not load torch and scikit-learn.
    from recipes import common, digits, schema

    def body() -> int:
        import trainyard

        params = schema.resolve_params(PARAM_SCHEMA, trainyard.params())
        schema.check_divisible(PARAM_SCHEMA, params, world_size=trainyard.world_size())
        device = common.choose_device(trainyard.local_rank())
        spec = common.TrainSpec(
            recipe=RECIPE,
            params=params,
            model_config=digits.ModelConfig(arch=params["arch"], hidden=params["hidden"], dropout=params["dropout"]),
        )
        dist_info = common.Dist()
        resume = common.find_resume(RECIPE, dist_info)
        common.train(spec, resume=resume, dist_info=dist_info, device=device)
        return 0

    return common.run_main(body, RECIPE)


if __name__ == "__main__":
    raise SystemExit(main())
