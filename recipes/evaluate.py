"""Score another run's checkpoint on the held-out test split (or the validation split).

    python -m recipes.evaluate       # TRAINYARD_INIT_CHECKPOINT = the checkpoint to score

No training and no checkpoint. An lm_pretrain (or fine-tuned GPT) checkpoint is scored by
perplexity instead (``val_loss``, ``val_perplexity``, ``val_bits_per_byte``: see
``recipes.lm_pretrain.evaluate_lm_checkpoint``). Logs, at step 1 of 1: ``<split>_loss``, ``<split>_accuracy``,
``<split>_samples`` and ``<split>_accuracy_class_<d>`` per digit. Lineage records the
evaluated checkpoint's sha256, step, run and recipe, and whether the data fingerprint matches
the one it was trained on. The split is the fixed one every recipe uses, so the test images
were never seen in training.
"""

from __future__ import annotations

from typing import Any

from recipes.lm_pretrain import CORPUS_CHOICES
from recipes.params import object_schema, param

PARAM_SCHEMA: dict[str, Any] = object_schema("evaluate parameters", {
    "split": {
        "type": "string",
        "enum": ["test", "val"],
        "default": "test",
        "description": "Held-out split to score on.",
    },
    "classes": param("classes", minItems=1, description="Digits to score on."),
    "batch_size": param(
        "batch_size",
        maximum=4096,
        default=512,
        description="Evaluation batch size (does not change the result beyond rounding).",
    ),
    "amp": param(
        "amp",
        description="Mixed precision. CUDA: autocast to amp_dtype. CPU: bfloat16 autocast whatever amp_dtype says.",
    ),
    "amp_dtype": param("amp_dtype", description="Autocast dtype on CUDA when amp is on."),
    "corpus": {"type": "string", "enum": ["trained", *CORPUS_CHOICES], "default": "trained",
               "description": "lm_pretrain checkpoints: whose validation files to score perplexity on (trained: the"
               " checkpoint's own corpus). batch_size is then the number of fixed windows scored."},
})

RECIPE = "evaluate"


def main() -> int:
    # Deferred so that reading PARAM_SCHEMA does not load torch and scikit-learn.
    from recipes import common, digits, schema

    def body() -> int:
        import trainyard

        params = schema.resolve_params(PARAM_SCHEMA, trainyard.params())
        if trainyard.should_stop():
            return 0  # preempted before starting: nothing to save, the next attempt redoes it
        path = trainyard.init_checkpoint()
        if path is None:
            raise schema.ParamError("evaluate scores another run's checkpoint: TRAINYARD_INIT_CHECKPOINT is not set")
        state = common.load_state(path)
        sha256 = common.file_sha256(path)
        device = common.choose_device(trainyard.local_rank())
        common.seed_everything(0)
        if state.get("model_kind") == "gpt":
            from recipes import lm_pretrain

            lm_pretrain.evaluate_lm_checkpoint(state, sha256=sha256, corpus_name=params["corpus"], windows=params["batch_size"],
                                               device=device, amp=params["amp"])
            return 0
        data = digits.load_digits_data(params["classes"], device)
        model = digits.build_model(digits.ModelConfig.from_dict(state["model_config"]))
        model.to(device)
        model.load_state_dict(state["model"])
        precision = common.choose_precision(device, params["amp"], params["amp_dtype"])
        split: str = params["split"]

        trained_on = state.get("data", {})
        dataset_matches = trained_on.get("dataset_sha256") == data.dataset_sha256
        if not dataset_matches:
            print(
                "evaluate: warning: the checkpoint was trained on data with a different fingerprint; held-out images may not be held out",
                flush=True,
            )
        lineage: dict[str, Any] = {
            "recipe": RECIPE,
            "evaluated_checkpoint_sha256": sha256,
            "evaluated_checkpoint_step": int(state["step"]),
            "evaluated_run_id": str(state["run_id"]),
            "evaluated_recipe": str(state["recipe"]),
            "evaluated_classes": list(trained_on.get("classes", [])),
            "split": split,
            "dataset_matches_training": dataset_matches,
            "precision": precision.describe(),
        }
        lineage.update(data.lineage())
        trainyard.record_lineage(**lineage)
        trainyard.set_total_steps(1)

        loss, accuracy, per_class = common.evaluate_split(model, data.split(split), precision, batch_size=params["batch_size"])
        metrics: dict[str, float] = {
            f"{split}_loss": loss,
            f"{split}_accuracy": accuracy,
            f"{split}_samples": len(data.split(split)),
        }
        for digit, (correct, count) in sorted(per_class.items()):
            metrics[f"{split}_accuracy_class_{digit}"] = correct / count
        trainyard.log(1, **metrics)
        print(
            f"evaluate: {split} accuracy {accuracy:.4f}, loss {loss:.4f} on {len(data.split(split))} images of digits {list(data.classes)}",
            flush=True,
        )
        return 0

    return common.run_main(body, RECIPE)


if __name__ == "__main__":
    raise SystemExit(main())
