"""A GPT-style decoder for lm_pretrain: learned positions, pre-LayerNorm blocks, causal
attention through ``scaled_dot_product_attention`` (fused kernels on GPUs), a 4x GELU MLP, the
output head tied to the token embedding. Sizes come from :mod:`recipes.lm_presets`."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from recipes.lm_presets import GPTConfig


def choose_attention(kernel: str) -> None:
    """Allow only ``kernel`` (lm_pretrain's ``attention``) for this process's CUDA attention;
    "auto" leaves PyTorch's own order.

    A kernel that cannot run the shape makes the first forward pass fail, naming why.
    """
    if kernel == "auto":
        return
    torch.backends.cuda.enable_flash_sdp(kernel == "flash")
    torch.backends.cuda.enable_cudnn_sdp(kernel == "cudnn")
    torch.backends.cuda.enable_mem_efficient_sdp(kernel == "efficient")
    torch.backends.cuda.enable_math_sdp(kernel == "math")


class Block(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        d = config.d_model
        self.n_head = config.n_head
        self.dropout = config.dropout
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.out = nn.Linear(4 * d, d)
        self.drop = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.n_head, d // self.n_head).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0)
        x = x + self.drop(self.proj(y.transpose(1, 2).reshape(b, t, d)))
        return x + self.drop(self.out(F.gelu(self.fc(self.ln2(x)))))


class GPT(nn.Module):
    def __init__(self, config: GPTConfig, *, activation_checkpointing: bool = False) -> None:
        super().__init__()
        self.config = config
        self.activation_checkpointing = activation_checkpointing
        self.tok = nn.Embedding(config.vocab_size, config.d_model)
        self.pos = nn.Embedding(config.context, config.d_model)
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.d_model)
        self.apply(self._init)
        for name, param in self.named_parameters():
            if name.endswith(("proj.weight", "out.weight")):  # GPT-2's scaled residual init
                nn.init.normal_(param, mean=0.0, std=0.02 / (2 * config.n_layer) ** 0.5)

    @staticmethod
    def _init(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """Logits (batch, time, vocab) for token ids (batch, time)."""
        t = idx.shape[1]
        positions = torch.arange(t, device=idx.device)
        x = self.drop(self.tok(idx) + self.pos(positions))
        for block in self.blocks:
            if self.activation_checkpointing and self.training:
                x = checkpoint(block, x, use_reentrant=False)
            else:
                x = block(x)
        return F.linear(self.ln_f(x), self.tok.weight)
