"""lm_pretrain (issue 31) trains for real on the CPU: falling loss, bit-exact resume after
preemption, two gloo ranks matching one, efficiency metrics, fine-tune and perplexity."""

from __future__ import annotations

import math
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.recipes.test_recipes import (
    Run,
    assert_checkpoints_valid,
    assert_same,
    finish,
    free_port,
    job_env,
    new_run,
    run_recipe,
    start,
    wait_for_steps,
)

LM_PARAMS = {"steps": 50, "eval_every": 25, "batch_size": 16, "grad_accum": 2}
POLICY: dict[str, Any] = {"every_steps": 20, "keep": 0}
WALL_CLOCK = {"throughput", "tokens_per_s", "model_tflops", "mfu", "peak_memory_mb"}


def lm_series(*runs: Run) -> dict[int, dict[str, Any]]:
    merged: dict[int, dict[str, Any]] = {}
    for run in runs:
        for record in run.metrics():
            merged[record["step"]] = {k: v for k, v in record["metrics"].items() if k not in WALL_CLOCK}
    return merged


@pytest.fixture(scope="module")
def lm_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("lm")


@pytest.fixture(scope="module")
def lm_reference(lm_dir: Path) -> Run:
    return run_recipe("lm_pretrain", new_run(lm_dir, "reference"), LM_PARAMS, **POLICY)


def test_presets_count_the_parameters_the_model_holds() -> None:
    from recipes.lm_model import GPT
    from recipes.lm_presets import PRESETS
    from recipes.lm_pretrain import PARAM_SCHEMA

    for name in ("tiny", "small"):
        config, _ = PRESETS[name]
        assert sum(p.numel() for p in GPT(config).parameters()) == config.param_count()
    # The template's form shows each preset's size and memory estimate in the preset's help.
    help_text = PARAM_SCHEMA["properties"]["preset"]["description"]
    assert "tiny: 2 layers x 64 wide" in help_text and "0.12M parameters" in help_text
    assert "124m: 12 layers x 768 wide" in help_text and "86M parameters" in help_text and "GiB to train" in help_text


def test_byte_corpus_is_deterministic_and_split_by_file(tmp_path: Path) -> None:
    from recipes import lm_data

    for i in range(20):
        (tmp_path / f"m{i:02d}.py").write_bytes(f"x = {i}\n".encode())
    (tmp_path / "site-packages").mkdir()
    (tmp_path / "site-packages" / "skip.py").write_text("no")
    a, b = lm_data.load_corpus("stdlib-top", tmp_path), lm_data.load_corpus("stdlib-all", tmp_path)
    assert a.files == b.files == 20 and a.val_files == 2 and a.corpus_sha256 == b.corpus_sha256
    assert lm_data.decode(a.val.numpy()) == b"x = 9\n\0x = 19\n"
    assert lm_data.decode(lm_data.encode("é".encode())) == "é".encode()
    x, y = lm_data.windows(a.train, lm_data.window_offsets(0, 3, 4, len(a.train), 9), 8)
    assert x.shape == y.shape == (4, 8) and (x[:, 1:] == y[:, :-1]).all()


@pytest.mark.slow
@pytest.mark.process
def test_attention_allows_the_chosen_cuda_kernel_alone_and_auto_leaves_pytorchs_order() -> None:
    torch = pytest.importorskip("torch")
    from recipes.lm_model import choose_attention
    from recipes.lm_pretrain import PARAM_SCHEMA

    cuda = torch.backends.cuda
    flags = (cuda.flash_sdp_enabled, cuda.cudnn_sdp_enabled, cuda.mem_efficient_sdp_enabled, cuda.math_sdp_enabled)
    before = [f() for f in flags]
    try:
        choose_attention("auto")
        assert [f() for f in flags] == before
        choose_attention("cudnn")
        assert [f() for f in flags] == [False, True, False, False]
        choose_attention("math")
        assert [f() for f in flags] == [False, False, False, True]
    finally:
        for setter, value in zip((cuda.enable_flash_sdp, cuda.enable_cudnn_sdp, cuda.enable_mem_efficient_sdp,
                                  cuda.enable_math_sdp), before, strict=True):
            setter(value)
    assert PARAM_SCHEMA["properties"]["attention"]["enum"] == ["auto", "flash", "cudnn", "efficient", "math"]


def test_tiny_lm_trains_with_falling_loss_and_efficiency_metrics(lm_reference: Run) -> None:
    records = lm_reference.metrics()
    assert [r["step"] for r in records] == list(range(1, 51))
    losses = [r["metrics"]["loss"] for r in records]
    assert sum(losses[-5:]) / 5 < 0.7 * sum(losses[:5]) / 5
    first = records[0]["metrics"]
    assert {"loss", "lr", "throughput", "tokens_per_s", "tokens", "model_tflops", "peak_memory_mb"} <= first.keys()
    assert "mfu" not in first  # no peak known for a CPU: not a made-up number
    assert records[-1]["metrics"]["tokens"] == 50 * 16 * 64
    assert math.isclose(records[-1]["metrics"]["val_perplexity"], math.exp(records[-1]["metrics"]["val_loss"]))
    lineage = lm_reference.lineage()
    assert lineage["mfu_peak"].startswith("unknown peak (CPU)")
    assert lineage["peak_memory_source"].startswith("ru_maxrss")
    assert lineage["tokenizer"]["kind"] == "bytes" and lineage["tokenizer"]["vocab_size"] == 256
    assert lineage["attention"] == "auto"
    assert len(lineage["corpus_sha256"]) == 64 and len(lineage["split_sha256"]) == 64
    assert [c["step"] for c in lm_reference.checkpoints()] == [20, 40, 50]
    assert_checkpoints_valid(lm_reference)
    torch = pytest.importorskip("torch")
    saved = torch.load(lm_reference.final_checkpoint(), weights_only=True)
    assert saved["tokenizer"]["kind"] == "bytes" and saved["model_kind"] == "gpt"


