"""Pre-train a GPT-style byte-level language model on the Python standard library's source.

    python -m recipes.lm_pretrain        # params from TRAINYARD_PARAMS (JSON); DDP when the agent sets MASTER_ADDR

Sizes from ``preset`` (tiny trains on a CPU in seconds; 124m is GPT-2 small's shape), data
from :mod:`recipes.lm_data`, the model from :mod:`recipes.lm_model`, the loop, its metrics
(tokens/s, MFU, memory) and checkpoints from :mod:`recipes.lm_loop`. ``finetune`` continues an
lm_pretrain checkpoint on another corpus slice and ``evaluate`` scores its perplexity, both
through the functions at the bottom.
"""

from __future__ import annotations

from typing import Any

from recipes.lm_presets import PRESETS, preset_description
from recipes.params import BATCH_DIVISIBLE, object_schema, param

CORPUS_CHOICES = ["stdlib-top", "stdlib-packages", "stdlib-all"]
ATTENTION_KERNELS = ["auto", "flash", "cudnn", "efficient", "math"]  # lm_model.choose_attention

PARAM_SCHEMA: dict[str, Any] = object_schema("lm_pretrain parameters", {
    "preset": {"type": "string", "enum": list(PRESETS), "default": "tiny", "description": preset_description()},
    "layers": {"type": "integer", "minimum": 0, "maximum": 96, "default": 0, "description": "Decoder blocks (0: the preset's)."},
    "width": {"type": "integer", "minimum": 0, "maximum": 8192, "default": 0, "description": "Model width (0: the preset's)."},
    "heads": {"type": "integer", "minimum": 0, "maximum": 128, "default": 0,
              "description": "Attention heads, dividing width (0: the preset's)."},
    "context": {"type": "integer", "minimum": 0, "maximum": 4096, "default": 0,
                "description": "Context length in bytes (0: the preset's)."},
    "corpus": {"type": "string", "enum": CORPUS_CHOICES, "default": "stdlib-top",
               "description": "Slice of the installed Python standard library's .py files to train on:"
               " top-level modules, the packages' modules, or both. Every 10th file is validation."},
    "steps": param("steps", default=200),
    "lr": param("lr", default=0.002),
    "batch_size": param("batch_size", default=16, description="Sequences per optimizer step (global), each context + 1 bytes long."),
    "grad_accum": param("grad_accum"),
    "warmup_steps": param("warmup_steps", default=20),
    "weight_decay": param("weight_decay", default=0.1),
    "dropout": param("dropout", default=0.0),
    "eval_every": param("eval_every"),
    "eval_batches": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 4,
                     "description": "Validation batches (of batch_size fixed windows) per evaluation."},
    "seed": param("seed", description="Seed of initialisation and of which windows each step samples."),
    "amp": param("amp", default=True, description="CUDA: bfloat16 autocast (float16 with a GradScaler on GPUs without"
                 " bfloat16). CPU: always float32."),
    "compile": {"type": "boolean", "default": False, "description": "Compile the model with torch.compile."},
    "deterministic": {"type": "boolean", "default": True,
                      "description": "Deterministic kernels, so a resumed run ends bit-identical on a CPU. Off: faster fused"
                      " GPU kernels (flash attention's backward among them), results that vary in the low bits."},
    "attention": {"type": "string", "enum": ATTENTION_KERNELS, "default": "auto",
                  "description": "CUDA attention kernel: PyTorch's choice (auto) or that one kernel alone. No effect on a CPU."},
    "activation_checkpointing": {"type": "boolean", "default": False,
                                 "description": "Recompute each block's activations in the backward pass: less memory, ~30% more compute."},
}, divisible=BATCH_DIVISIBLE)

RECIPE = "lm_pretrain"
MODEL_KIND = "gpt"


def main() -> int:
    from recipes import common
    from recipes.lm_presets import resolve_config

    def train(params: dict[str, Any], device: Any, dist_info: Any, resume: Any) -> None:
        run_lm(RECIPE, params, resolve_config(params).to_dict(), params["corpus"], device, dist_info, resume)

    return common.distributed_main(RECIPE, PARAM_SCHEMA, train)


def run_lm(recipe: str, params: dict[str, Any], model_config: dict[str, Any], corpus_name: str, device: Any, dist_info: Any,
           resume: Any, *, init_weights: dict[str, Any] | None = None, extra_lineage: dict[str, Any] | None = None) -> str:
    """Train a GPT of ``model_config`` on ``corpus_name`` (lm_pretrain, or finetune from ``init_weights``)."""
    import torch.nn.functional as F

    from recipes import common, lm_data, lm_loop, lm_model
    from recipes.lm_presets import GPTConfig

    config = GPTConfig.from_dict(model_config)
    common.seed_everything(params["seed"])
    if not params.get("deterministic", True):
        import torch

        torch.use_deterministic_algorithms(False)
        torch.backends.cudnn.benchmark = True
    if device.type == "cuda":
        lm_model.choose_attention(params.get("attention", "auto"))
    corpus = lm_data.load_corpus(corpus_name)
    precision = common.choose_precision(device, bool(params["amp"]) and device.type == "cuda", "bfloat16")
    model = lm_model.GPT(config, activation_checkpointing=bool(params.get("activation_checkpointing"))).to(device)
    if resume is None and init_weights is not None:
        model.load_state_dict(init_weights)
    train_tokens = corpus.train.to(device)

    def batch(step_index: int, begin: int, end: int) -> tuple[Any, Any]:
        offsets = lm_data.window_offsets(params["seed"], step_index, params["batch_size"], len(corpus.train), config.context + 1)
        return lm_data.windows(train_tokens, offsets[begin:end], config.context)

    def loss(logits: Any, targets: Any) -> tuple[Any, Any]:
        total = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), reduction="sum")
        return total, (logits.detach().argmax(dim=-1) == targets).sum()

    task = lm_loop.LoopTask(
        recipe=recipe, params=params, model=model, model_config={**config.to_dict(), "kind": MODEL_KIND},
        batch=batch, loss=loss, evaluate=lambda m: evaluate_lm(m, corpus, config, params, precision, device),
        flops_per_sample=float(config.flops_per_token() * config.context), units_per_sample=config.context,
        counts_tokens=True, lineage={**corpus.lineage(), "corpus_slice": corpus_name, "attention": params.get("attention", "auto"),
                                     **(extra_lineage or {})},
        saved={"model_kind": MODEL_KIND, "tokenizer": dict(lm_data.TOKENIZER), "data": corpus.lineage()},
        compile=bool(params.get("compile")),
    )
    return lm_loop.train(task, resume=resume, dist_info=dist_info, device=device, precision=precision)


