"""A live stack for the CLI tests (web, Celery worker, one real agent), shared by a module, and a
way to run the CLI as a subprocess with its config under a temporary HOME."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.agents.helpers import start_agent
from tests.fixtures.live import PYTHON, ROOT, LiveStack


@dataclass
class Cli:
    home: Path
    server: str = ""

    @property
    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINYARD_")}
        env.update(HOME=str(self.home), XDG_CONFIG_HOME=str(self.home / ".config"), PYTHONUNBUFFERED="1",
                   PYTHONPATH=str(ROOT / "sdk"))
        return env

    def argv(self, *args: str) -> list[str]:
        return [PYTHON, "-m", "trainyard.cli", *args]

    def __call__(self, *args: str, stdin: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.argv(*args), input=stdin, capture_output=True, text=True, env=self.env, timeout=timeout,
                              cwd=self.home)

    def popen(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(self.argv(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=self.env,
                                cwd=self.home)


@pytest.fixture(scope="module")
def cli_stack(tmp_path_factory: pytest.TempPathFactory, redis_url: str) -> Iterator[LiveStack]:
    stack = LiveStack(tmp_path_factory.mktemp("cli-stack"), redis_url)
    # The webhook receivers listen on 127.0.0.1, which the SSRF guard refuses by default.
    stack.env["TRAINYARD_WEBHOOK_ALLOW_PRIVATE"] = "true"
    try:
        stack.start_web()
        # Webhook retries after 0.5 s, 1 s, ... so the live webhook check takes seconds.
        stack.env["TRAINYARD_WEBHOOK_RETRY_BASE_S"] = "0.5"
        stack.start_worker()
        start_agent(stack, "cli-agent", extra=["--slots", "2"])
        yield stack
    finally:
        stack.close()


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    home = tmp_path / "home"
    home.mkdir()
    return Cli(home)
