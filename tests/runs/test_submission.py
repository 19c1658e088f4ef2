"""One Submission value and one validation: the API, the form, the forecast and run_submit read
a submission the same way and refuse it for the same reasons."""

from __future__ import annotations

import dataclasses
from html import unescape
from typing import Any

import pytest
from django.test import Client

from apps.core.errors import ServiceError
from apps.runs.models import Run
from apps.runs.services.submission import Check, Submission, submission_from_data, submission_validate
from apps.runs.services.submit import run_submit
from tests.runs.factories import DIGITS_SCHEMA, GOOD_TAGS, body, form_data, local_pool, make_template


@pytest.fixture
def digits(cast: Any) -> Any:
    local_pool()
    return make_template()


def test_the_parser_takes_the_submission_fields_and_the_value_is_frozen() -> None:
    submission = submission_from_data({"project": "vision/digits", "template": "digits-classifier", "priority": "low",
                                       "action": "reload", "p_steps": "3"})
    assert (submission.project, submission.template, submission.priority) == ("vision/digits", "digits-classifier", "low")
    assert submission.tags is None and submission.params == {}
    with pytest.raises(dataclasses.FrozenInstanceError):
        submission.priority = "urgent"  # type: ignore[misc]


def test_validation_resolves_and_writes_nothing(cast: Any, digits: Any) -> None:
    submission = submission_from_data(body(cast, params={"steps": 7}, resources={"nodes": 2}, name="try"))
    valid = submission_validate(submission=submission, user=cast.alice)
    assert valid.project == cast.digits and valid.template == digits and valid.name == "try"
    assert valid.params["steps"] == 7 and valid.resources.nodes == 2 and valid.tags["owner"] == "alice"
    assert Run.objects.count() == 0


def test_every_entry_point_refuses_the_same_fields(cast: Any, digits: Any) -> None:
    bad = {"params": {"lr": 9}, "priority": "asap", "tags": {**GOOD_TAGS, "dataset": ""}}
    with pytest.raises(ServiceError) as direct:
        run_submit(user=cast.alice, submission=submission_from_data(body(cast, **bad)))
    api = cast.client(cast.alice).post("/api/v1/runs/", body(cast, **bad), format="json").json()["error"]["fields"]
    dry_run = cast.client(cast.alice).post("/api/v1/queue/forecast/", body(cast, **bad), format="json").json()["error"]["fields"]
    assert set(direct.value.fields) == set(api) == set(dry_run) == {"params.lr", "priority", "tags.dataset"}
    page = Client()
    page.force_login(cast.alice)
    html = unescape(page.post("/runs/new/", form_data(cast, p_lr="9", priority="asap", tag_dataset="")).content.decode())
    for message in (*api["params.lr"], *api["priority"], *api["tags.dataset"]):
        assert message in html
    assert Run.objects.count() == 0


def test_the_place_in_line_check_leaves_out_the_rest(cast: Any, digits: Any) -> None:
    make_template("finetune", "fine-tune", DIGITS_SCHEMA)
    half = Submission(project=cast.digits.pk, template="finetune", name="n" * 500)
    assert submission_validate(submission=half, user=cast.alice, check=Check.PLACE).name == ""
    with pytest.raises(ServiceError) as refused:
        submission_validate(submission=dataclasses.replace(half, tags={}), user=cast.alice, check=Check.DRY_RUN)
    assert {"name", "tags.task", "init_run"} <= set(refused.value.fields)


def test_a_forecast_reads_init_run_inside_params_as_the_submission_does(cast: Any, digits: Any) -> None:
    make_template("finetune", "fine-tune", DIGITS_SCHEMA)
    dry_run = body(cast, template="finetune", params={"init_run": 99999})
    forecast = cast.client(cast.alice).post("/api/v1/queue/forecast/", dry_run, format="json").json()["error"]["fields"]
    submitted = cast.client(cast.alice).post("/api/v1/runs/", dry_run, format="json").json()["error"]["fields"]
    assert forecast == submitted == {"init_run": ["no such run 99999"]}
