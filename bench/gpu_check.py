"""GPU check: the whole stack on one machine, ddp-train on 1..N of its GPUs, per-GPU figures.

Starts a throwaway stack (bench/_gpu_stack.py: own folder, SQLite, embedded Redis, web, Celery
worker and beat, one agent offering every GPU NVML shows), then submits ddp-train as alice with
nodes=1 and devices_per_node=k for k = 1..N, one after another, the same steps and global batch
each time, and prints per k: wall time, training steps/s and samples/s, scaling efficiency against
k=1, each device's mean utilization and energy, total Wh and Wh per step, and whether the energy
was measured. On GPUs it checks that every GPU of every run was busy (mean utilization over the
training at least --min-util). Exits 1 if a run fails (with its reason and last log lines) or a
check does not hold, 2 if there is no GPU and --require-gpu was given.

Without a GPU (no libnvidia-ml.so.1, or --cpu) it is a dry run on --slots CPU slots (gloo): the
same stack, runs and table, labelled as CPU figures. Writes bench/results/gpu_check.json (the dry
run: gpu_check-cpu.json) with the commit, devices, driver and date.

    python bench/gpu_check.py                    # every GPU; a CPU dry run where there is none
    python bench/gpu_check.py --require-gpu      # a GPU machine: fail rather than fall back
    python bench/gpu_check.py --cpu --slots 2    # the dry run, anywhere
    python bench/gpu_check.py --template lm-pretrain   # the 124M GPT, bf16: a load that fills a GPU

ddp-train on digits is mostly per-step overhead on a large GPU (an H100 ran it 12-19% busy);
lm-pretrain keeps one busy, so the busy check means something there.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

from _gpu_stack import Stack, StackError  # noqa: E402

from agents.devices import Nvml, cpu_inventory  # noqa: E402

TAGS = {"task": "classification", "dataset": "sklearn-digits", "candidate": "baseline", "family": "gpu-check"}
MAX_BATCH = 840  # lcm(1..8), and under the ~1,257 training samples of all ten digits
LM_BATCH = 32  # lm-pretrain sequences per step, before rounding up to a multiple of every k
# Percent each GPU must be busy: the fault caught is a GPU left at 0 while the run holds it. Digits
# cannot fill a large GPU (an H100 read 12-19%, launch-bound), so its floor only tells 0 from working.
DEFAULT_MIN_UTIL = {"ddp-train": 5.0, "lm-pretrain": 25.0}
J_PER_WH = 3600.0


class CheckFailed(Exception):
    """A run failed or a figure could not be read: the message says which and why."""


@dataclass
class Hardware:
    kind: str  # "gpu" or "cpu"
    count: int
    model: str
    driver: str = ""
    cuda_driver: str = ""
    devices: list[dict[str, Any]] = field(default_factory=list)
    fallback_reason: str = ""  # why a CPU dry run, when no GPU was asked away


@dataclass
class Result:
    k: int
    run_id: int
    devices: list[int]
    wall_s: float  # the attempt, as the server saw it: process start, data, NCCL/gloo init, training, exit
    train_s: float  # from the first to the last step the job logged
    steps_per_s: float  # steps 2..N over train_s: start-up and the first step left out
    samples_per_s: float
    efficiency: float | None = None  # steps/s(k) / (k x steps/s(1)): strong scaling, same global batch
    util: dict[int, float | None] = field(default_factory=dict)  # mean % over the training, per device
    util_source: str = ""
    device_wh: dict[int, float | None] = field(default_factory=dict)
    device_wh_source: str = ""
    total_wh: float = 0.0  # the portal's figure (the run's EnergySample rows)
    bench_total_wh: float | None = None  # the bench's own NVML counters over the attempt, to compare
    wh_per_step: float = 0.0
    energy: str = ""  # measured (NVML / RAPL) or estimated
    world_size: int | None = None  # from the run's lineage
    lineage: dict[str, Any] = field(default_factory=dict)


# --- hardware and sampling --------------------------------------------------------------------

def detect(args: argparse.Namespace) -> tuple[Hardware, Nvml | None]:
    if not args.cpu:
        nvml = Nvml()
        if nvml.available:
            devices = [dict(d) for d in nvml.inventory()][: args.gpus or None]
            models = sorted({str(d["model"]) for d in devices})
            return Hardware("gpu", len(devices), " + ".join(models), nvml.driver_version(), nvml.cuda_driver_version(),
                            devices), nvml
        reason = ("TRAINYARD_AGENT_NO_GPU is set" if os.environ.get("TRAINYARD_AGENT_NO_GPU")
                  else "NVML (libnvidia-ml.so.1) is absent or shows no GPU")
        if args.require_gpu:
            raise SystemExit(f"gpu_check: no GPU: {reason}; --require-gpu was given, so no CPU dry run")
        print(f"gpu_check: no GPU ({reason}): a CPU dry run on {args.slots} slots instead, NOT GPU figures", flush=True)
    else:
        reason = "--cpu"
    slots = cpu_inventory(args.slots)
    return Hardware("cpu", args.slots, str(slots[0]["model"]), devices=[dict(d) for d in slots], fallback_reason=reason), None


class Sampler(threading.Thread):
    """Per-device readings while the runs go: GPUs through NVML itself (utilization and the energy
    counter), CPU slots through the nodes API (the agent's heartbeat readings)."""

    def __init__(self, stack: Stack, token: str, nvml: Nvml | None, interval: float) -> None:
        super().__init__(name="sampler", daemon=True)
        self.stack, self.token, self.nvml, self.interval = stack, token, nvml, interval
        self.samples: list[tuple[float, int, float | None, float | None]] = []  # (unix time, device, util %, energy J)
        self.errors = 0
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.wait(self.interval):
            now = time.time()
            try:
                self.samples.extend((now, *reading) for reading in self._read())
            except (OSError, StackError, KeyError, ValueError):
                self.errors += 1  # one missed reading; the mean is over those taken

    def _read(self) -> list[tuple[int, float | None, float | None]]:
        if self.nvml is not None:
            return [(r.index, r.utilization, r.energy_j) for r in self.nvml.read()]
        page = self.stack.api("GET", "/api/v1/nodes/?pool=local", token=self.token)
        node = next((n for n in page["results"] if n["hostname"] == self.stack.node_name), None)
        return [(int(d["index"]), d["utilization"], None) for d in node["devices"]] if node else []

    def window(self, device: int, start: float, end: float) -> list[tuple[float, float | None, float | None]]:
        return [(t, u, e) for (t, d, u, e) in list(self.samples) if d == device and start <= t <= end]


# --- one run ----------------------------------------------------------------------------------

def _utc(text: str | None) -> float:
    if not text:
        raise CheckFailed("a finished attempt has no start or end time")
    moment = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)  # SQLite holds UTC without an offset
    return moment.timestamp()


