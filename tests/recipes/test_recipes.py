"""The shipped recipes, run as real subprocesses in the environment a node agent gives a job.

Fast tests check the pieces in-process (schemas, data, batch order). The ``slow`` ones train for
real on the CPU: each process spends a few seconds importing torch, so they are marked.
Metric series are compared bit for bit except ``throughput``: samples per second is
wall-clock time, the one logged value no seed can make repeatable.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
PYTHON = sys.executable
RECIPES = ("digits_classifier", "finetune", "ddp_train", "evaluate")
NOT_REPRODUCIBLE = {"throughput"}

# The reference run: a digits_classifier pre-trained on digits 0-4, long enough (about a
# second of training) that a SIGTERM sent after the first steps lands mid-run.
REFERENCE_PARAMS = {
    "steps": 400,
    "classes": [0, 1, 2, 3, 4],
    "hidden": 256,
    "batch_size": 128,
    "eval_every": 50,
}
REFERENCE_POLICY: dict[str, Any] = {"every_steps": 100, "keep": 2}


# --- running recipes ------------------------------------------------------------------------


@dataclass
class Run:
    """One attempt of a run: its directories, the files the SDK wrote, the process's output."""

    run_dir: Path
    checkpoint_dir: Path
    returncode: int = -1
    output: str = ""

    def metrics(self) -> list[dict[str, Any]]:
        return read_jsonl(self.run_dir / "metrics.jsonl")

    def events(self) -> list[dict[str, Any]]:
        return read_jsonl(self.run_dir / "events.jsonl")

    def lineage(self) -> dict[str, Any]:
        merged: dict[str, Any] = {}
        for event in self.events():
            if event["type"] == "lineage":
                merged.update(event["data"])
        return merged

    def checkpoints(self) -> list[dict[str, Any]]:
        return read_jsonl(self.checkpoint_dir / "checkpoints.jsonl")

    def final_checkpoint(self) -> Path:
        return self.checkpoint_dir / self.checkpoints()[-1]["file"]


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def job_env(
    run: Run,
    params: dict[str, Any],
    *,
    run_id: str = "7",
    attempt: int = 1,
    every_steps: int = 0,
    keep: int = 0,
    init: Path | None = None,
    rank: int = 0,
    world_size: int = 1,
    master_port: int | None = None,
) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("TRAINYARD_") and key not in {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"}
    }
    env.update(
        PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "sdk")]),
        OMP_NUM_THREADS="1",
        TRAINYARD_RUN_ID=run_id,
        TRAINYARD_ATTEMPT=str(attempt),
        TRAINYARD_RUN_DIR=str(run.run_dir),
        TRAINYARD_CHECKPOINT_DIR=str(run.checkpoint_dir),
        TRAINYARD_PARAMS=json.dumps(params),
        TRAINYARD_CHECKPOINT_EVERY_STEPS=str(every_steps),
        TRAINYARD_CHECKPOINT_EVERY_SECONDS="0",
        TRAINYARD_CHECKPOINT_KEEP=str(keep),
        RANK=str(rank),
        WORLD_SIZE=str(world_size),
        LOCAL_RANK=str(rank),
        CUDA_VISIBLE_DEVICES="",
    )
    if init is not None:
        env["TRAINYARD_INIT_CHECKPOINT"] = str(init)
    if master_port is not None:
        env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(master_port))
    return env


