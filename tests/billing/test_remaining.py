"""A budget's "remaining" is what admission would still let in: the amount less this period's
spend and what unfinished runs may still spend (issue 27, part 4: it ignored the reserved
part), the same figure on the API, the budgets page and the finance page."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from django.test import Client

from apps.billing.services import budget_create
from apps.core.errors import ServiceError
from apps.runs.services.submit import run_submit
from tests.billing.helpers import make_pool, make_template

TAGS = {"task": "classify", "dataset": "digits", "candidate": "baseline", "family": "fam-a"}


def submit(cast: Any, template: Any) -> None:
    # 2 devices × 4 h (its max runtime) × $0.50 = $4.00 held until it finishes.
    run_submit(project=cast.digits, template=template, params={}, tags=TAGS, priority="normal",
               resources={"pool": "local", "devices_per_node": 2, "max_runtime_s": 4 * 3600}, user=cast.alice)


@pytest.fixture
def reserved(cast: Any) -> Any:
    make_pool("local", prices=[(datetime(2024, 1, 1, tzinfo=UTC), "0.50")])
    template = make_template("digits")
    budget_create(team=cast.vision, project=cast.digits, amount="10.00")
    submit(cast, template)
    return template


def page(user: Any, path: str) -> str:
    client = Client()
    client.force_login(user)
    response = client.get(path)
    assert response.status_code == 200
    return response.content.decode()


def test_remaining_subtracts_reserved_spend_everywhere(cast: Any, reserved: Any) -> None:
    data = cast.client(cast.alice).get(f"/api/v1/projects/{cast.digits.pk}/budget/").json()
    assert (data["spent"], data["reserved"], data["remaining"]) == ("0.00", "4.00", "6.00")
    for user, path in ((cast.alice, "/budgets/"), (cast.carol, "/finance/"), (cast.alice, f"/projects/{cast.digits.pk}/")):
        html = page(user, path)
        assert "· $6.00 left" in html and "$4.00 held by unfinished runs" in html, path
        assert "$10.00 left" not in html, path
    # It is the figure admission goes by: one more $4.00 run fits, a third does not.
    submit(cast, reserved)
    assert cast.client(cast.alice).get(f"/api/v1/projects/{cast.digits.pk}/budget/").json()["remaining"] == "2.00"
    with pytest.raises(ServiceError) as err:
        submit(cast, reserved)
    assert "has $2.00 left of $10.00" in err.value.message
