"""lm_pretrain's model sizes: presets, their parameter counts and training-memory estimates.

Standard library only, so the recipe's PARAM_SCHEMA (whose ``preset`` description lists these
figures for the template's parameter form) is read without torch.
"""

from __future__ import annotations

import dataclasses
from typing import Any

VOCAB_SIZE = 256  # byte-level tokenizer: one token per byte


@dataclasses.dataclass(frozen=True)
class GPTConfig:
    n_layer: int
    d_model: int
    n_head: int
    context: int
    vocab_size: int = VOCAB_SIZE
    dropout: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GPTConfig:
        return cls(**{f.name: data[f.name] for f in dataclasses.fields(cls)})

    def param_count(self) -> int:
        """Exactly what ``recipes.lm_model.GPT`` holds: embeddings (the output head is tied to the
        token embedding), per block two LayerNorms, qkv and output projections, a 4x MLP; a final LayerNorm."""
        d = self.d_model
        block = 2 * 2 * d + (3 * d * d + 3 * d) + (d * d + d) + (4 * d * d + 4 * d) + (4 * d * d + d)
        return self.vocab_size * d + self.context * d + self.n_layer * block + 2 * d

    def flops_per_token(self) -> int:
        """Training FLOPs per token, forward and backward: 6 x (non-embedding) parameters plus
        attention's 12 x layers x context x width (PaLM's appendix B formula)."""
        non_embedding = self.param_count() - self.context * self.d_model
        return 6 * non_embedding + 12 * self.n_layer * self.context * self.d_model

    def memory_estimate_bytes(self, micro_batch: int, *, half_activations: bool = True) -> int:
        """Weights, gradients and AdamW's two moments in float32 (16 bytes a parameter), plus
        activations without recomputation (Korthikanti et al. 2022: s*b*h*(34 + 5*a*s/h) bytes
        a layer at half precision; twice that at float32). An estimate, not a measurement."""
        s, b, h, a = self.context, micro_batch, self.d_model, self.n_head
        per_layer = s * b * h * 34 + 5 * a * s * s * b
        activations = self.n_layer * per_layer * (1 if half_activations else 2)
        logits = b * s * self.vocab_size * 4 * 2  # float32 logits and their gradient
        return 16 * self.param_count() + activations + logits


# name -> (config, the micro-batch its memory estimate assumes)
PRESETS: dict[str, tuple[GPTConfig, int]] = {
    "tiny": (GPTConfig(n_layer=2, d_model=64, n_head=4, context=64), 16),
    "small": (GPTConfig(n_layer=4, d_model=256, n_head=4, context=256), 16),
    "medium": (GPTConfig(n_layer=6, d_model=512, n_head=8, context=512), 16),
    "124m": (GPTConfig(n_layer=12, d_model=768, n_head=12, context=1024), 16),
}


def _millions(n: int) -> str:
    return f"{n / 1e6:.2f}M" if n < 10_000_000 else f"{n / 1e6:.0f}M"


def _size(n_bytes: int) -> str:
    return f"{n_bytes / 2**20:.0f} MiB" if n_bytes < 2**30 else f"{n_bytes / 2**30:.1f} GiB"


def preset_line(name: str) -> str:
    config, micro = PRESETS[name]
    return (
        f"{name}: {config.n_layer} layers x {config.d_model} wide, {config.n_head} heads, context {config.context}"
        f" = {_millions(config.param_count())} parameters, about"
        f" {_size(config.memory_estimate_bytes(micro))} to train at micro-batch {micro} (bf16 activations)"
    )


def preset_description() -> str:
    return "Model size (layers, width, heads, context below override it when non-zero). " + "; ".join(
        preset_line(name) for name in PRESETS
    ) + ". Memory is an estimate: weights, gradients and AdamW state in float32 plus activations."


def resolve_config(params: dict[str, Any]) -> GPTConfig:
    """The preset, with any of layers/width/heads/context the params set (non-zero) replacing its own."""
    base, _ = PRESETS[params["preset"]]
    overrides = {
        field: params[name]
        for name, field in (("layers", "n_layer"), ("width", "d_model"), ("heads", "n_head"), ("context", "context"))
        if params.get(name)
    }
    config = dataclasses.replace(base, dropout=float(params.get("dropout", 0.0)), **overrides)
    if config.d_model % config.n_head:
        from recipes.schema import ParamError

        raise ParamError(f"width ({config.d_model}) must be divisible by heads ({config.n_head})")
    return config
