"""The real MLflow client for tests: an interpreter from bench/.venv-mlflow (requirements-bench.txt
pins MLflow), created on first use and reused after, by CI's passes and by bench/ingest.py alike."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MLFLOW_VENV = ROOT / "bench" / ".venv-mlflow"
REQUIREMENTS = ROOT / "requirements-bench.txt"


def _works(python: Path) -> bool:
    return python.exists() and subprocess.run([str(python), "-c", "import mlflow"], capture_output=True).returncode == 0


def mlflow_python() -> str:
    """The venv's interpreter, creating the venv (a few minutes, once) when it cannot import mlflow."""
    python = MLFLOW_VENV / "bin" / "python"
    if _works(python):
        return str(python)
    for step in ([sys.executable, "-m", "venv", str(MLFLOW_VENV)],
                 [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "-r", str(REQUIREMENTS)]):
        done = subprocess.run(step, capture_output=True, text=True, timeout=1200)
        if done.returncode != 0:
            raise RuntimeError(f"could not create {MLFLOW_VENV} ({' '.join(step[-3:])}): {(done.stderr or done.stdout)[-2000:]}")
    if not _works(python):
        raise RuntimeError(f"{MLFLOW_VENV}: MLflow installed but does not import")
    return str(python)