def finetune_lm(params: dict[str, Any], *, resume: Any, source_path: str | None, device: Any, dist_info: Any) -> int:
    """recipes.finetune on a GPT checkpoint: its architecture and weights, a fresh optimizer, ``corpus``."""
    from recipes import common

    lm_params = {**params, "eval_batches": 4, "dropout": 0.0}
    if resume is not None:
        model_config = dict(resume.state["model_config"])
        run_lm("finetune", lm_params, model_config, params["corpus"], device, dist_info, resume)
        return 0
    assert source_path is not None
    source = common.load_state(source_path)
    model_config = dict(source["model_config"])
    lineage = {
        "init_checkpoint_sha256": common.file_sha256(source_path),
        "init_checkpoint_step": int(source["step"]),
        "init_run_id": str(source["run_id"]),
        "init_recipe": str(source["recipe"]),
        "init_corpus": str(source.get("data", {}).get("corpus", "")),
        "init_corpus_sha256": str(source.get("data", {}).get("corpus_sha256", "")),
    }
    run_lm("finetune", lm_params, model_config, params["corpus"], device, dist_info, None,
           init_weights=source["model"], extra_lineage=lineage)
    return 0


def evaluate_lm_checkpoint(state: dict[str, Any], *, sha256: str, corpus_name: str, windows: int, device: Any, amp: bool) -> None:
    """recipes.evaluate on a GPT checkpoint: loss, perplexity and bits per byte on ``windows``
    fixed windows of the corpus's validation files (the LM corpora have no separate test split)."""
    import trainyard

    from recipes import common, lm_data, lm_model
    from recipes.lm_presets import GPTConfig

    config = GPTConfig.from_dict(state["model_config"])
    trained_on = state.get("data", {})
    corpus = lm_data.load_corpus(trained_on.get("corpus", "stdlib-top") if corpus_name == "trained" else corpus_name)
    model = lm_model.GPT(config).to(device)
    model.load_state_dict(state["model"])
    precision = common.choose_precision(device, amp and device.type == "cuda", "bfloat16")
    trainyard.record_lineage(**{
        "recipe": "evaluate", "evaluated_checkpoint_sha256": sha256, "evaluated_checkpoint_step": int(state["step"]),
        "evaluated_run_id": str(state["run_id"]), "evaluated_recipe": str(state["recipe"]),
        "evaluated_corpus": trained_on.get("corpus"), "evaluated_split": "val", "precision": precision.describe(),
        "dataset_matches_training": trained_on.get("corpus_sha256") == corpus.corpus_sha256, **corpus.lineage(),
    })
    trainyard.set_total_steps(1)
    chunk = 16
    metrics = evaluate_lm(model, corpus, config, {"batch_size": chunk, "eval_batches": max(1, windows // chunk)}, precision, device)
    metrics["val_tokens"] = float(max(1, windows // chunk) * chunk * config.context)
    trainyard.log(1, **metrics)
    print(f"evaluate: {corpus.name} val perplexity {metrics['val_perplexity']:.3f} ({metrics['val_bits_per_byte']:.3f} bits/byte)",
          flush=True)


def evaluate_lm(model: Any, corpus: Any, config: Any, params: dict[str, Any], precision: Any, device: Any) -> dict[str, float]:
    """Mean validation loss per byte and its perplexity, on fixed windows of the validation files."""
    import math

    import torch
    import torch.nn.functional as F

    from recipes import lm_data

    was_training = model.training
    model.eval()
    val = corpus.val.to(device)
    total = torch.zeros((), dtype=torch.float64, device=device)
    count = 0
    with torch.no_grad():
        for b in range(params["eval_batches"]):
            offsets = lm_data.window_offsets(lm_data.EVAL_SEED, b, params["batch_size"], len(corpus.val), config.context + 1)
            x, y = lm_data.windows(val, offsets, config.context)
            with precision.autocast():
                logits = model(x)
            total += F.cross_entropy(logits.float().flatten(0, 1), y.flatten(), reduction="sum").double()
            count += y.numel()
    model.train(was_training)
    mean = float(total) / count
    return {"val_loss": mean, "val_perplexity": math.exp(mean), "val_bits_per_byte": mean / math.log(2)}


if __name__ == "__main__":
    raise SystemExit(main())
