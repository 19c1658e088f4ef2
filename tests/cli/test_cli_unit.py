"""The CLI's and client's pure parts, without a server."""

from __future__ import annotations

import io
import json
import stat
import tarfile
from pathlib import Path

import pytest
from trainyard import _config, cli
from trainyard.client import AuthError, ConflictError, ServerError, ValidationError, error_from_response, snapshot_tar


def test_config_is_private_and_env_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.delenv("TRAINYARD_SERVER", raising=False)
    monkeypatch.delenv("TRAINYARD_TOKEN", raising=False)
    path = _config.config_save(server="http://s", token="ty_x", username="alice")
    assert path == tmp_path / "trainyard" / "config.json" and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert _config.config_load().token == "ty_x"
    monkeypatch.setenv("TRAINYARD_TOKEN", "ty_env")
    assert _config.config_load() == _config.Config(server="http://s", token="ty_env", username="alice")


def test_errors_keep_the_api_shape() -> None:
    body = json.dumps({"error": {"status": 400, "code": "invalid", "message": "steps: too big", "fields": {"steps": ["too big"]}}})
    err = error_from_response(400, body.encode())
    assert isinstance(err, ValidationError) and err.fields == {"steps": ["too big"]} and err.code == "invalid"
    assert isinstance(error_from_response(401, b'{"detail": "no"}'), AuthError)
    assert isinstance(error_from_response(409, b""), ConflictError)
    assert isinstance(error_from_response(502, b"<html>bad gateway</html>"), ServerError)


def test_snapshot_skips_vcs_caches_and_links(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "HEAD").write_text("x")
    (tmp_path / "pkg" / "__pycache__").mkdir(parents=True)
    (tmp_path / "pkg" / "__pycache__" / "m.pyc").write_bytes(b"x")
    (tmp_path / "pkg" / "m.py").write_text("x = 1\n")
    (tmp_path / "train.py").write_text("print(1)\n")
    (tmp_path / "link.py").symlink_to(tmp_path / "train.py")
    names = tarfile.open(fileobj=io.BytesIO(snapshot_tar(tmp_path))).getnames()
    assert sorted(names) == ["pkg/m.py", "train.py"]


def test_params_parse_json_else_string_and_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli._kv_pairs(["steps=30", "lr=0.01", "arch=cnn", "classes=[0,1]", "amp=true"], "param", parse_json=True) == {
        "steps": 30, "lr": 0.01, "arch": "cnn", "classes": [0, 1], "amp": True}
    with pytest.raises(SystemExit) as exited:
        cli.main(["show", "not-a-number"])
    assert exited.value.code == 2
    assert "exit codes" in cli.build_parser().format_help()
    line = cli.progress_line(3, "running", {"steps_done": 15, "total_steps": 30, "steps_per_s": 5.0, "eta_s": 3.0})
    assert "15/30 steps" in line and "5.00 steps/s" in line and "ETA 0:03" in line