@pytest.mark.slow
@pytest.mark.process
def test_preempted_lm_resumes_bit_for_bit(lm_reference: Run, lm_dir: Path) -> None:
    assert_resumes_bit_for_bit("lm_pretrain", LM_PARAMS, lm_reference, lm_dir)


def assert_resumes_bit_for_bit(recipe: str, params: dict[str, Any], reference: Run, work: Path) -> None:
    """SIGTERM after a few steps, resume as attempt 2: the same metrics, and a final checkpoint
    equal to the uninterrupted ``reference``'s in every part."""
    checkpoints = work / "preempted-checkpoints"
    first = new_run(work, "preempted-1", checkpoints)
    proc = start(recipe, job_env(first, params, run_id="8", **POLICY))
    wait_for_steps(first, proc, 3)
    proc.send_signal(signal.SIGTERM)
    finish(proc, first)
    assert first.returncode == 0, first.output
    stopped_at = first.metrics()[-1]["step"]
    assert 3 <= stopped_at < 50, "the SIGTERM arrived after the run had finished"
    second = run_recipe(recipe, new_run(work, "preempted-2", checkpoints), params, run_id="8", attempt=2, **POLICY)
    assert second.metrics()[0]["step"] == stopped_at + 1
    assert lm_series(first, second) == lm_series(reference)
    torch = pytest.importorskip("torch")
    resumed = torch.load(second.final_checkpoint(), weights_only=True)
    straight = torch.load(reference.final_checkpoint(), weights_only=True)
    for part in ("model", "optimizer", "scheduler", "rng", "step"):
        assert_same(resumed[part], straight[part])


def two_gloo_ranks(recipe: str, params: dict[str, Any], work: Path) -> Run:
    """The recipe as ranks 0 and 1 of one gloo group: the shared run's records."""
    port = free_port()
    shared = new_run(work, "ddp", work / "ddp-checkpoints")
    ranks = [new_run(work, "ddp") for _ in range(2)]
    procs = [start(recipe, job_env(shared, params, run_id="9", rank=r, world_size=2, master_port=port, **POLICY))
             for r in range(2)]
    for proc, run in zip(procs, ranks, strict=True):
        finish(proc, run)
        assert run.returncode == 0, run.output
    return shared


@pytest.mark.slow
@pytest.mark.process
def test_two_gloo_ranks_match_one_rank_on_the_same_global_batch(lm_reference: Run, lm_dir: Path) -> None:
    shared = two_gloo_ranks("lm_pretrain", LM_PARAMS, lm_dir)
    one, two = lm_series(lm_reference), lm_series(shared)
    assert one.keys() == two.keys()
    for step in one:
        for key in ("loss", "val_loss"):
            if key in one[step]:
                assert two[step][key] == pytest.approx(one[step][key], rel=1e-4, abs=1e-5), (step, key)
    assert shared.lineage()["world_size"] == 2


@pytest.mark.slow
@pytest.mark.process
def test_finetune_an_lm_checkpoint_on_another_slice_and_evaluate_its_perplexity(lm_reference: Run, lm_dir: Path) -> None:
    from tests.recipes.test_recipes import sha256_of

    source = lm_reference.final_checkpoint()
    tuned = run_recipe("finetune", new_run(lm_dir, "finetune"), {"steps": 20, "batch_size": 16, "eval_every": 0, "lr": 0.002},
                       run_id="20", init=source, every_steps=0)
    lineage = tuned.lineage()
    assert lineage["init_checkpoint_sha256"] == sha256_of(source) and lineage["init_run_id"] == "7"
    assert lineage["init_recipe"] == "lm_pretrain" and lineage["init_corpus"] == "stdlib-top"
    assert lineage["corpus"] == "stdlib-packages" and lineage["corpus_sha256"] != lm_reference.lineage()["corpus_sha256"]
    assert tuned.metrics()[-1]["metrics"]["tokens"] == 20 * 16 * 64

    scores = {}
    for name, run in (("pretrained", lm_reference), ("tuned", tuned)):
        evaluated = run_recipe("evaluate", new_run(lm_dir, f"evaluate-{name}"), {"corpus": "stdlib-packages", "batch_size": 64},
                               run_id="21", init=run.final_checkpoint())
        [record] = evaluated.metrics()
        metrics = record["metrics"]
        assert metrics["val_perplexity"] == pytest.approx(math.exp(metrics["val_loss"]))
        assert metrics["val_tokens"] == 64 * 64
        seen = evaluated.lineage()
        assert seen["evaluated_checkpoint_sha256"] == sha256_of(run.final_checkpoint()) and seen["evaluated_split"] == "val"
        scores[name] = metrics["val_perplexity"]
    # Fine-tuning on the packages' source lowers the perplexity on their validation files.
    assert scores["tuned"] < scores["pretrained"] < 256