def start(recipe: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [PYTHON, "-m", f"recipes.{recipe}"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def finish(proc: subprocess.Popen[str], run: Run, timeout: float = 180) -> Run:
    try:
        run.output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        run.output, _ = proc.communicate()
    run.returncode = proc.returncode
    return run


def run_recipe(recipe: str, run: Run, params: dict[str, Any], **env: Any) -> Run:
    finish(start(recipe, job_env(run, params, **env)), run)
    assert run.returncode == 0, run.output
    return run


def new_run(base: Path, name: str, checkpoint_dir: Path | None = None) -> Run:
    return Run(run_dir=base / name, checkpoint_dir=checkpoint_dir or base / f"{name}-checkpoints")


def wait_for_steps(run: Run, proc: subprocess.Popen[str], count: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    path = run.run_dir / "metrics.jsonl"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"the run ended before {count} steps were logged:\n{proc.communicate()[0]}")
        if path.exists() and path.read_bytes().count(b"\n") >= count:
            return
        time.sleep(0.002)
    pytest.fail(f"fewer than {count} steps logged in {timeout} s")


def series(*runs: Run) -> dict[int, dict[str, Any]]:
    """Metric series by step, later attempts replacing earlier values, throughput dropped."""
    merged: dict[int, dict[str, Any]] = {}
    for run in runs:
        for record in run.metrics():
            values = {k: v for k, v in record["metrics"].items() if k not in NOT_REPRODUCIBLE}
            merged[record["step"]] = values
    return merged


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def assert_same(left: Any, right: Any) -> None:
    """Nested containers of tensors and plain values, equal bit for bit."""
    import torch

    if isinstance(left, torch.Tensor):
        assert isinstance(right, torch.Tensor) and torch.equal(left, right)
    elif isinstance(left, dict):
        assert left.keys() == right.keys()
        for key in left:
            assert_same(left[key], right[key])
    elif isinstance(left, list | tuple):
        assert len(left) == len(right)
        for a, b in zip(left, right, strict=True):
            assert_same(a, b)
    else:
        assert left == right


def assert_checkpoints_valid(run: Run) -> None:
    records = run.checkpoints()
    assert records, "no checkpoint recorded"
    for record in records:
        path = run.checkpoint_dir / record["file"]
        if path.exists():  # keep-last-K removes older ones
            assert path.stat().st_size == record["size"]
            assert sha256_of(path) == record["sha256"]


# --- fast, in-process -----------------------------------------------------------------------


@pytest.mark.parametrize("recipe", RECIPES)
def test_param_schema_is_draft_2020_12_with_defaults(recipe: str) -> None:
    from jsonschema import Draft202012Validator

    module = importlib.import_module(f"recipes.{recipe}")
    schema = module.PARAM_SCHEMA
    Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["type"] == "object" and schema["additionalProperties"] is False
    defaults = {}
    for name, prop in schema["properties"].items():
        assert {"type", "default", "description"} <= prop.keys(), name
        defaults[name] = prop["default"]
    validator = Draft202012Validator(schema)
    assert list(validator.iter_errors(defaults)) == []
    assert list(validator.iter_errors({"surprise": 1}))  # additionalProperties false

    from recipes.schema import ParamError, resolve_params

    assert resolve_params(schema, {}) == defaults
    with pytest.raises(ParamError, match="unknown parameter"):
        resolve_params(schema, {"surprise": 1})


def test_resolve_params_agrees_with_jsonschema_on_bad_values() -> None:
    from jsonschema import Draft202012Validator

    from recipes import schema
    from recipes.digits_classifier import PARAM_SCHEMA

    validator = Draft202012Validator(PARAM_SCHEMA)
    for bad in (
        {"steps": 0},
        {"steps": 2.5},
        {"lr": 0},
        {"amp": "yes"},
        {"arch": "transformer"},
        {"classes": [1]},
        {"classes": [1, 1]},
        {"classes": [3, 10]},
        {"grad_accum": True},
    ):
        assert list(validator.iter_errors(bad)), bad
        with pytest.raises(schema.ParamError):
            schema.resolve_params(PARAM_SCHEMA, bad)


def test_resolve_params_takes_whole_floats_as_integers_like_jsonschema() -> None:
    from jsonschema import Draft202012Validator

    from recipes import schema
    from recipes.digits_classifier import PARAM_SCHEMA

    raw = {"steps": 20.0, "classes": [1.0, 2]}
    assert list(Draft202012Validator(PARAM_SCHEMA).iter_errors(raw)) == []
    resolved = schema.resolve_params(PARAM_SCHEMA, raw)
    assert resolved["steps"] == 20 and type(resolved["steps"]) is int
    assert resolved["classes"] == [1, 2] and all(type(c) is int for c in resolved["classes"])


@pytest.mark.parametrize("recipe", ("digits_classifier", "finetune", "ddp_train"))
def test_training_recipes_declare_the_batch_layout_the_loop_needs(recipe: str) -> None:
    # The portal refuses a submission from this rule; the training loop assumes the same split.
    from recipes.schema import BATCH_LAYOUT, divisible_rules

    schema = importlib.import_module(f"recipes.{recipe}").PARAM_SCHEMA
    assert divisible_rules(schema) == [BATCH_LAYOUT]


def test_divisible_rule_names_the_numbers_and_leaves_out_an_unknown_world_size() -> None:
    from recipes import schema
    from recipes.digits_classifier import PARAM_SCHEMA

    params = schema.resolve_params(PARAM_SCHEMA, {"batch_size": 64, "grad_accum": 3})
    with pytest.raises(schema.ParamError, match=r"^batch_size \(64\) must be divisible by world size x grad_accum \(1 x 3\)$"):
        schema.check_divisible(PARAM_SCHEMA, params, world_size=1)
    schema.check_divisible(PARAM_SCHEMA, {**params, "grad_accum": 4}, world_size=1)
    with pytest.raises(schema.ParamError, match=r"\(2 x 4\)"):
        schema.check_divisible(PARAM_SCHEMA, {**params, "batch_size": 36, "grad_accum": 4}, world_size=2)
    rules = schema.divisible_rules(PARAM_SCHEMA)
    [broken] = schema.divisibility_violations(rules, params, {})
    assert broken.sentence() == "batch_size (64) must be divisible by grad_accum (3)" and broken.params == ("batch_size", "grad_accum")
    # A value the type checks refuse is theirs to report.
    assert schema.divisibility_violations(rules, {**params, "grad_accum": "3"}, {"world_size": 1}) == []


@pytest.mark.parametrize(
    ("rules", "message"),
    [
        ({"param": "batch_size"}, "must be a list"),
        ([{"param": "batch_size"}], "exactly the keys param and by"),
        ([{"param": "nope", "by": ["grad_accum"]}], "must name a parameter"),
        ([{"param": "batch_size", "by": []}], "non-empty list"),
        ([{"param": "batch_size", "by": ["world_size", "gpus"]}], "'gpus' is neither a parameter"),
    ],
)
def test_malformed_divisible_rules_are_refused(rules: Any, message: str) -> None:
    from recipes import schema
    from recipes.digits_classifier import PARAM_SCHEMA

    with pytest.raises(schema.ParamError, match=message):
        schema.divisible_rules({**PARAM_SCHEMA, schema.DIVISIBLE: rules})


def test_reading_a_schema_does_not_load_torch() -> None:
    code = (
        "import sys, recipes.digits_classifier, recipes.finetune, recipes.ddp_train,"
        " recipes.evaluate; assert 'torch' not in sys.modules, 'torch imported'"
    )
    subprocess.run([PYTHON, "-c", code], cwd=ROOT, check=True, timeout=60)


def test_digits_come_from_scikit_learn_unchanged() -> None:
    np = pytest.importorskip("numpy")
    from sklearn.datasets import load_digits

    from recipes import digits

    pixels, labels = digits.read_digits()
    reference = load_digits()
    assert pixels.dtype == reference.data.dtype and labels.dtype == reference.target.dtype
    assert np.array_equal(pixels, reference.data)
    assert np.array_equal(labels, reference.target)


def test_split_is_fixed_disjoint_and_class_filtered() -> None:
    torch = pytest.importorskip("torch")
    from recipes import digits

    every = digits.load_digits_data(range(10), torch.device("cpu"))
    again = digits.load_digits_data(range(10), torch.device("cpu"))
    assert (len(every.train), len(every.val), len(every.test)) == (1259, 269, 269)
    assert every.split_sha256 == again.split_sha256
    assert torch.equal(every.test.x, again.test.x)
    rows = {tuple(row.tolist()) for split in (every.train, every.val) for row in split.x}
    assert all(tuple(row.tolist()) not in rows for row in every.test.x[:50])

    low = digits.load_digits_data([0, 1, 2, 3, 4], torch.device("cpu"))
    assert set(low.train.y.tolist()) == {0, 1, 2, 3, 4}
    assert low.dataset_sha256 == every.dataset_sha256
    assert low.split_sha256 != every.split_sha256


def test_batch_plan_resumes_mid_epoch_with_the_same_batches() -> None:
    np = pytest.importorskip("numpy")
    from recipes import digits

    def plan() -> digits.BatchPlan:
        return digits.BatchPlan(seed=5, n_samples=100, batch_size=30)

    uninterrupted = plan()
    straight = [uninterrupted.global_batch(g).copy() for g in range(12)]
    resumed = plan()  # a fresh process that starts at step 7 (epoch 2, batch 1)
    assert resumed.position(7) == (2, 1)
    assert all(np.array_equal(resumed.global_batch(g), straight[g]) for g in range(7, 12))
    epoch0 = np.concatenate(straight[:3])
    assert len(set(epoch0.tolist())) == 90  # no sample twice within an epoch
    assert not np.array_equal(straight[0], straight[3])  # each epoch has its own order


# --- training for real (subprocesses) -------------------------------------------------------


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("recipes")


@pytest.fixture(scope="module")
def reference_pair(workdir: Path) -> tuple[Run, Run]:
    """The reference run and an identical second run (same params and seed), side by side."""
    runs = (new_run(workdir, "reference"), new_run(workdir, "reference-again"))
    procs = [start("digits_classifier", job_env(run, REFERENCE_PARAMS, **REFERENCE_POLICY)) for run in runs]
    for proc, run in zip(procs, runs, strict=True):
        finish(proc, run)
        assert run.returncode == 0, run.output
    return runs


@pytest.fixture(scope="module")
def reference(reference_pair: tuple[Run, Run]) -> Run:
    return reference_pair[0]


@pytest.mark.slow
def test_digits_classifier_trains_logs_and_checkpoints(reference: Run) -> None:
    records = reference.metrics()
    assert [r["step"] for r in records] == list(range(1, 401))  # every step exactly once
    losses = [r["metrics"]["loss"] for r in records]
    assert sum(losses[-20:]) / 20 < 0.2 * sum(losses[:20]) / 20
    assert {"loss", "accuracy", "lr", "throughput"} <= records[0]["metrics"].keys()
    evaluated = [r["step"] for r in records if "val_accuracy" in r["metrics"]]
    assert evaluated == list(range(50, 401, 50))
    assert records[-1]["metrics"]["val_accuracy"] >= 0.95

    checkpoints = reference.checkpoints()
    assert [c["step"] for c in checkpoints] == [100, 200, 300, 400]
    assert sorted(p.name for p in reference.checkpoint_dir.glob("ckpt-*.pt")) == [
        "ckpt-0000000300.pt",
        "ckpt-0000000400.pt",
    ]
    assert_checkpoints_valid(reference)
    assert checkpoints[-1]["metrics"]["val_accuracy"] == records[-1]["metrics"]["val_accuracy"]

    events = reference.events()
    assert {"type": "progress", "total_steps": 400} in [{k: v for k, v in e.items() if k != "time"} for e in events]
    lineage = reference.lineage()
    assert lineage["recipe"] == "digits_classifier" and lineage["seed"] == 0
    assert len(lineage["dataset_sha256"]) == 64 and lineage["classes"] == [0, 1, 2, 3, 4]


@pytest.mark.slow
def test_same_params_and_seed_reproduce_bit_for_bit(reference_pair: tuple[Run, Run]) -> None:
    reference, again = reference_pair
    assert series(again) == series(reference)
    assert len(series(reference)) == 400
    # The saved state (weights, optimizer, RNG) is byte-identical too.
    assert again.checkpoints()[-1]["sha256"] == reference.checkpoints()[-1]["sha256"]


@pytest.mark.slow
def test_preempted_run_resumes_to_the_uninterrupted_result(reference: Run, workdir: Path) -> None:
    checkpoints = workdir / "preempted-checkpoints"
    first = new_run(workdir, "preempted-attempt-1", checkpoints)
    env = job_env(first, REFERENCE_PARAMS, run_id="8", attempt=1, every_steps=100, keep=2)
    proc = start("digits_classifier", env)
    wait_for_steps(first, proc, 10)
    proc.send_signal(signal.SIGTERM)
    finish(proc, first)
    assert first.returncode == 0, first.output  # exit 0 after the checkpoint: the agent knows

    stopped_at = first.metrics()[-1]["step"]
    assert 10 <= stopped_at < 400, "the SIGTERM arrived after the run had finished"
    assert first.checkpoints()[-1]["step"] == stopped_at
    assert_checkpoints_valid(first)

    second = run_recipe(
        "digits_classifier",
        new_run(workdir, "preempted-attempt-2", checkpoints),
        REFERENCE_PARAMS,
        run_id="8",
        attempt=2,
        every_steps=100,
        keep=2,
    )
    assert second.metrics()[0]["step"] == stopped_at + 1
    assert series(first, second) == series(reference)
    assert second.checkpoints()[-1]["attempt"] == 2
    # The final state equals the uninterrupted run's (the files differ only by run id).
    torch = pytest.importorskip("torch")
    resumed = torch.load(second.final_checkpoint(), weights_only=True)
    straight = torch.load(reference.final_checkpoint(), weights_only=True)
    assert (resumed["run_id"], straight["run_id"]) == ("8", "7")
    for part in ("model", "optimizer", "scheduler", "rng", "step", "epoch", "batch_in_epoch"):
        assert_same(resumed[part], straight[part])


@pytest.mark.slow
def test_finetune_from_a_digits_checkpoint(reference: Run, workdir: Path) -> None:
    torch = pytest.importorskip("torch")
    source = reference.final_checkpoint()
    params = {"steps": 60, "freeze": 1, "classes": [5, 6, 7, 8, 9], "eval_every": 30}
    tuned = run_recipe("finetune", new_run(workdir, "finetune"), params, init=source)

    records = tuned.metrics()
    assert [r["step"] for r in records] == list(range(1, 61))
    assert records[-1]["metrics"]["val_accuracy"] >= 0.9  # digits it never saw in pre-training
    lineage = tuned.lineage()
    assert lineage["init_checkpoint_sha256"] == sha256_of(source)
    assert lineage["init_checkpoint_step"] == 400 and lineage["init_run_id"] == "7"
    assert lineage["init_classes"] == [0, 1, 2, 3, 4] and lineage["classes"] == [5, 6, 7, 8, 9]

    before = torch.load(source, weights_only=True)["model"]
    after = torch.load(tuned.final_checkpoint(), weights_only=True)["model"]
    assert torch.equal(before["fc1.weight"], after["fc1.weight"])  # frozen
    assert not torch.equal(before["fc2.weight"], after["fc2.weight"])  # trained


@pytest.mark.slow
def test_finetune_resumes_from_its_own_checkpoint(reference: Run, workdir: Path) -> None:
    params = {"steps": 60, "freeze": 2, "eval_every": 0}
    checkpoints = workdir / "finetune-own-checkpoints"
    first = run_recipe(
        "finetune",
        new_run(workdir, "finetune-own-1", checkpoints),
        params,
        run_id="9",
        every_steps=20,
        init=reference.final_checkpoint(),
    )
    # The node lost the newest file; the source checkpoint is gone too.
    (checkpoints / "ckpt-0000000060.pt").unlink()
    second = run_recipe(
        "finetune",
        new_run(workdir, "finetune-own-2", checkpoints),
        params,
        run_id="9",
        attempt=2,
        every_steps=20,
        init=workdir / "no-such-file.pt",
    )
    assert second.metrics()[0]["step"] == 41
    assert series(first, second) == series(first)
    assert second.lineage()["init_checkpoint_sha256"] == first.lineage()["init_checkpoint_sha256"]


@pytest.mark.slow
def test_evaluate_a_checkpoint_on_the_test_split(reference: Run, workdir: Path) -> None:
    source = reference.final_checkpoint()
    evaluated = run_recipe("evaluate", new_run(workdir, "evaluate"), {"classes": [0, 1, 2, 3, 4]}, init=source)
    [record] = evaluated.metrics()
    assert record["step"] == 1
    assert record["metrics"]["test_samples"] == 135
    assert record["metrics"]["test_accuracy"] >= 0.95
    assert 0 <= record["metrics"]["test_loss"] < 0.5
    assert set(record["metrics"]) >= {f"test_accuracy_class_{d}" for d in range(5)}
    lineage = evaluated.lineage()
    assert lineage["evaluated_checkpoint_sha256"] == sha256_of(source)
    assert lineage["evaluated_checkpoint_step"] == 400
    assert lineage["dataset_matches_training"] is True
    assert evaluated.checkpoints() == []


@pytest.mark.slow
def test_mixed_precision_grad_accum_and_cnn(workdir: Path) -> None:
    params = {"arch": "cnn", "amp": True, "grad_accum": 4, "steps": 60, "eval_every": 0}
    run = run_recipe("digits_classifier", new_run(workdir, "cnn-amp"), params)
    records = run.metrics()
    assert len(records) == 60
    assert records[-1]["metrics"]["loss"] < 0.5 * records[0]["metrics"]["loss"]
    assert records[-1]["metrics"]["val_accuracy"] >= 0.8
    assert run.lineage()["precision"] == "autocast cpu bfloat16"


@pytest.mark.parametrize(
    ("recipe", "params", "message"),
    [
        ("digits_classifier", {"steps": 0}, "steps must be >= 1"),
        ("digits_classifier", {"batch_size": 96, "grad_accum": 5}, "divisible"),
        ("digits_classifier", {"grad_accum": 3}, "batch_size (64) must be divisible by world size x grad_accum (1 x 3)"),
        ("ddp_train", {"batch_size": 63}, "world size x grad_accum (2 x 1)"),
        ("finetune", {}, "TRAINYARD_INIT_CHECKPOINT"),
        ("evaluate", {"split": "train"}, "split must be one of"),
    ],
)
def test_bad_params_exit_2_with_a_sentence(
    recipe: str,
    params: dict[str, Any],
    message: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # In-process: every refusal here happens before any training or torch global set-up.
    run = new_run(tmp_path, "bad")
    env = job_env(run, params, world_size=2 if recipe == "ddp_train" else 1)
    for name in list(os.environ):
        if name not in env:
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    import trainyard

    trainyard.close()
    assert importlib.import_module(f"recipes.{recipe}").main() == 2
    assert message in capsys.readouterr().err
    assert not run.checkpoint_dir.exists()


# --- DistributedDataParallel ----------------------------------------------------------------

DDP_PARAMS = {"steps": 150, "batch_size": 64, "grad_accum": 2, "eval_every": 50}


def run_ddp(
    base: Path,
    name: str,
    *,
    checkpoint_dir: Path,
    attempt: int = 1,
    stop_rank: int | None = None,
) -> tuple[Run, list[Run]]:
    """Both ranks of one attempt on one node: a shared run dir, rank 0 writing."""
    port = free_port()
    shared = new_run(base, name, checkpoint_dir)
    ranks = [new_run(base, name, checkpoint_dir) for _ in range(2)]
    procs = [
        start(
            "ddp_train",
            job_env(
                shared,
                DDP_PARAMS,
                run_id="11",
                attempt=attempt,
                every_steps=50,
                rank=rank,
                world_size=2,
                master_port=port,
            ),
        )
        for rank in range(2)
    ]
    if stop_rank is not None:
        wait_for_steps(shared, procs[0], 5)
        procs[stop_rank].send_signal(signal.SIGTERM)
    for proc, run in zip(procs, ranks, strict=True):
        finish(proc, run)
    return shared, ranks


@pytest.fixture(scope="module")
def ddp_reference(workdir: Path) -> Run:
    shared, ranks = run_ddp(workdir, "ddp", checkpoint_dir=workdir / "ddp-checkpoints")
    for run in ranks:
        assert run.returncode == 0, run.output
    return shared


@pytest.mark.slow
def test_ddp_two_ranks_train_and_rank_0_logs_once(ddp_reference: Run) -> None:
    records = ddp_reference.metrics()
    assert [r["step"] for r in records] == list(range(1, 151))
    assert records[-1]["metrics"]["val_accuracy"] >= 0.9
    assert [c["step"] for c in ddp_reference.checkpoints()] == [50, 100, 150]
    assert_checkpoints_valid(ddp_reference)
    assert ddp_reference.lineage()["world_size"] == 2
    progress = [e for e in ddp_reference.events() if e["type"] == "progress"]
    assert len(progress) == 1


@pytest.mark.slow
def test_ddp_sigterm_on_one_rank_stops_all_and_resumes(ddp_reference: Run, workdir: Path) -> None:
    checkpoints = workdir / "ddp-preempted-checkpoints"
    first, ranks = run_ddp(workdir, "ddp-preempted-1", checkpoint_dir=checkpoints, stop_rank=1)
    for run in ranks:
        assert run.returncode == 0, run.output
    stopped_at = first.metrics()[-1]["step"]
    assert 5 <= stopped_at < 150, "the SIGTERM arrived after the run had finished"
    assert first.checkpoints()[-1]["step"] == stopped_at
    for run in ranks:  # both ranks stopped after the same step
        assert f"stopping at step {stopped_at} of 150" in run.output

    second, ranks = run_ddp(workdir, "ddp-preempted-2", checkpoint_dir=checkpoints, attempt=2)
    for run in ranks:
        assert run.returncode == 0, run.output
        assert f"resuming from step {stopped_at}" in run.output
    assert second.metrics()[0]["step"] == stopped_at + 1
    assert series(first, second) == series(ddp_reference)


@pytest.fixture(autouse=True)
def _no_leftover_sdk_session() -> Iterator[None]:
    # In-process tests above import recipes.common, which imports trainyard; make sure no test
    # leaves an SDK session (and its SIGTERM handler) behind for unrelated tests.
    yield
    if "trainyard" in sys.modules:
        sys.modules["trainyard"].close()
