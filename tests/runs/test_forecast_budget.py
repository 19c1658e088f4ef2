"""Issue 29, item 1: the forecast refuses exactly when the submission would, with tags (a dry
run: the same 400) or without (the submit page's live forecast: "Would be refused: ..." in the
submission's own words, never "would wait ... held"); refusals render once, with no raw keys."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from django.test import Client

from apps.billing.models import Budget
from apps.runs.models import Run
from tests.agents.server import register
from tests.runs.factories import body, form_data, local_pool, make_template

URL = "/api/v1/queue/forecast/"
RESOURCES = {"max_runtime_s": 3600}


@pytest.fixture
def digits(cast: Any) -> None:
    pool = local_pool(price="2.0")
    make_template()
    register(pool, "n1")


# $0: used up, so the scheduler would also hold it. $1: nothing spent, so a pass would start it at
# once, but an hour on a $2 device does not fit: the submission is refused all the same.
@pytest.mark.parametrize("amount", ["0", "1.00"])
def test_the_forecast_refuses_exactly_what_the_submission_refuses(cast: Any, digits: None, amount: str) -> None:
    budget = Budget.objects.create(team=cast.vision, project=cast.digits, amount=Decimal(amount))
    alice = cast.client(cast.alice)
    submission = body(cast, resources=RESOURCES)
    place = {k: v for k, v in submission.items() if k != "tags"}

    real = alice.post("/api/v1/runs/", submission, format="json")
    assert real.status_code == 400 and real.json()["error"]["code"] == "budget_exceeded"
    refusal = real.json()["error"]["message"]
    assert real.json()["error"]["fields"] == {} and "non_field_errors" not in refusal

    dry = alice.post(URL, submission, format="json")
    assert dry.status_code == 400 and dry.json()["error"]["code"] == "budget_exceeded"
    assert dry.json()["error"]["message"] == refusal

    asked = alice.post(URL, place, format="json")
    assert asked.status_code == 200, asked.content
    forecast = asked.json()
    assert forecast["refused"] is True and forecast["summary"] == f"Would be refused: {refusal}"
    assert forecast["reason"]["code"] == "budget" and forecast["reason"]["message"] == refusal
    assert not forecast["starts_now"] and forecast["position"] == 0 and forecast["estimated_start"]["at"] is None
    assert "wait" not in forecast["summary"].lower() and "at once" not in forecast["summary"]
    assert Run.objects.count() == 0

    # Raised: neither refuses, and the forecast is a place in line again.
    Budget.objects.filter(pk=budget.pk).update(amount=Decimal("100.00"))
    forecast = alice.post(URL, place, format="json").json()
    assert forecast["refused"] is False and forecast["starts_now"] and forecast["summary"].startswith("Would start at once")
    assert alice.post(URL, submission, format="json").status_code == 200
    assert alice.post("/api/v1/runs/", submission, format="json").status_code == 201


def test_the_submit_page_shows_a_budget_refusal_once_without_raw_keys(cast: Any, digits: None) -> None:
    Budget.objects.create(team=cast.vision, project=cast.digits, amount=Decimal("1.00"))
    client = Client()
    client.force_login(cast.alice)
    response = client.post("/runs/new/", form_data(cast, res_max_runtime_s="3600"))
    html = response.content.decode()
    assert response.status_code == 400 and Run.objects.count() == 0
    assert html.count("this run would cost") == 1, html
    assert "non_field_errors" not in html and "Non field errors" not in html
