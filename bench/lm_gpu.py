"""lm_pretrain at the 124M preset on one GPU: tokens/s, MFU and joules per 1,000 tokens.

Runs ``python -m recipes.lm_pretrain`` as a job would (the SDK's run directory, no portal) on
GPU 0 for a fixed number of steps, samples GPU 0's NVML energy counter every 50 ms meanwhile,
and measures between the end of step ``--skip`` (start-up, compilation and warm-up excluded) and
the end of the step before the last (whose record waits for the final evaluation): tokens/s from
the steps' log times, MFU as model FLOP/s (the recipe's 6N + 12LTd per token) over the dense bf16
peak in recipes.lm_loop.PEAK_FLOPS, and J per 1,000 tokens from the energy counter; also the
median step's tokens/s and MFU, and the longest gap between two steps' records. Writes
bench/results/lm_gpu.json (``--cpu``: lm_gpu-cpu.json, the tiny preset, labelled CPU, no energy
and no MFU). The goal on one H100 is 40% MFU at bf16.

    python bench/lm_gpu.py                      # 124m, bf16, torch.compile
    python bench/lm_gpu.py --no-compile --steps 30
    python bench/lm_gpu.py --cpu                # a dry run anywhere
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(1, str(ROOT / "sdk"))  # recipes.common imports the SDK, installed nowhere on a lent GPU machine

from agents.devices import Nvml  # noqa: E402
from bench._results import write_result  # noqa: E402


class EnergySampler(threading.Thread):
    """GPU ``index``'s cumulative energy (J) every ``interval`` s, as (time, joules)."""

    def __init__(self, nvml: Nvml, index: int = 0, interval: float = 0.05) -> None:
        super().__init__(daemon=True)
        self.nvml, self.index, self.interval = nvml, index, interval
        self.samples: list[tuple[float, float]] = []
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            for reading in self.nvml.read():
                if reading.index == self.index and reading.energy_j is not None:
                    self.samples.append((time.time(), reading.energy_j))
            self.done.wait(self.interval)

    def at(self, when: float) -> float | None:
        """The counter at ``when``, interpolated between the samples around it."""
        for (t0, e0), (t1, e1) in zip(self.samples, self.samples[1:], strict=False):
            if t0 <= when <= t1:
                return e0 + (e1 - e0) * ((when - t0) / (t1 - t0) if t1 > t0 else 0.0)
        return None


