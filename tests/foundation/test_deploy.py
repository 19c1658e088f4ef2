"""Production settings: `check --deploy` is clean, and unsafe configurations refuse to start.

Each case is a real `manage.py` subprocess, because the refusal happens at settings import,
before anything a test inside this process could observe.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _manage(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    # Not DJANGO_ALLOW_ASYNC_UNSAFE either: the browser fixture sets it for the test process only.
    base = {k: v for k, v in os.environ.items()
            if not k.startswith("TRAINYARD_") and k not in ("DJANGO_SETTINGS_MODULE", "DJANGO_ALLOW_ASYNC_UNSAFE")}
    base.update({"DJANGO_SETTINGS_MODULE": "portal.settings.production", **env})
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=base, capture_output=True, text=True, timeout=120)


def test_check_deploy_has_no_warnings() -> None:
    from cryptography.fernet import Fernet

    result = _manage("check", "--deploy", "--fail-level", "WARNING", TRAINYARD_SECRET_KEY=secrets.token_urlsafe(64),
                     TRAINYARD_SECRET_KEYS=Fernet.generate_key().decode())
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({}, "TRAINYARD_SECRET_KEY must be set"),
        ({"TRAINYARD_SECRET_KEY": "trainyard-insecure-development-key-do-not-use-in-production"}, "TRAINYARD_SECRET_KEY must be set"),
        ({"TRAINYARD_SECRET_KEY": "short"}, "at least 50 characters"),
        ({"TRAINYARD_SECRET_KEY": secrets.token_urlsafe(64), "TRAINYARD_DEBUG": "true"}, "TRAINYARD_DEBUG must be off"),
    ],
    ids=["no-key", "default-key", "short-key", "debug-on"],
)
def test_production_refuses_unsafe_settings(env: dict[str, str], message: str) -> None:
    result = _manage("check", **env)
    assert result.returncode != 0
    assert message in result.stderr
