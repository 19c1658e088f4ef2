"""What the shipped recipes share: determinism, precision, checkpoints, the training loop.

Parameters are checked in :mod:`recipes.schema`; the data and models are in :mod:`recipes.digits`.

Determinism. ``seed_everything`` seeds Python, NumPy and torch, turns on
``torch.use_deterministic_algorithms(True)`` and pins torch to one CPU thread. The last one is
what makes CPU runs bit-for-bit repeatable: with several intra-op threads, reductions (matmul,
sum, the optimizer's foreach kernels) are split into per-thread partial sums whose number and
order depend on the thread count and scheduling, and floating-point addition is not
associative, so low bits differ between runs and between nodes with different core counts. One
thread also stops several ranks on one node from oversubscribing its cores. The models here
are tiny, so the cost is small. On CUDA, deterministic algorithms need
``CUBLAS_WORKSPACE_CONFIG``, which is set before CUDA starts.

Mixed precision (``amp``). On CUDA: autocast to bfloat16 (``amp_dtype="bfloat16"``, when the GPU
supports it) or to float16 with a ``GradScaler`` (``amp_dtype="float16"``, or bfloat16 asked
on a GPU without it). On CPU: autocast to bfloat16 whatever ``amp_dtype`` says, no scaler --
float16 autocast on CPU is slow emulation, and bfloat16 has float32's exponent range so there
is nothing for a scaler to do. Losses are always computed in float32.

Checkpoints hold everything a resume needs to continue bit for bit: model, optimizer, LR
scheduler, GradScaler, the RNG states of Python, NumPy, torch (and CUDA) of every rank, the step
and the data position, plus the params and model config. They load with
``torch.load(weights_only=True)``: only tensors and plain containers, no pickled code, which
matters because fine-tune and evaluate open checkpoints of other people's runs.

Preemption. After every optimizer step the loop asks ``trainyard.should_stop()`` (all-reduced
across ranks, so every rank stops at the same step); when set it writes a checkpoint at the
current step and returns, and the recipe exits 0. The agent, which sent the SIGTERM, marks the
attempt preempted.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import gc
import hashlib
import math
import os
import random
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
import trainyard
from torch import nn

from recipes.digits import NUM_CLASSES, BatchPlan, ModelConfig, Split, build_model, freeze_leading_layers, load_digits_data
from recipes.schema import ParamError, check_batch_layout, check_divisible, resolve_params

EVAL_BATCH = 512
CHECKPOINT_FORMAT = "trainyard-recipe-checkpoint/1"
TRAINING_RECIPES = ("digits_classifier", "finetune", "ddp_train")

# --- determinism ----------------------------------------------------------------------------


def seed_everything(seed: int) -> None:
    """Seed every RNG and make torch deterministic (see the module docstring for why)."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    _reseed(seed)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    torch.set_num_threads(1)


def derived_seed(*parts: int) -> int:
    """A well-mixed 63-bit seed from several ints (seed, rank, ...)."""
    return int(np.random.SeedSequence(list(parts)).generate_state(1, np.uint64)[0]) >> 1


