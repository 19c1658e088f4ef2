"""The requirements split (issue 26): requirements.txt is the runtime alone, all pinned; tests,
lint and browser tools live in requirements-dev.txt, which `make` installs."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PIN = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[A-Za-z0-9.+!-]+)$")
# Test runners and their plugins, property testing, factories, browsers, API fuzzers, linters,
# type checkers and stubs: none belongs in the production image.
DEV_ONLY = re.compile(r"^(pytest.*|hypothesis.*|playwright|schemathesis|ruff|mypy|mypy-extensions|.*-stubs|.*-stubs-ext|"
                      r"types-.*|factory-boy|faker|coverage|pyright|black|flake8|isort|pylint|selenium|locust|moto)$")


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _lines(path: Path) -> list[str]:
    return [line.split(" #")[0].strip() for line in path.read_text().splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


def _pins(path: Path, *, includes: tuple[str, ...] = ()) -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in _lines(path):
        if line.startswith("-r "):
            assert line[3:].strip() in includes, f"{path.name}: unexpected include {line!r}"
            continue
        match = PIN.match(line)
        assert match, f"{path.name}: {line!r} is not pinned as name==version"
        name = _canonical(match["name"])
        assert name not in pins, f"{path.name}: {name} listed twice"
        pins[name] = match["version"]
    return pins


def test_runtime_requirements_are_pinned_and_hold_no_dev_tool() -> None:
    runtime = _pins(ROOT / "requirements.txt")
    assert not [name for name in runtime if DEV_ONLY.match(name)]
    # What the portal needs to serve at all: if one of these moved to dev, the image would not start.
    for name in ("django", "djangorestframework", "gunicorn", "celery", "psycopg", "torch", "whitenoise"):
        assert name in runtime, name
    assert runtime["torch"] == "2.13.0"


def test_dev_requirements_build_on_the_runtime_and_hold_the_tools() -> None:
    runtime = _pins(ROOT / "requirements.txt")
    dev = _pins(ROOT / "requirements-dev.txt", includes=("requirements.txt",))
    assert "-r requirements.txt" in _lines(ROOT / "requirements-dev.txt")
    assert not set(runtime) & set(dev), "a package is pinned in both files"
    for name in ("pytest", "pytest-django", "hypothesis", "playwright", "schemathesis", "ruff", "mypy", "django-stubs",
                 "factory-boy"):
        assert name in dev, name


def test_bench_requirements_are_pinned() -> None:
    assert _pins(ROOT / "requirements-bench.txt")


def test_makefile_installs_the_dev_set() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert "-r requirements-dev.txt" in makefile


@pytest.mark.slow
def test_pip_resolves_the_runtime_to_exactly_what_is_listed() -> None:
    """What `pip install -r requirements.txt` would install (resolved, nothing installed): the
    listed pins and nothing else, so no dev tool arrives as a dependency either."""
    result = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--dry-run", "--ignore-installed",
                             "--report", "-", "-r", "requirements.txt"], cwd=ROOT, capture_output=True, text=True,
                            timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    resolved = {_canonical(item["metadata"]["name"]): item["metadata"]["version"] for item in report["install"]}
    listed = _pins(ROOT / "requirements.txt")
    assert set(resolved) == set(listed), f"unlisted: {set(resolved) - set(listed)}; unused: {set(listed) - set(resolved)}"
    assert not [name for name in resolved if DEV_ONLY.match(name)]
    # A local build tag (torch's +cpu) is the same pin.
    assert {name: version.split("+")[0] for name, version in resolved.items()} == listed
