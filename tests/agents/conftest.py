from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.agents.helpers import AgentLiveStack
from tests.fixtures.live import LiveStack


@pytest.fixture
def live_stack(tmp_path: Path, redis_url: str) -> Iterator[LiveStack]:
    stack = AgentLiveStack(tmp_path, redis_url)
    try:
        stack.start_web()
        yield stack
    finally:
        stack.close()