def _reseed(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def capture_rng_state() -> dict[str, Any]:
    """The RNG states of Python, NumPy, torch and CUDA, as tensors and plain containers."""
    kind, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
    return {
        "python": random.getstate(),
        "numpy": {
            "kind": str(kind),
            "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        },
        "torch": torch.get_rng_state(),
        # This process's GPU only: get_rng_state_all() would open a context on every visible one.
        "cuda": [torch.cuda.get_rng_state()] if torch.cuda.is_available() else [],
    }


def restore_rng_state(state: Mapping[str, Any]) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    numpy_state = state["numpy"]
    np.random.set_state(
        (
            numpy_state["kind"],
            numpy_state["keys"].numpy().astype(np.uint32),
            numpy_state["pos"],
            numpy_state["has_gauss"],
            numpy_state["cached_gaussian"],
        )
    )
    torch.set_rng_state(state["torch"])
    cuda_states = state["cuda"]
    if cuda_states and torch.cuda.is_available():
        torch.cuda.set_rng_state(cuda_states[0])


# --- precision and devices -----------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Precision:
    """How forward passes run: autocast (or not) and whether a GradScaler is used."""

    device_type: str
    dtype: torch.dtype | None  # None: full float32
    use_scaler: bool

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device_type, dtype=self.dtype)

    def describe(self) -> str:
        if self.dtype is None:
            return "float32"
        name = str(self.dtype).removeprefix("torch.")
        return f"autocast {self.device_type} {name}" + (" + GradScaler" if self.use_scaler else "")


def choose_precision(device: torch.device, amp: bool, amp_dtype: str) -> Precision:
    if not amp:
        return Precision(device.type, None, use_scaler=False)
    if device.type == "cuda":
        if amp_dtype == "bfloat16" and torch.cuda.is_bf16_supported():
            return Precision("cuda", torch.bfloat16, use_scaler=False)
        return Precision("cuda", torch.float16, use_scaler=True)
    # CPU: bfloat16 whatever was asked (see the module docstring).
    return Precision(device.type, torch.bfloat16, use_scaler=False)


def choose_device(local_rank: int) -> torch.device:
    """``cuda:<local_rank>`` among the visible GPUs when there are any, else the CPU.

    The agent may narrow CUDA_VISIBLE_DEVICES to this process's GPU, in which case LOCAL_RANK
    can exceed the visible count: wrap around.
    """
    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
        return device
    return torch.device("cpu")


# --- checkpoint files ----------------------------------------------------------------------


def file_sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def save_state(path: str, state: Mapping[str, Any]) -> None:
    # Through a file object rather than a path: torch names the zip's inner folder after the
    # file, and the SDK's temp name is random, which would make identical states differ.
    with open(path, "wb") as fh:
        torch.save(dict(state), fh)


def load_state(path: str) -> dict[str, Any]:
    state = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(f"{path} is not a Trainyard recipe checkpoint ({CHECKPOINT_FORMAT})")
    return state


# --- distributed ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Dist:
    """This process's place in the job; collectives become no-ops when there is one process."""

    rank: int = 0
    world_size: int = 1
    enabled: bool = False

    def all_reduce_sum(self, tensor: torch.Tensor) -> None:
        if self.enabled:
            dist.all_reduce(tensor, op=dist.ReduceOp.SUM)

    def broadcast_object(self, obj: Any) -> Any:
        if not self.enabled:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def gather_objects(self, obj: Any) -> list[Any]:
        if not self.enabled:
            return [obj]
        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj)
        return out


def init_distributed(device: torch.device) -> Dist:
    """Join the process group from the torch.distributed environment the agent set."""
    if not dist.is_available():
        raise RuntimeError("this torch build has no torch.distributed")
    world = trainyard.world_size()
    rank = trainyard.rank()
    if "MASTER_ADDR" not in os.environ:
        if world > 1:
            raise RuntimeError(f"WORLD_SIZE={world} but MASTER_ADDR/MASTER_PORT are not set")
        return Dist()
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(
        backend=backend,
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(minutes=10),
        device_id=device if device.type == "cuda" else None,
    )
    return Dist(rank=rank, world_size=world, enabled=True)


# --- training ------------------------------------------------------------------------------