def _failure(stack: Stack, token: str, run: dict[str, Any]) -> str:
    lines = [f"run {run['id']} {run['status']}: {run.get('status_reason') or '(no reason given)'}"]
    for attempt in run.get("attempts", []):
        reason = (attempt["reason"] or "").splitlines()
        lines.append(f"  attempt {attempt['number']} {attempt['status']} on {', '.join(attempt['nodes'])}: "
                     f"exit {attempt['exit_code']}; {reason[0] if reason else ''}")
    text, after = "", 0
    for _ in range(50):
        page = stack.api("GET", f"/api/v1/runs/{run['id']}/logs/?limit=1000&after={after}", token=token)
        text += "".join(chunk["text"] for chunk in page["chunks"])
        after = page["next"]
        if not page["more"]:
            break
    tail = text.splitlines()[-15:]
    lines += ["  last log lines:", *(f"    {line}" for line in tail)] if tail else ["  (no log lines)"]
    return "\n".join(lines)


def submit_and_wait(stack: Stack, token: str, template: str, k: int, params: dict[str, Any], timeout: float) -> dict[str, Any]:
    tags = TAGS if template == "ddp-train" else {**TAGS, "task": "language-modeling", "dataset": "python-stdlib"}
    body = {"project": "vision/digits", "template": template, "name": f"gpu-check k={k}", "params": params, "tags": tags,
            "resources": {"nodes": 1, "devices_per_node": k}}
    run_id = int(stack.api("POST", "/api/v1/runs/", body, token=token)["id"])

    def finished() -> dict[str, Any] | None:
        run: dict[str, Any] = stack.api("GET", f"/api/v1/runs/{run_id}/", token=token)
        return run if run["status"] in ("succeeded", "failed", "cancelled") else None

    run: dict[str, Any] = stack.wait_for(f"run {run_id} (k={k}) to finish", finished, timeout, interval=1.0)
    if run["status"] != "succeeded":
        raise CheckFailed(_failure(stack, token, run))
    # Metric points travel in batches beside the exit report: wait until every step is stored.
    stack.wait_for(f"run {run_id}'s {params['steps']} loss points", lambda: _count_points(stack, run_id) >= params["steps"], 30)
    return run


