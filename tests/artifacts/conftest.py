from __future__ import annotations

from typing import Any

import pytest

from apps.runs.models import Run
from apps.runs.services.submit import run_submit
from tests.runs.factories import GOOD_TAGS, local_pool, make_template


@pytest.fixture
def media(tmp_path: Any, settings: Any) -> Any:
    settings.MEDIA_ROOT = tmp_path / "media"
    return settings.MEDIA_ROOT


@pytest.fixture
def alice_run(cast: Any, media: Any) -> Run:
    local_pool("2.0")
    make_template()
    return run_submit(user=cast.alice, project=cast.digits, template="digits-classifier", params={"steps": 20},
                      tags=dict(GOOD_TAGS))


@pytest.fixture
def bob_run(cast: Any, alice_run: Run) -> Run:
    return run_submit(user=cast.bob, project=cast.tinylm, template="digits-classifier", params={"steps": 20},
                      tags=dict(GOOD_TAGS))
