"""trainyard.log_artifact in a job: files and folders copied into the run directory (or the local
sink folder outside the portal) and recorded for the agent; names checked; rank 0 only."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import trainyard
from trainyard import job

from tests.sdk.test_job import ENV_NAMES


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    for name in ENV_NAMES:
        monkeypatch.delenv(name, raising=False)
    trainyard.close()
    yield monkeypatch
    trainyard.close()


def records(run_dir: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in (run_dir / "artifacts.jsonl").read_text().splitlines()]


def test_file_and_folder_in_the_portal(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    run_dir = tmp_path / "attempt-1"
    clean_env.setenv(job.ENV_RUN_DIR, str(run_dir))
    (tmp_path / "loss.png").write_bytes(b"\x89PNG fake")
    plots = tmp_path / "out"
    (plots / "sub").mkdir(parents=True)
    (plots / "a.csv").write_text("x,y\n1,2\n")
    (plots / "sub" / "b.json").write_text('{"k": 1}')

    assert trainyard.log_artifact(tmp_path / "loss.png") == ["loss.png"]
    assert trainyard.log_artifact(str(tmp_path / "loss.png"), name="plots/loss.png") == ["plots/loss.png"]
    assert trainyard.log_artifact(plots) == ["out/a.csv", "out/sub/b.json"]
    assert trainyard.log_artifact(plots, name="tables") == ["tables/a.csv", "tables/sub/b.json"]
    (tmp_path / "loss.png").unlink()  # the job's own copy may go at once

    recs = records(run_dir)
    assert [r["name"] for r in recs] == ["loss.png", "plots/loss.png", "out/a.csv", "out/sub/b.json", "tables/a.csv", "tables/sub/b.json"]
    for rec in recs:
        stored = run_dir / str(rec["file"])
        assert stored.read_bytes() and hashlib.sha256(stored.read_bytes()).hexdigest() == rec["sha256"]
        assert rec["size"] == stored.stat().st_size
    assert not [p for p in run_dir.rglob(".*.tmp")]


def test_outside_the_portal_the_local_folder_keeps_them(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    clean_env.chdir(tmp_path)
    (tmp_path / "model.txt").write_text("weights")
    assert trainyard.log_artifact("model.txt", name="models/final.txt") == ["models/final.txt"]
    [local] = list((tmp_path / job.LOCAL_ROOT).iterdir())
    assert (local / "artifacts" / "models" / "final.txt").read_text() == "weights"
    assert records(local)[0]["name"] == "models/final.txt"


@pytest.mark.parametrize("name", ["../up", "/abs", "a//b", "a\nb", "x" * 501, "a\\b", ""])
def test_bad_names_and_missing_paths(clean_env: pytest.MonkeyPatch, tmp_path: Path, name: str) -> None:
    clean_env.setenv(job.ENV_RUN_DIR, str(tmp_path / "run"))
    (tmp_path / "f").write_text("x")
    with pytest.raises(ValueError):
        trainyard.log_artifact(tmp_path / "f", name=name)
    with pytest.raises(FileNotFoundError):
        trainyard.log_artifact(tmp_path / "missing")
    assert not (tmp_path / "run" / "artifacts.jsonl").exists()


def test_other_ranks_store_nothing(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    clean_env.setenv(job.ENV_RUN_DIR, str(tmp_path / "run"))
    clean_env.setenv("RANK", "1")
    (tmp_path / "f").write_text("x")
    assert trainyard.log_artifact(tmp_path / "f") == []
    assert not (tmp_path / "run" / "artifacts.jsonl").exists()


def test_agent_opens_only_plain_files_inside_the_artifacts_folder(tmp_path: Path) -> None:
    from agents.shipper import _open_job_file_in

    root = tmp_path / "artifacts"
    (root / "plots").mkdir(parents=True)
    (root / "plots" / "ok.txt").write_text("fine")
    secret = tmp_path / "credential"
    secret.write_text("node secret")
    (root / "link.txt").symlink_to(secret)
    (root / "linkdir").symlink_to(tmp_path)
    with _open_job_file_in(root, "plots/ok.txt") as fh:
        assert fh.read() == b"fine"
    for name in ("link.txt", "linkdir/credential", "../credential", "plots", "plots//ok.txt"):
        with pytest.raises(OSError):
            _open_job_file_in(root, name)
