"""What the 124m GPT could reach on one GPU without the recipe around it: where lm_gpu's MFU stands.

Two measurements, both on GPU 0 with bf16 autocast:
1. ``scaled_dot_product_attention`` forward and backward on the 124m shape (batch x 12 heads x
   1,024 x 64, causal), per kernel PyTorch offers (flash, cuDNN, memory-efficient) and PyTorch's
   own choice: ms per call and attention TFLOP/s.
2. The same model as lm_pretrain (recipes.lm_model.GPT, compiled, fused AdamW) in a bare loop on
   random tokens, no SDK and no logging: tokens/s and MFU with one host synchronisation per step
   (as the recipe has, to time a step and read its loss) and with none.

Writes bench/results/lm_ceiling.json. Needs a GPU: without one it says so and exits 0 (make bench
skips it). About 40 s on an H200, most of it compilation.

    python bench/lm_ceiling.py
    python bench/lm_ceiling.py --batch-size 64 --steps 20
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(1, str(ROOT / "sdk"))  # recipes import the SDK, installed nowhere on a lent GPU machine

from bench._results import write_result  # noqa: E402

KERNELS = ("flash", "cudnn", "efficient")


def attention(batch: int, repeats: int) -> dict[str, Any]:
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backends = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
                "efficient": SDPBackend.EFFICIENT_ATTENTION}
    heads, context, dim = 12, 1024, 64
    q, k, v = (torch.randn(batch, heads, context, dim, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    grad = torch.randn_like(q)
    flops = 4 * batch * heads * context * context * dim / 2 * 3.5  # causal: half the square; backward 2.5x forward
    out: dict[str, Any] = {}
    for name in (*KERNELS, "auto"):
        allowed = [backends[name]] if name != "auto" else [*backends.values(), SDPBackend.MATH]
        try:
            with sdpa_kernel(allowed):
                for i in range(repeats + 5):
                    if i == 5:  # after warm-up
                        torch.cuda.synchronize()
                        began = time.perf_counter()
                    F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(grad)
                torch.cuda.synchronize()
        except RuntimeError as exc:  # a kernel this GPU or shape does not have
            out[name] = {"error": str(exc).splitlines()[0][:200]}
            print(f"attention {name}: not available: {out[name]['error']}", flush=True)
            continue
        seconds = (time.perf_counter() - began) / repeats
        out[name] = {"ms": seconds * 1e3, "tflops": flops / seconds / 1e12}
        print(f"attention {name}: {seconds * 1e3:.3f} ms forward + backward, {flops / seconds / 1e12:.0f} TFLOP/s", flush=True)
    return out


def bare_loop(batch: int, steps: int, warmup: int, peak: float | None) -> dict[str, Any]:
    import torch
    import torch.nn.functional as F

    from recipes.lm_model import GPT
    from recipes.lm_presets import resolve_config

    config = resolve_config({"preset": "124m", "layers": 0, "width": 0, "heads": 0, "context": 0, "dropout": 0.0})
    torch.manual_seed(0)
    model = GPT(config).cuda()
    net = torch.compile(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
    tokens = torch.randint(0, config.vocab_size, (4_000_000,), device="cuda")
    span = torch.arange(config.context + 1, device="cuda")

    def step() -> torch.Tensor:
        rows = tokens[torch.randint(0, len(tokens) - span.numel(), (batch, 1), device="cuda") + span]
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cuda", torch.bfloat16):
            logits = net(rows[:, :-1])
        loss = F.cross_entropy(logits.float().flatten(0, 1), rows[:, 1:].flatten(), reduction="mean")
        loss.backward()
        optimizer.step()
        return loss.detach()

    began = time.perf_counter()
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    out: dict[str, Any] = {"warmup_s": time.perf_counter() - began}
    for mode in ("sync_each_step", "no_sync"):
        began = time.perf_counter()
        for _ in range(steps):
            loss = step()
            if mode == "sync_each_step":
                float(loss)
        torch.cuda.synchronize()
        per_step = (time.perf_counter() - began) / steps
        tokens_per_s = batch * config.context / per_step
        mfu = tokens_per_s * config.flops_per_token() / peak if peak else None
        out[mode] = {"step_ms": per_step * 1e3, "tokens_per_s": tokens_per_s, "mfu": mfu}
        shown = f"MFU {mfu:.1%}" if mfu is not None else "MFU unknown (GPU not in the table)"
        print(f"bare loop, {mode.replace('_', ' ')}: {per_step * 1e3:.1f} ms per step, {tokens_per_s:,.0f} tokens/s, {shown}",
              flush=True)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch-size", type=int, default=32, help="sequences per step")
    parser.add_argument("--steps", type=int, default=30, help="timed steps per mode")
    parser.add_argument("--warmup", type=int, default=12, help="untimed steps first (compilation)")
    args = parser.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("lm_ceiling: no GPU (torch sees no CUDA device): nothing to measure", flush=True)
        return 0
    from recipes import common, lm_loop

    device = torch.device("cuda", 0)
    peak, label = lm_loop.device_peak(device, common.choose_precision(device, True, "bfloat16"))
    print(f"lm_ceiling on {torch.cuda.get_device_name(0)}, torch {torch.__version__}, batch {args.batch_size}: {label}", flush=True)
    result = {"device": torch.cuda.get_device_name(0), "torch_version": torch.__version__, "batch_size": args.batch_size,
              "mfu_peak": label, "attention": attention(args.batch_size, 20),
              "bare_loop": bare_loop(args.batch_size, args.steps, args.warmup, peak)}
    print(f"wrote {write_result('lm_ceiling', result)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