def _count_points(stack: Stack, run_id: int) -> int:
    return int(stack.query("SELECT COUNT(*) AS n FROM tracking_metricpoint WHERE run_id=? AND key='loss'", (run_id,))[0]["n"])


def measure(stack: Stack, run: dict[str, Any], k: int, batch: int, sampler: Sampler, hw: Hardware) -> Result:
    run_id = int(run["id"])
    attempt = stack.query("SELECT a.id, a.started_at, a.ended_at, s.devices FROM runs_attempt a "
                          "JOIN runs_assignment s ON s.attempt_id = a.id WHERE a.run_id=? ORDER BY a.number DESC", (run_id,))
    if not attempt:
        raise CheckFailed(f"run {run_id} succeeded but has no attempt with an assignment")
    started, ended = _utc(attempt[0]["started_at"]), _utc(attempt[0]["ended_at"])
    devices = sorted(int(d) for d in json.loads(attempt[0]["devices"]))
    points = stack.query("SELECT step, wall_time FROM tracking_metricpoint WHERE run_id=? AND key='loss' ORDER BY step", (run_id,))
    first, last = points[0], points[-1]
    train_s = float(last["wall_time"]) - float(first["wall_time"])
    steps_per_s = (int(last["step"]) - int(first["step"])) / train_s if train_s > 0 else math.nan
    result = Result(k=k, run_id=run_id, devices=devices, wall_s=ended - started, train_s=train_s, steps_per_s=steps_per_s,
                    samples_per_s=steps_per_s * batch)
    _utilization(result, sampler, float(first["wall_time"]), float(last["wall_time"]), hw)
    _energy(result, stack, int(attempt[0]["id"]), run, sampler, (started, ended), hw)
    result.wh_per_step = result.total_wh / max(1, int(last["step"]))
    result.lineage = run.get("lineage") or {}
    world = result.lineage.get("world_size")
    result.world_size = int(world) if isinstance(world, int) else None
    return result


def _utilization(result: Result, sampler: Sampler, start: float, end: float, hw: Hardware) -> None:
    pad = sampler.interval if end - start < 4 * sampler.interval else 0.0  # a very short run: take the readings around it
    for d in result.devices:
        values = [u for (_, u, _) in sampler.window(d, start - pad, end + pad) if u is not None]
        result.util[d] = statistics.fmean(values) if values else None
    result.util_source = ("NVML, sampled by this script during the training steps" if hw.kind == "gpu"
                          else "the agent's heartbeat readings (job CPU time per slot), during the training steps")


def _energy(result: Result, stack: Stack, attempt_id: int, run: dict[str, Any], sampler: Sampler, span: tuple[float, float],
            hw: Hardware) -> None:
    energy = run.get("energy") or {}
    result.total_wh = float(energy.get("joules") or 0.0) / J_PER_WH
    estimated = bool(energy.get("estimated"))
    rows = stack.query("SELECT device_index, MAX(energy_j) AS j FROM runs_energysample WHERE attempt_id=? AND device_index >= 0 "
                       "GROUP BY device_index", (attempt_id,))
    if rows:  # the agent reports each device of the gang
        result.device_wh = {int(r["device_index"]): float(r["j"]) / J_PER_WH for r in rows}
        result.device_wh_source = "the run's EnergySample rows, per device"
    elif hw.kind == "gpu":
        for d in result.devices:
            counters = [e for (_, _, e) in sampler.window(d, *span) if e is not None]
            result.device_wh[d] = (counters[-1] - counters[0]) / J_PER_WH if len(counters) >= 2 else None
        result.device_wh_source = "NVML energy counters read by this script over the attempt (the portal stores a node total)"
        known = [v for v in result.device_wh.values() if v is not None]
        result.bench_total_wh = sum(known) if known else None
    else:
        result.device_wh = dict.fromkeys(result.devices)
        result.device_wh_source = "none per CPU slot: the agent reports one figure for the node"
    if estimated:
        result.energy = "estimated (CPU time x W/core)" if hw.kind == "cpu" else "estimated (power x time)"
    else:
        result.energy = "measured (NVML)" if hw.kind == "gpu" else "measured (RAPL)"


