"""`pip install ./sdk` into a fresh virtual environment without Django: the CLI and the in-job SDK
work there on the standard library alone. Offline: the venv's own setuptools builds the wheel."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.live import ROOT

pytestmark = [pytest.mark.live, pytest.mark.process]


def test_pip_install_sdk_in_a_fresh_venv(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    # Built from a copy: building in place would leave build/ and *.egg-info in the repository.
    src = tmp_path / "sdk"
    shutil.copytree(ROOT / "sdk", src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    pip = [str(py), "-m", "pip", "install", "-q", "--no-deps"]
    done = subprocess.run([*pip, "--no-build-isolation", str(src)], capture_output=True, text=True, env=env, timeout=300)
    if done.returncode != 0 and "bdist_wheel" in done.stderr:
        # A venv's bundled setuptools older than 70.1 cannot build wheels without the `wheel`
        # package, and there is no index to fetch either from here: build the wheel with the
        # project's own setuptools, then install that wheel into the Django-free venv.
        dist = tmp_path / "dist"
        built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(dist),
                                str(src)], capture_output=True, text=True, env=env, timeout=300)
        assert built.returncode == 0, built.stdout + built.stderr
        done = subprocess.run([*pip, *map(str, dist.glob("trainyard-*.whl"))], capture_output=True, text=True, env=env,
                              timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr

    no_django = subprocess.run([str(py), "-c", "import django"], capture_output=True, env=env)
    assert no_django.returncode != 0

    trainyard = venv / "bin" / "trainyard"
    helped = subprocess.run([str(trainyard), "--help"], capture_output=True, text=True, env=env, timeout=60)
    assert helped.returncode == 0 and "exit codes" in helped.stdout and "submit" in helped.stdout
    sub_help = subprocess.run([str(trainyard), "submit", "--help"], capture_output=True, text=True, env=env, timeout=60)
    assert sub_help.returncode == 0 and "--wait" in sub_help.stdout
    not_logged_in = subprocess.run([str(trainyard), "runs"], capture_output=True, text=True, timeout=60,
                                   env=env | {"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "cfg")})
    assert not_logged_in.returncode == 3 and "trainyard login" in not_logged_in.stderr

    # The in-job SDK in a job-like environment: metrics land in the run directory.
    run_dir, ckpt_dir = tmp_path / "run", tmp_path / "ckpt"
    run_dir.mkdir()
    ckpt_dir.mkdir()
    job_env = env | {"TRAINYARD_RUN_ID": "7", "TRAINYARD_ATTEMPT": "1", "TRAINYARD_RUN_DIR": str(run_dir),
                     "TRAINYARD_CHECKPOINT_DIR": str(ckpt_dir), "TRAINYARD_PARAMS": '{"lr": 0.1}'}
    script = ("import trainyard, sys; assert trainyard.params()['lr'] == 0.1; trainyard.log(1, loss=0.5); "
              "trainyard.log(2, loss=float('nan')); trainyard.close(); "
              "assert 'django' not in sys.modules; print(trainyard.Client.__name__)")
    job = subprocess.run([str(py), "-c", script], capture_output=True, text=True, env=job_env, cwd=tmp_path, timeout=60)
    assert job.returncode == 0, job.stderr
    assert job.stdout.strip() == "Client"
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [(p["step"], p["metrics"]["loss"]) for p in lines] == [(1, 0.5), (2, "NaN")]
