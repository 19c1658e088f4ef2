from __future__ import annotations

import pytest

from tests.mlflow.venv import mlflow_python as _mlflow_python


@pytest.fixture(scope="session")
def mlflow_python() -> str:
    """An interpreter with the pinned MLflow client (bench/.venv-mlflow, created once)."""
    return _mlflow_python()