# --- the whole check --------------------------------------------------------------------------

def plan(args: argparse.Namespace, hw: Hardware) -> tuple[list[int], dict[str, Any]]:
    lm = args.template == "lm-pretrain"
    every = list(range(1, hw.count + 1))
    # A sequence batch is small: powers of two keep 32 divisible by every k.
    default_ks = [k for k in every if k & (k - 1) == 0] if lm else every
    ks = [int(x) for x in args.ks.split(",")] if args.ks else default_ks
    if not ks or min(ks) < 1 or max(ks) > hw.count:
        raise SystemExit(f"gpu_check: --ks must be within 1..{hw.count} (the devices found)")
    lcm = math.lcm(*ks)
    batch = args.batch_size or (max(LM_BATCH, lcm) if lm else (MAX_BATCH // lcm) * lcm)
    if batch < 1 or batch % lcm:
        what = f"--batch-size {batch} does not divide" if args.batch_size else f"no global batch <= {MAX_BATCH} divides"
        raise SystemExit(f"gpu_check: {what} by every k in {ks}; choose --ks (e.g. 1,2,4,8)")
    gpu = hw.kind == "gpu"
    if lm:
        return ks, {"preset": args.preset or ("124m" if gpu else "tiny"), "steps": args.steps or 150, "batch_size": batch,
                    "amp": True, "deterministic": False, "eval_every": 0, "warmup_steps": 10, "seed": 0}
    params = {"steps": args.steps or 1000, "batch_size": batch, "arch": args.arch,
              "hidden": args.hidden or (2048 if gpu else 64), "eval_every": 0, "warmup_steps": 2, "seed": 0}
    return ks, params


def _raise_device_limit(stack: Stack, template: str, k_max: int) -> None:
    """The shipped templates allow 4 devices per node in pool local; this throwaway database may allow all."""
    code = ("from apps.jobtemplates.models import JobTemplate\n"
            f"for t in JobTemplate.objects.filter(slug={template!r}):\n"
            f"    t.resources = {{**t.resources, 'max_devices_per_node': max({k_max}, t.resources.get('max_devices_per_node', 1))}}\n"
            "    t.save(update_fields=['resources'])\n")
    stack.manage("shell", "-c", code)


def _wait_node(stack: Stack, token: str, hw: Hardware, timeout: float) -> None:
    def ready() -> bool:
        page = stack.api("GET", "/api/v1/nodes/?pool=local", token=token)
        node = next((n for n in page["results"] if n["hostname"] == stack.node_name), None)
        return bool(node and node["state"] == "ready" and sum(d["kind"] == hw.kind for d in node["devices"]) >= hw.count)

    stack.wait_for(f"the agent to register {hw.count} {hw.kind} device(s)", ready, timeout)


def run_check(args: argparse.Namespace, hw: Hardware, nvml: Nvml | None, work: Path, results: list[Result]) -> None:
    """Fills `results` run by run, so a failure part-way still leaves the runs that finished."""
    ks, params = plan(args, hw)
    bf16 = ", bf16" if hw.kind == "gpu" else ""
    model = f"preset {params['preset']}{bf16}" if "preset" in params else f"{params['arch']} hidden {params['hidden']}"
    print(f"{args.template} {model}, {params['steps']} steps, global batch {params['batch_size']}, "
          f"k = {', '.join(map(str, ks))}", flush=True)
    with Stack(work, cpu_slots=None if hw.kind == "gpu" else hw.count) as stack:
        if max(ks) > 4:
            _raise_device_limit(stack, args.template, max(ks))
        token = str(stack.api("POST", "/api/v1/auth/token/", {"username": "alice", "password": "trainyard-demo"})["token"])
        _wait_node(stack, token, hw, 120)
        sampler = Sampler(stack, token, nvml, 0.25 if nvml is not None else 1.0)
        sampler.start()
        try:
            for k in ks:
                t0 = time.monotonic()
                run = submit_and_wait(stack, token, args.template, k, params, args.run_timeout)
                results.append(measure(stack, run, k, params["batch_size"], sampler, hw))
                r = results[-1]
                print(f"  k={k}: run {r.run_id} succeeded in {time.monotonic() - t0:.1f} s, {r.steps_per_s:.1f} steps/s", flush=True)
        finally:
            sampler.halt.set()
            sampler.join(5)


def scaling(results: list[Result]) -> None:
    base = next((r for r in results if r.k == 1), None)
    for r in results:
        r.efficiency = r.steps_per_s / (r.k * base.steps_per_s) if base and base.steps_per_s > 0 else None


def checks(results: list[Result], hw: Hardware, min_util: float) -> list[str]:
    """What does not hold, in words: empty when all is well."""
    problems = []
    for r in results:
        if r.world_size is not None and r.world_size != r.k:
            problems.append(f"k={r.k}: the job's lineage says world_size {r.world_size}, not {r.k}")
        if len(r.devices) != r.k:
            problems.append(f"k={r.k}: the run held devices {r.devices}, not {r.k}")
        if hw.kind != "gpu":
            continue
        for d in r.devices:
            u = r.util.get(d)
            if u is None or u < min_util:
                shown = "no reading" if u is None else f"{u:.0f}%"
                problems.append(f"k={r.k}: GPU {d} was not busy ({shown}; at least {min_util:g}% expected)")
        if r.energy != "measured (NVML)":
            problems.append(f"k={r.k}: energy was {r.energy}, not measured through NVML")
    return problems


def _per_device(values: dict[int, float | None], fmt: str) -> str:
    return " ".join(f"{d}:{'-' if v is None else format(v, fmt)}" for d, v in sorted(values.items()))


def table(results: list[Result], hw: Hardware) -> str:
    unit = "GPU" if hw.kind == "gpu" else "slot"
    head = (f"{'k':>2}  {'wall s':>7}  {'steps/s':>8}  {'samples/s':>10}  {'scaling':>7}  "
            f"{'util % per ' + unit:<26}  {'Wh per ' + unit:<30}  {'total Wh':>9}  {'Wh/step':>9}  energy")
    lines = [head, "-" * len(head)]
    for r in results:
        eff = "-" if r.efficiency is None else f"{r.efficiency:.2f}"
        lines.append(f"{r.k:>2}  {r.wall_s:>7.1f}  {r.steps_per_s:>8.1f}  {r.samples_per_s:>10,.0f}  {eff:>7}  "
                     f"{_per_device(r.util, '.0f'):<26}  {_per_device(r.device_wh, '.4f'):<30}  {r.total_wh:>9.4f}  "
                     f"{r.wh_per_step:>9.2e}  {r.energy}")
    return "\n".join(lines)


def _commit() -> dict[str, Any]:
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
        dirty = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True,
                                    text=True, check=True).stdout.strip())
        return {"commit": sha, "dirty": dirty}
    except (OSError, subprocess.CalledProcessError):
        # The device machine gets a copy of the tree without .git: the caller names the commit.
        return {"commit": os.environ.get("GPU_CHECK_COMMIT", "unknown"), "dirty": None}