class WarmupCosine:
    """LR factor: linear warm-up, then cosine decay to ``floor``. A callable object, not a
    lambda, so LambdaLR's state_dict keeps its fields."""

    def __init__(self, total_steps: int, warmup_steps: int, floor: float = 0.05) -> None:
        self.total_steps = total_steps
        self.warmup_steps = warmup_steps
        self.floor = floor

    def __call__(self, step_index: int) -> float:
        if step_index < self.warmup_steps:
            return (step_index + 1) / (self.warmup_steps + 1)
        span = max(1, self.total_steps - self.warmup_steps)
        progress = min(1.0, (step_index - self.warmup_steps) / span)
        return self.floor + (1.0 - self.floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


@dataclasses.dataclass
class TrainSpec:
    recipe: str
    params: dict[str, Any]
    model_config: ModelConfig
    freeze: int = 0
    # Weights to start from when not resuming (fine-tune); ignored on resume.
    init_weights: dict[str, torch.Tensor] | None = None
    # Re-initialise the output layer after loading init_weights (fine-tune to new classes).
    reset_head: bool = False
    # Lineage beyond the data's: kept in every checkpoint, so a resume records it again.
    extra_lineage: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Resume:
    state: dict[str, Any]
    step: int
    sha256: str


def find_resume(recipe: str, dist_info: Dist) -> Resume | None:
    """This run's own newest valid checkpoint, loaded on rank 0 and shared with every rank.

    Only rank 0's node is sure to hold the run's checkpoints, hence the broadcast.
    """
    found: Resume | None = None
    if dist_info.rank == 0:
        latest = trainyard.latest_checkpoint()
        if latest is not None:
            state = load_state(latest.path)
            if state.get("recipe") != recipe:
                raise ValueError(f"checkpoint {latest.path} was written by recipe {state.get('recipe')!r}, not {recipe!r}")
            found = Resume(state=state, step=int(state["step"]), sha256=latest.sha256)
    result: Resume | None = dist_info.broadcast_object(found)
    return result


def evaluate_split(
    model: nn.Module, split: Split, precision: Precision, *, batch_size: int = EVAL_BATCH
) -> tuple[float, float, dict[int, tuple[int, int]]]:
    """(mean loss, accuracy, {class: (correct, count)}) of ``model`` on ``split``."""
    was_training = model.training
    model.eval()
    loss_sum = torch.zeros((), dtype=torch.float64, device=split.y.device)
    correct = torch.zeros(NUM_CLASSES, dtype=torch.int64, device=split.y.device)
    count = torch.zeros(NUM_CLASSES, dtype=torch.int64, device=split.y.device)
    with torch.no_grad():
        for start in range(0, len(split), batch_size):
            x = split.x[start : start + batch_size]
            y = split.y[start : start + batch_size]
            with precision.autocast():
                logits = model(x)
            loss_sum += F.cross_entropy(logits.float(), y, reduction="sum").double()
            hits = (logits.argmax(dim=1) == y).long()
            correct.index_add_(0, y, hits)
            count.index_add_(0, y, torch.ones_like(y))
    model.train(was_training)
    n = max(1, len(split))
    per_class = {c: (int(correct[c]), int(count[c])) for c in range(NUM_CLASSES) if int(count[c]) > 0}
    return float(loss_sum) / n, float(correct.sum()) / n, per_class


def _say(message: str) -> None:
    print(
        f"[{trainyard.run_id()} attempt {trainyard.attempt()} rank {trainyard.rank()}] {message}",
        flush=True,
    )


def train(spec: TrainSpec, *, resume: Resume | None, dist_info: Dist, device: torch.device) -> str:
    """Train per ``spec``, continuing from ``resume`` (see ``find_resume``) when given.

    Returns ``"completed"`` or ``"preempted"``.

    Keys logged every optimizer step: loss, accuracy (of the step's global batch), lr (used by
    the step), throughput (samples/s, wall-clock: the one value that is not reproducible);
    every ``eval_every`` steps and at the last: val_loss, val_accuracy.
    """
    p = spec.params
    steps: int = p["steps"]
    batch_size: int = p["batch_size"]
    grad_accum: int = p["grad_accum"]
    eval_every: int = p["eval_every"]
    world, rank = dist_info.world_size, dist_info.rank
    check_batch_layout(p, world)
    shard = batch_size // world
    micro = shard // grad_accum

    seed_everything(p["seed"])
    data = load_digits_data(p["classes"], device)
    plan = BatchPlan(seed=p["seed"], n_samples=len(data.train), batch_size=batch_size)
    precision = choose_precision(device, p["amp"], p["amp_dtype"])

    module = build_model(spec.model_config).to(device)
    if resume is None and spec.init_weights is not None:
        module.load_state_dict(spec.init_weights)
        if spec.reset_head:
            module.head.reset_parameters()
    freeze_leading_layers(module, spec.freeze)
    trainable = [param for param in module.parameters() if param.requires_grad]
    # One fused kernel on CUDA instead of a dozen per step; the CPU path (bit-exact resume) is unchanged.
    optimizer = torch.optim.AdamW(trainable, lr=p["lr"], weight_decay=p["weight_decay"], fused=device.type == "cuda" or None)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, WarmupCosine(steps, min(p["warmup_steps"], steps)))
    scaler = torch.amp.GradScaler("cuda", enabled=precision.use_scaler)
    # Ranks other than 0 get their own stream of dropout masks; rank 0 keeps the single-process
    # one, so a 1-rank job matches digits_classifier.
    if rank > 0:
        _reseed(derived_seed(p["seed"], rank))

    start = 0
    extra_lineage = dict(spec.extra_lineage)
    if resume is not None:
        state = resume.state
        module.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        scaler.load_state_dict(state["scaler"])
        rng_states = state["rng"]
        if len(rng_states) == world:
            restore_rng_state(rng_states[rank])
        else:
            # A different world size cannot continue the same random streams; a fresh,
            # deterministic stream per (seed, rank, step) is the honest fallback.
            _reseed(derived_seed(p["seed"], rank, resume.step))
        extra_lineage = dict(state.get("lineage", {}))
        start = resume.step
        _say(f"resuming from step {start} (checkpoint sha256 {resume.sha256[:12]})")

    lineage: dict[str, Any] = {
        "recipe": spec.recipe,
        "seed": p["seed"],
        "model": spec.model_config.to_dict(),
        "world_size": world,
        "device": device.type,
        "precision": precision.describe(),
        "deterministic": True,
        "torch_version": torch.__version__,
        "numpy_version": np.__version__,
    }
    lineage.update(data.lineage())
    lineage.update(extra_lineage)
    trainyard.record_lineage(**lineage)
    trainyard.set_total_steps(steps)

    net: nn.Module = module
    if dist_info.enabled:
        net = nn.parallel.DistributedDataParallel(module, device_ids=[device.index] if device.type == "cuda" else None)

    def stop_and_due(step: int) -> tuple[bool, bool]:
        flags = torch.tensor(
            [float(trainyard.should_stop()), float(trainyard.checkpoint_due(step))],
            dtype=torch.float64,
            device=device,
        )
        dist_info.all_reduce_sum(flags)
        return bool(flags[0] > 0), bool(flags[1] > 0)

    def save(step: int, metrics: Mapping[str, float]) -> None:
        rng_states = dist_info.gather_objects(capture_rng_state())
        epoch, batch = plan.position(step)
        with trainyard.checkpoint(step, metrics=metrics) as path:
            if rank != 0:
                return
            save_state(
                path,
                {
                    "format": CHECKPOINT_FORMAT,
                    "recipe": spec.recipe,
                    "run_id": trainyard.run_id(),
                    "step": step,
                    "epoch": epoch,
                    "batch_in_epoch": batch,
                    "params": p,
                    "model_config": spec.model_config.to_dict(),
                    "freeze": spec.freeze,
                    "model": module.state_dict(),
                    "optimizer": optimizer.state_dict(),
                    "scheduler": scheduler.state_dict(),
                    "scaler": scaler.state_dict(),
                    "rng": rng_states,
                    "world_size": world,
                    "data": data.lineage(),
                    "lineage": extra_lineage,
                    "metrics": dict(metrics),
                },
            )

    if start >= steps:
        _say(f"checkpoint is at step {start} of {steps}: nothing left to do")
        return "completed"
    if stop_and_due(start)[0]:
        _say("asked to stop before the first step; the last checkpoint stands")
        return "preempted"

    net.train()
    for step_index in range(start, steps):
        step = step_index + 1
        began = time.perf_counter()
        indices = plan.global_batch(step_index)[rank * shard : (rank + 1) * shard]
        batch_index = torch.from_numpy(indices).to(device)
        stats = torch.zeros(3, dtype=torch.float64, device=device)  # loss sum, correct, count
        optimizer.zero_grad(set_to_none=True)
        for m in range(grad_accum):
            part = batch_index[m * micro : (m + 1) * micro]
            x, y = data.train.x[part], data.train.y[part]
            last = m == grad_accum - 1
            sync: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
            if not last and isinstance(net, nn.parallel.DistributedDataParallel):
                sync = net.no_sync()  # gradients are all-reduced once, on the last micro-batch
            with sync:
                with precision.autocast():
                    logits = net(x)
                loss_sum = F.cross_entropy(logits.float(), y, reduction="sum")
                # Mean over this rank's shard; DDP then averages over ranks: the global mean.
                scaled: torch.Tensor = scaler.scale(loss_sum / shard)
                torch.autograd.backward(scaled)
            stats[0] += loss_sum.detach().double()
            stats[1] += (logits.detach().argmax(dim=1) == y).sum().double()
            stats[2] += y.numel()
        scaler.step(optimizer)
        scaler.update()
        lr_used = scheduler.get_last_lr()[0]
        scheduler.step()
        dist_info.all_reduce_sum(stats)
        elapsed = time.perf_counter() - began

        metrics: dict[str, float] = {
            "loss": float(stats[0] / stats[2]),
            "accuracy": float(stats[1] / stats[2]),
            "lr": float(lr_used),
            "throughput": batch_size / elapsed if elapsed > 0 else 0.0,
        }
        if rank == 0 and (step == steps or (eval_every > 0 and step % eval_every == 0)):
            val_loss, val_accuracy, _ = evaluate_split(module, data.val, precision)
            metrics["val_loss"] = val_loss
            metrics["val_accuracy"] = val_accuracy
        trainyard.log(step, **metrics)

        stop, due = stop_and_due(step)
        if due or stop or step == steps:
            save(step, {k: v for k, v in metrics.items() if k != "throughput"})
        if stop and step < steps:
            _say(f"stopping at step {step} of {steps} on request; checkpoint written")
            return "preempted"
    _say(f"completed {steps} steps")
    return "completed"


