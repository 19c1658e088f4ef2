"""The CLI's and client's pure parts, without a server."""

from __future__ import annotations

import io
import json
import stat
import tarfile
import time
from pathlib import Path

import pytest
from trainyard import _clibase, _config, cli
from trainyard.client import (
    AuthError,
    ConflictError,
    NotFoundError,
    NotTheApi,
    ServerError,
    ValidationError,
    error_from_response,
    snapshot_tar,
)


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
    assert "15/30 steps" in line and "5.00 steps/s" in line and "ETA 3s" in line


@pytest.mark.parametrize(("seconds", "shown"), [(None, "?"), (-1, "?"), (float("nan"), "?"), (float("inf"), "?"), (0, "0s"),
                                                (12.4, "12s"), (153, "2m33s"), (1800, "30m00s"), (3720, "1h02m"),
                                                (86400 * 3 + 3600 * 4 + 59, "3d04h")])
def test_durations_have_units(seconds: float | None, shown: str) -> None:
    assert _clibase._duration(seconds) == shown


def test_progress_counts_a_sweeps_runs_and_estimates_a_missing_eta() -> None:
    # The server leaves eta_s null until its rate settles; the rate it shows still gives one.
    line = cli.progress_line(3, "running", {"steps_done": 10, "total_steps": 70, "steps_per_s": 2.0, "eta_s": None})
    assert "ETA 30s" in line and "ETA ?" not in line
    assert "ETA ?" in cli.progress_line(3, "running", {"steps_done": 10, "total_steps": 70, "steps_per_s": None, "eta_s": None})
    sweep = cli.progress_line(9, "running", {"steps_done": 1, "total_steps": 2, "steps_per_s": 0.01, "eta_s": None}, unit="runs")
    assert "1/2 runs" in sweep and "steps" not in sweep and "ETA 1m40s" in sweep


def test_local_times_sizes_and_energy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "IST-05:30")
    time.tzset()
    try:
        assert _clibase._local_time("2026-11-24T23:09:28.123456Z") == "2026-11-25 04:39:28"
        assert _clibase._local_time("2026-11-24T23:09:28+00:00") == "2026-11-25 04:39:28"
        assert _clibase._local_time("2026-11-24T23:09:28") == "2026-11-25 04:39:28"  # the API's times are UTC
        assert _clibase._local_time(None) is None and _clibase._local_time("soon") == "soon"
    finally:
        monkeypatch.undo()
        time.tzset()
    assert [_clibase._size(n) for n in (0, 1023, 2048, 5_000_000, 3 * 2**30)] == ["0 B", "1023 B", "2.0 KiB", "4.8 MiB", "3.0 GiB"]
    assert [_clibase._energy(k) for k in (1.16758e-05, 0.25, 0.0, 1234.5)] == ["0.0117 Wh", "250 Wh", "0 Wh", "1,234.50 kWh"]
    assert _clibase._pairs({"b": True, "a": "x", "c": [0, 1], "d": None}) == "a=x, b=true, c=[0, 1], d=null"


def test_descending_orderings_parse_and_negative_limits_do_not() -> None:
    assert cli._attach_dash_values(["runs", "--ordering", "-id", "--json"]) == ["runs", "--ordering=-id", "--json"]
    assert cli._attach_dash_values(["runs", "--ordering", "-priority,created_at"]) == ["runs", "--ordering=-priority,created_at"]
    # A forgotten value stays an argparse error rather than swallowing the next option.
    assert cli._attach_dash_values(["runs", "--ordering", "--json"]) == ["runs", "--ordering", "--json"]
    assert cli._attach_dash_values(["runs", "--ordering", "-p", "x"]) == ["runs", "--ordering", "-p", "x"]
    args = cli.build_parser().parse_args(cli._attach_dash_values(["runs", "--ordering", "-created_at"]))
    assert args.ordering == "-created_at"
    with pytest.raises(SystemExit) as exited:
        cli.main(["runs", "--limit", "-1"])
    assert exited.value.code == 2


def test_error_pages_are_not_api_answers() -> None:
    page = b"<!DOCTYPE html><html><title>Page not found at /runs/api/v1/runs/4/</title></html>"
    err = error_from_response(404, page, "http://127.0.0.1:8200/runs/api/v1/runs/4/")
    assert isinstance(err, NotTheApi) and not isinstance(err, NotFoundError)
    assert str(err) == ("HTTP 404 from http://127.0.0.1:8200/runs/api/v1/runs/4/: not the Trainyard API "
                        "(is --server the portal's root URL, e.g. http://host:8000?)")
    args = cli.build_parser().parse_args(["show", "4"])
    assert _clibase.api_error_exit(err, args)[0] == 5
    proxy = error_from_response(502, b"<html>bad gateway</html>", "http://h/api/v1/runs/")
    assert isinstance(proxy, ServerError) and "<" not in str(proxy)
    # The API's own 404 stays not found, named by what was asked for.
    api_404 = error_from_response(404, b'{"error": {"status": 404, "code": "not_found", "message": "Not found.", "fields": {}}}')
    assert _clibase.api_error_exit(api_404, args)[:2] == (4, "run 4 not found (or it belongs to another team)")


def test_is_id_takes_ascii_digits_only_so_odd_digits_are_names_not_a_crash() -> None:
    from trainyard.client import is_id

    assert is_id("41") and not is_id("³") and not is_id("٣") and not is_id("")