def run_recipe(params: dict[str, Any], workdir: Path, *, cpu: bool, timeout: float) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINYARD_")}
    env.update(
        PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "sdk")]), TRAINYARD_RUN_ID="1", TRAINYARD_ATTEMPT="1",
        TRAINYARD_RUN_DIR=str(workdir / "run"), TRAINYARD_CHECKPOINT_DIR=str(workdir / "checkpoints"),
        TRAINYARD_PARAMS=json.dumps(params), TRAINYARD_CHECKPOINT_EVERY_STEPS="0", TRAINYARD_CHECKPOINT_EVERY_SECONDS="0",
        TRAINYARD_CHECKPOINT_KEEP="1", RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", CUDA_VISIBLE_DEVICES="" if cpu else "0",
    )
    return subprocess.run([sys.executable, "-m", "recipes.lm_pretrain"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


def figures(workdir: Path, sampler: EnergySampler | None, skip: int, peak: float | None) -> dict[str, Any]:
    records = [json.loads(line) for line in (workdir / "run" / "metrics.jsonl").read_text().splitlines()]
    lineage: dict[str, Any] = {}
    for line in (workdir / "run" / "events.jsonl").read_text().splitlines():
        event = json.loads(line)
        if event["type"] == "lineage":
            lineage.update(event["data"])
    # The last step is left out: its record is written after the run's final evaluation.
    first, last = records[skip - 1], records[-2]
    tokens = last["metrics"]["tokens"] - first["metrics"]["tokens"]
    seconds = last["time"] - first["time"]
    tokens_per_s = tokens / seconds
    flops_per_token = lineage["model_flops_per_sample"] / lineage["model"]["context"]
    gaps = [b["time"] - a["time"] for a, b in zip(records[skip - 1:-2], records[skip:-1], strict=True)]
    median_step = statistics.median(r["metrics"]["tokens_per_s"] for r in records[skip:-1])
    out: dict[str, Any] = {
        "steps_measured": last["step"] - first["step"], "tokens_measured": tokens, "seconds": seconds,
        "tokens_per_s": tokens_per_s, "model_tflops": flops_per_token * tokens_per_s / 1e12,
        "median_step_tokens_per_s": median_step, "median_step_mfu": flops_per_token * median_step / peak if peak else None,
        "step_seconds_median": statistics.median(gaps), "step_seconds_max": max(gaps),
        "final_step_seconds": records[-1]["time"] - records[-2]["time"],
        "mfu": flops_per_token * tokens_per_s / peak if peak else None, "mfu_peak": lineage["mfu_peak"],
        "peak_memory_mb": max(r["metrics"]["peak_memory_mb"] for r in records), "peak_memory_source": lineage["peak_memory_source"],
        "final_loss": last["metrics"]["loss"], "precision": lineage["precision"], "model": lineage["model"],
        "parameters_flops_per_token": flops_per_token, "j_per_1k_tokens": None, "energy": "not measured (no NVML energy counter)",
    }
    if sampler is not None:
        e0, e1 = sampler.at(first["time"]), sampler.at(last["time"])
        if e0 is not None and e1 is not None:
            out["j_per_1k_tokens"] = (e1 - e0) / tokens * 1000
            out["mean_power_w"] = (e1 - e0) / seconds
            out["energy"] = "NVML total energy counter of GPU 0"
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cpu", action="store_true", help="a dry run on the CPU at the tiny preset")
    parser.add_argument("--preset", default=None, help="default: 124m (tiny with --cpu)")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--skip", type=int, default=15, help="steps left out of the figures (start-up, compile, warm-up)")
    parser.add_argument("--batch-size", type=int, default=32, help="sequences per step")
    parser.add_argument("--grad-accum", type=int, default=1)
    parser.add_argument("--no-compile", action="store_true")
    parser.add_argument("--attention", default="auto", help="lm_pretrain's CUDA attention kernel: auto, flash, cudnn, efficient")
    parser.add_argument("--deterministic", action="store_true", help="keep the recipe's deterministic kernels (slower on GPUs)")
    parser.add_argument("--timeout", type=float, default=540)
    args = parser.parse_args()
    nvml = Nvml()
    cpu = args.cpu or not nvml.available
    if cpu and not args.cpu:
        print("lm_gpu: no GPU (NVML shows none): a CPU dry run at the tiny preset", flush=True)
    preset = args.preset or ("tiny" if cpu else "124m")
    steps = min(args.steps, 30) if cpu else args.steps
    skip = min(args.skip, steps - 2)
    params = {"preset": preset, "steps": steps, "batch_size": args.batch_size, "grad_accum": args.grad_accum, "lr": 0.0006,
              "warmup_steps": 5, "eval_every": 0, "eval_batches": 1, "amp": True, "compile": not (cpu or args.no_compile),
              "deterministic": args.deterministic, "attention": args.attention}

    peak = None
    device_name = "CPU"
    if not cpu:
        import torch

        from recipes import common, lm_loop

        device_name = torch.cuda.get_device_name(0)
        peak, _ = lm_loop.device_peak(torch.device("cuda", 0), common.choose_precision(torch.device("cuda", 0), True, "bfloat16"))
    sampler = None if cpu else EnergySampler(nvml)
    with tempfile.TemporaryDirectory(prefix="lm-gpu-") as tmp:
        if sampler is not None:
            sampler.start()
        began = time.perf_counter()
        proc = run_recipe(params, Path(tmp), cpu=cpu, timeout=args.timeout)
        wall = time.perf_counter() - began
        if sampler is not None:
            sampler.done.set()
            sampler.join()
        if proc.returncode != 0:
            print(proc.stdout[-4000:], proc.stderr[-4000:], sep="\n", file=sys.stderr)
            return 1
        result = {"device": device_name, "preset": preset, "params": params, "wall_s": wall,
                  **figures(Path(tmp), sampler, skip, peak)}
    mfu = f"{result['mfu']:.1%}" if result["mfu"] is not None else result["mfu_peak"]
    joules = f"{result['j_per_1k_tokens']:.2f} J" if result["j_per_1k_tokens"] is not None else result["energy"]
    print(f"lm_pretrain {preset} on {device_name} ({result['precision']}, compile={params['compile']}): "
          f"{result['tokens_per_s']:,.0f} tokens/s, {result['model_tflops']:.3g} model TFLOP/s, MFU {mfu}, "
          f"{joules} per 1,000 tokens, peak memory {result['peak_memory_mb']:,.0f} MiB over {result['steps_measured']} steps")
    median_mfu = f", MFU {result['median_step_mfu']:.1%}" if result["median_step_mfu"] is not None else ""
    print(f"  median step {result['median_step_tokens_per_s']:,.0f} tokens/s{median_mfu}; steps {result['step_seconds_median']:.3f} s"
          f" apart (median), {result['step_seconds_max']:.3f} s at most; the last step with the final evaluation"
          f" {result['final_step_seconds']:.3f} s, left out")
    path = write_result("lm_gpu-cpu" if cpu else "lm_gpu", result)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