def run_main(body: Callable[[], int], name: str) -> int:
    """Run a recipe's body: parameter errors exit 2 with one readable line."""
    try:
        return body()
    except ParamError as exc:
        print(f"{name}: invalid parameters: {exc}", file=sys.stderr)
        return 2
    finally:
        trainyard.close()


def distributed_main(recipe: str, param_schema: Mapping[str, Any],
                     train_fn: Callable[[dict[str, Any], torch.device, Dist, Resume | None], object]) -> int:
    """A recipe's main under the one-process-per-device launcher: resolve and check its
    parameters, join the process group, find the checkpoint to resume from, then ``train_fn``."""

    def body() -> int:
        params = resolve_params(param_schema, trainyard.params())
        check_divisible(param_schema, params, world_size=trainyard.world_size())
        device = choose_device(trainyard.local_rank())
        with process_group(init_distributed(device)) as dist_info:
            train_fn(params, device, dist_info, find_resume(recipe, dist_info))
        return 0

    return run_main(body, recipe)


@contextlib.contextmanager
def process_group(dist_info: Dist) -> Iterator[Dist]:
    try:
        yield dist_info
        if dist_info.enabled and dist.is_initialized():
            # Leave together: a rank that tears its gloo pairs down while a peer is still
            # evaluating or writing the checkpoint can die in std::terminate at exit (SIGABRT)
            # after a successful run. Only on the normal path: after an error a peer may never come.
            dist.barrier()
    finally:
        if dist_info.enabled and dist.is_initialized():
            # destroy_process_group() drops only torch.distributed's own references: the DDP
            # wrapper's reducer holds the group too, inside reference cycles that only the cyclic
            # GC frees. Left to interpreter shutdown, gloo's worker threads are torn down with
            # the interpreter half gone and abort (SIGABRT, "terminate called without an active
            # exception"), as CI saw after a stop on SIGTERM. Free them while Python is alive.
            gc.collect()
            dist.destroy_process_group()
            gc.collect()
