"""The real MLflow client: an interpreter from bench/.venv-mlflow (requirements-bench.txt pins
MLflow and psycopg2), created on first use and reused after, by CI's passes and by bench/ingest.py
alike (the one helper both import: bench puts the repository root on sys.path)."""

from __future__ import annotations

import fcntl
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MLFLOW_VENV = ROOT / "bench" / ".venv-mlflow"
REQUIREMENTS = ROOT / "requirements-bench.txt"
VENV_PYTHON = MLFLOW_VENV / "bin" / "python"
LOCK = ROOT / "bench" / ".venv-mlflow.lock"


def python_imports(python: str | Path, modules: Sequence[str] = ("mlflow",)) -> bool:
    """Whether ``python`` exists and imports every one of ``modules``."""
    return Path(python).exists() and subprocess.run(
        [str(python), "-c", f"import {', '.join(modules)}"], capture_output=True).returncode == 0


def mlflow_python(modules: Sequence[str] = ("mlflow",)) -> str:
    """The venv's interpreter, creating the venv (a few minutes, once) when it cannot import
    ``modules``. Raises RuntimeError saying which step failed. Callers take turns: both xdist
    workers, and CI's copy made beside lint (.ci/run), may ask at once."""
    with LOCK.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _made(modules)


def _made(modules: Sequence[str]) -> str:
    if python_imports(VENV_PYTHON, modules):
        return str(VENV_PYTHON)
    for step in ([sys.executable, "-m", "venv", str(MLFLOW_VENV)],
                 [str(VENV_PYTHON), "-m", "pip", "install", "-q", "--disable-pip-version-check", "-r", str(REQUIREMENTS)]):
        done = subprocess.run(step, capture_output=True, text=True, timeout=1200)
        if done.returncode != 0:
            raise RuntimeError(f"could not create {MLFLOW_VENV} ({' '.join(step[-3:])}): {(done.stderr or done.stdout)[-2000:]}")
    if not python_imports(VENV_PYTHON, modules):
        raise RuntimeError(f"{MLFLOW_VENV}: MLflow installed but {', '.join(modules)} does not import")
    return str(VENV_PYTHON)
