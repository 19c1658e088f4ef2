"""`POST /api/v1/runs/trials/` checks the `project` it is sent, as a submission does (issue 27,
part 4): it was ignored, so any project, another team's included, was answered."""

from __future__ import annotations

from typing import Any

import pytest

from tests.runs.factories import local_pool, make_sweep_template


@pytest.fixture
def sweep(cast: Any) -> None:
    local_pool("2.0")
    make_sweep_template()


def test_trials_checks_its_project(cast: Any, sweep: None) -> None:
    alice = cast.client(cast.alice)

    def trials(project: Any) -> Any:
        return alice.post("/api/v1/runs/trials/", {"project": project, "template": "sweep", "params": {}}, format="json")

    assert trials(cast.digits.pk).json() == {"trials": 4, "sweep": True}
    assert trials("vision/digits").json() == {"trials": 4, "sweep": True}
    for ref in (cast.tinylm.pk, "nlp/tiny-lm", 999_999, "vision/nope", ""):
        response = trials(ref)
        assert response.status_code == 400, ref
        assert set(response.json()["error"]["fields"]) == {"project"}, ref
    # Another team's project is answered exactly as a missing one: nothing says it exists.
    other = trials(cast.tinylm.pk).json()["error"]["fields"]["project"][0]
    missing = trials(999_999).json()["error"]["fields"]["project"][0]
    assert other.replace(str(cast.tinylm.pk), "N") == missing.replace("999999", "N")
    # Without a project (the submit page asks before one is chosen) the count is still answered.
    assert alice.post("/api/v1/runs/trials/", {"template": "sweep", "params": {}}, format="json").json()["trials"] == 4