def report(results: list[Result], hw: Hardware, problems: list[str], args: argparse.Namespace, params: dict[str, Any]) -> Path:
    label = "GPU" if hw.kind == "gpu" else "CPU DRY RUN (CPU slots, gloo; not GPU figures)"
    driver = f", driver {hw.driver}, CUDA {hw.cuda_driver}" if hw.kind == "gpu" else ""
    print(f"\n{label}: {hw.count} x {hw.model}{driver}; {platform.node()}, {dt.date.today().isoformat()}")
    if results:
        print(table(results, hw))
        r = results[-1]
        print(f"\nsteps/s: steps 2..N from the job's own metric timestamps (start-up and step 1 left out); wall s: the attempt.\n"
              f"scaling: steps/s(k) / (k x steps/s(1)), same global batch. util: {r.util_source}.\n"
              f"Wh per {'GPU' if hw.kind == 'gpu' else 'slot'}: {r.device_wh_source}. total Wh: the portal's (EnergySample rows).")
        if r.bench_total_wh is not None:
            print("bench NVML total vs portal total, Wh: " + ", ".join(
                f"k={x.k} {x.bench_total_wh:.4f} vs {x.total_wh:.4f}" for x in results if x.bench_total_wh is not None))
    if hw.kind == "gpu" and results:
        print("all GPUs busy: " + ("yes" if not any("not busy" in p for p in problems) else "NO"))
    for p in problems:
        print(f"FAILED: {p}")
    out = Path(args.json) if args.json else HERE / "results" / ("gpu_check.json" if hw.kind == "gpu" else "gpu_check-cpu.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    doc = {"kind": hw.kind, "dry_run": hw.kind != "gpu", "hardware": asdict(hw), "params": params, "min_util": args.min_util,
           "results": [asdict(r) for r in results], "problems": problems, "date": dt.datetime.now(dt.UTC).isoformat(),
           "host": platform.node(), "python": platform.python_version(), **_commit()}
    out.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    print(f"wrote {out}")
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--cpu", action="store_true", help="a dry run on CPU slots even where there are GPUs")
    p.add_argument("--require-gpu", action="store_true", help="exit 2 where NVML shows no GPU instead of a CPU dry run")
    p.add_argument("--slots", type=int, default=2, help="CPU slots for the dry run (default 2)")
    p.add_argument("--gpus", type=int, default=0, help="use only the first N GPUs (default: all)")
    p.add_argument("--ks", default="", help="devices per run, comma-separated (default 1..N)")
    p.add_argument("--steps", type=int, default=0, help="steps per run (default 1000; lm-pretrain 150)")
    p.add_argument("--batch-size", type=int, default=0, help=f"global batch; must divide by every k (default: the largest "
                   f"multiple of lcm(k) up to {MAX_BATCH})")
    p.add_argument("--template", choices=["ddp-train", "lm-pretrain"], default="ddp-train",
                   help="ddp-train on digits (default), or lm-pretrain, which keeps a large GPU busy")
    p.add_argument("--preset", default="", help="lm-pretrain's model size (default 124m on GPUs, tiny on CPU)")
    p.add_argument("--arch", choices=["mlp", "cnn"], default="mlp")
    p.add_argument("--hidden", type=int, default=0, help="hidden width (default 2048 on GPUs, 64 on CPU)")
    p.add_argument("--min-util", type=float, default=None,
                   help="percent each GPU must be busy on average (default 5 for ddp-train, 25 for lm-pretrain)")
    p.add_argument("--run-timeout", type=float, default=600, help="seconds one run may take, queueing included")
    p.add_argument("--json", default="", help="where to write the results (default bench/results/gpu_check[-cpu].json)")
    p.add_argument("--keep", action="store_true", help="keep the stack's folder (logs, database) afterwards")
    args = p.parse_args(argv)
    if args.min_util is None:
        args.min_util = DEFAULT_MIN_UTIL[args.template]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    hw, nvml = detect(args)
    work = Path(tempfile.mkdtemp(prefix="ty-gpu-check-"))
    print(f"gpu_check: {hw.count} {hw.kind} device(s): {hw.model}; stack in {work}", flush=True)
    started = time.monotonic()
    results: list[Result] = []
    failure = ""
    try:
        run_check(args, hw, nvml, work, results)
    except (CheckFailed, StackError) as err:
        failure = f"{err}\n(the stack's logs and database are kept in {work})"
        args.keep = True
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    scaling(results)
    problems = checks(results, hw, args.min_util) + ([failure] if failure else [])
    report(results, hw, problems, args, plan(args, hw)[1])
    print(f"gpu_check took {time.monotonic() - started:.0f} s")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
