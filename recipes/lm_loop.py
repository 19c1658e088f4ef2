"""The training loop of lm_pretrain and image_classifier: recipes.common's determinism,
precision, DDP, checkpoints and preemption around any model, plus the efficiency figures.

Every optimizer step logs ``loss``, ``lr``, ``throughput`` (samples/s), ``model_tflops``
(achieved model FLOP/s of the whole job), ``mfu`` (per device, over the device's dense peak
at the run's precision from ``PEAK_FLOPS``; not logged when the device is not in the table,
and lineage says why: a CPU has "unknown peak (CPU)"), ``peak_memory_mb`` (lineage names its
source: ``torch.cuda.max_memory_allocated`` or the process's ``ru_maxrss``), and for token
models ``tokens_per_s`` and ``tokens`` (cumulative). The portal turns ``tokens`` and the run's
energy into Wh per 1,000 tokens, and ``throughput`` x ``batch_size`` into Wh per 1,000 samples.
Wall-clock figures are the only values that differ between identical runs (``WALL_CLOCK``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import resource
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

import torch
import trainyard
from torch import nn

from recipes import common
from recipes.schema import check_batch_layout

WALL_CLOCK = frozenset({"throughput", "tokens_per_s", "model_tflops", "mfu", "peak_memory_mb"})
# Dense (no sparsity) peak FLOP/s per GPU: bfloat16 tensor cores, float32 without TF32. Matched
# by substring of torch.cuda.get_device_name, the most specific first.
PEAK_FLOPS: tuple[tuple[str, float, float], ...] = (
    ("H200", 989e12, 67e12),
    ("H100 PCIe", 756e12, 51e12),
    ("H100", 989e12, 67e12),
    ("A100", 312e12, 19.5e12),
    ("L40S", 362e12, 91.6e12),
    ("L4", 121e12, 30.3e12),
    ("A10", 125e12, 31.2e12),
    ("RTX 4090", 165e12, 82.6e12),
)


def device_peak(device: torch.device, precision: common.Precision) -> tuple[float | None, str]:
    """(peak FLOP/s of one device at this precision or None, the label lineage records)."""
    if device.type != "cuda":
        return None, f"unknown peak ({device.type.upper()}): MFU not computed"
    name = torch.cuda.get_device_name(device)
    for key, bf16, fp32 in PEAK_FLOPS:
        if key in name:
            half = precision.dtype is not None
            return (bf16 if half else fp32), f"{name}: dense {'bf16' if half else 'fp32'} peak {(bf16 if half else fp32) / 1e12:g} TFLOP/s"
    return None, f"unknown peak ({name} is not in the table): MFU not computed"


def peak_memory_mb(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss is bytes on macOS, KiB on Linux
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale / 2**20


def memory_label(device: torch.device) -> str:
    if device.type == "cuda":
        return "torch.cuda.max_memory_allocated (this rank's GPU)"
    return "ru_maxrss (peak resident memory of rank 0's process, CPU)"


@dataclasses.dataclass
class LoopTask:
    """What the loop needs from a recipe. ``batch(step_index, start, stop)`` gives rows
    [start, stop) of the step's global batch, on the device; ``loss(logits, targets)`` the summed
    float32 loss and the count of correct predictions; ``evaluate(model)`` validation metrics."""

    recipe: str
    params: dict[str, Any]
    model: nn.Module
    model_config: dict[str, Any]
    batch: Callable[[int, int, int], tuple[torch.Tensor, torch.Tensor]]
    loss: Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]
    evaluate: Callable[[nn.Module], dict[str, float]]
    flops_per_sample: float
    units_per_sample: int = 1  # targets per sample: tokens per sequence, or 1
    counts_tokens: bool = False
    lineage: dict[str, Any] = dataclasses.field(default_factory=dict)
    saved: dict[str, Any] = dataclasses.field(default_factory=dict)  # extra checkpoint contents
    compile: bool = False


class _State:
    def __init__(self, task: LoopTask, dist_info: common.Dist, device: torch.device, precision: common.Precision) -> None:
        p = task.params
        self.task, self.dist, self.device, self.precision = task, dist_info, device, precision
        self.steps: int = p["steps"]
        trainable = [param for param in task.model.parameters() if param.requires_grad]
        # One fused kernel on CUDA instead of a dozen per step; the CPU path (bit-exact resume) is unchanged.
        self.optimizer = torch.optim.AdamW(trainable, lr=p["lr"], weight_decay=p["weight_decay"], fused=device.type == "cuda" or None)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, common.WarmupCosine(self.steps, min(p["warmup_steps"], self.steps))
        )
        self.scaler = torch.amp.GradScaler("cuda", enabled=precision.use_scaler)

    def restore(self, resume: common.Resume) -> None:
        state = resume.state
        self.task.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.scaler.load_state_dict(state["scaler"])
        if len(state["rng"]) == self.dist.world_size:
            common.restore_rng_state(state["rng"][self.dist.rank])
        else:
            common._reseed(common.derived_seed(self.task.params["seed"], self.dist.rank, resume.step))

    def save(self, step: int, metrics: Mapping[str, float]) -> None:
        rng_states = self.dist.gather_objects(common.capture_rng_state())
        with trainyard.checkpoint(step, metrics=metrics) as path:
            if self.dist.rank != 0:
                return
            common.save_state(path, {
                "format": common.CHECKPOINT_FORMAT, "recipe": self.task.recipe, "run_id": trainyard.run_id(),
                "step": step, "params": self.task.params, "model_config": self.task.model_config,
                "model": self.task.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(), "scaler": self.scaler.state_dict(),
                "rng": rng_states, "world_size": self.dist.world_size, "lineage": self.task.lineage,
                "metrics": dict(metrics), **self.task.saved,
            })

    def stop_and_due(self, step: int) -> tuple[bool, bool]:
        flags = torch.tensor([float(trainyard.should_stop()), float(trainyard.checkpoint_due(step))],
                             dtype=torch.float64, device=self.device)
        self.dist.all_reduce_sum(flags)
        return bool(flags[0] > 0), bool(flags[1] > 0)


def _step(state: _State, net: nn.Module, step_index: int) -> tuple[torch.Tensor, float]:
    """One optimizer step; (all-reduced [loss sum, correct, targets], the lr it used)."""
    p, dist_info = state.task.params, state.dist
    shard = p["batch_size"] // dist_info.world_size
    micro = shard // p["grad_accum"]
    stats = torch.zeros(3, dtype=torch.float64, device=state.device)
    state.optimizer.zero_grad(set_to_none=True)
    for m in range(p["grad_accum"]):
        begin = dist_info.rank * shard + m * micro
        x, y = state.task.batch(step_index, begin, begin + micro)
        sync: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
        if m < p["grad_accum"] - 1 and isinstance(net, nn.parallel.DistributedDataParallel):
            sync = net.no_sync()  # gradients are all-reduced once, on the last micro-batch
        with sync:
            with state.precision.autocast():
                logits = net(x)
            loss_sum, correct = state.task.loss(logits, y)
            # Mean over this rank's targets; DDP averages over ranks: the global mean.
            torch.autograd.backward(state.scaler.scale(loss_sum / (shard * state.task.units_per_sample)))
        stats[0] += loss_sum.detach().double()
        stats[1] += correct.double()
        stats[2] += y.numel()
    state.scaler.step(state.optimizer)
    state.scaler.update()
    lr_used = state.scheduler.get_last_lr()[0]
    state.scheduler.step()
    dist_info.all_reduce_sum(stats)
    return stats, float(lr_used)


def _efficiency(task: LoopTask, elapsed: float, step: int, world: int, peak: float | None, device: torch.device) -> dict[str, float]:
    batch = task.params["batch_size"]
    flops = task.flops_per_sample * batch
    out = {"throughput": batch / elapsed, "model_tflops": flops / elapsed / 1e12, "peak_memory_mb": peak_memory_mb(device)}
    if peak is not None:
        out["mfu"] = flops / world / elapsed / peak
    if task.counts_tokens:
        out["tokens_per_s"] = batch * task.units_per_sample / elapsed
        out["tokens"] = float(step * batch * task.units_per_sample)
    return out


def train(task: LoopTask, *, resume: common.Resume | None, dist_info: common.Dist, device: torch.device,
          precision: common.Precision) -> str:
    """Train ``task`` (model already seeded and built), continuing from ``resume``; "completed" or "preempted"."""
    p = task.params
    check_batch_layout(p, dist_info.world_size)
    state = _State(task, dist_info, device, precision)
    start = 0
    if resume is not None:
        state.restore(resume)
        task.lineage = dict(resume.state.get("lineage", task.lineage))
        start = resume.step
        common._say(f"resuming from step {start} (checkpoint sha256 {resume.sha256[:12]})")
    elif dist_info.rank > 0:
        common._reseed(common.derived_seed(p["seed"], dist_info.rank))
    peak, peak_label = device_peak(device, precision)
    trainyard.record_lineage(**{
        **task.lineage, "recipe": task.recipe, "seed": p["seed"], "model": task.model_config,
        "world_size": dist_info.world_size, "device": device.type, "precision": precision.describe(),
        "mfu_peak": peak_label, "model_flops_per_sample": task.flops_per_sample,
        "peak_memory_source": memory_label(device), "torch_compile": task.compile, "torch_version": torch.__version__,
        "deterministic": torch.are_deterministic_algorithms_enabled(),
    })
    trainyard.set_total_steps(state.steps)
    net: nn.Module = task.model
    if dist_info.enabled:
        net = nn.parallel.DistributedDataParallel(net, device_ids=[device.index] if device.type == "cuda" else None)
    if task.compile:
        net = torch.compile(net)  # type: ignore[assignment]
    if start >= state.steps:
        return "completed"
    if state.stop_and_due(start)[0]:
        return "preempted"
    net.train()
    for step_index in range(start, state.steps):
        step = step_index + 1
        began = time.perf_counter()
        stats, lr = _step(state, net, step_index)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        elapsed = max(time.perf_counter() - began, 1e-9)
        metrics = {"loss": float(stats[0] / stats[2]), "lr": lr}
        if not task.counts_tokens:
            metrics["accuracy"] = float(stats[1] / stats[2])
        metrics.update(_efficiency(task, elapsed, step, dist_info.world_size, peak, device))
        if dist_info.rank == 0 and (step == state.steps or (p["eval_every"] > 0 and step % p["eval_every"] == 0)):
            metrics.update(task.evaluate(task.model))
        trainyard.log(step, **metrics)
        stop, due = state.stop_and_due(step)
        if due or stop or step == state.steps:
            state.save(step, {k: v for k, v in metrics.items() if k not in WALL_CLOCK})
        if stop and step < state.steps:
            common._say(f"stopping at step {step} of {state.steps} on request; checkpoint written")
            return "preempted"
    common._say(f"completed {state.steps} steps")
    return "completed"
