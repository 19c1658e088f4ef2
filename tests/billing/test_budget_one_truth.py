"""Issue 29: one reading of "budget left" on every surface (API, pages, CLI, forecast,
admission), an overspent budget reads "$0.00 left (overspent by $0.59)"; a dry run with tags
is refused exactly when the submission is; alerts re-arm when the amount is raised, show only
what is crossed at the current amount, and several crossed at once are one message."""

from __future__ import annotations

import io
from contextlib import redirect_stdout
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.core import mail
from django.test import Client
from django.utils import timezone
from trainyard import _cli_reports

from apps.audit.models import AuditEvent
from apps.billing import tasks
from apps.billing.models import BudgetAlert
from apps.billing.services import accrual_run, budget_alerts_check, budget_create, budget_update
from apps.core.errors import ServiceError
from apps.nodes.models import Node, NodePool, NodeState
from apps.runs.services.submit import run_submit
from tests.billing.helpers import make_attempt, make_pool, make_run, make_template

TAGS = {"task": "classify", "dataset": "digits", "candidate": "baseline", "family": "fam-a"}
RESOURCES = {"pool": "local", "devices_per_node": 1, "max_runtime_s": 3600}
OVER = "$0.00 left (overspent by $0.59)"


def _spend(cast: Any, pool: Any, hours: float) -> None:
    """Spend this period: an attempt that ran `hours` on one device, ended a minute ago."""
    end = timezone.now() - timedelta(minutes=1)
    start = max(end - timedelta(hours=hours), end.replace(day=1, hour=0, minute=0, second=0, microsecond=0))
    assert (end - start).total_seconds() == pytest.approx(hours * 3600), "too early in the month for this test"
    make_attempt(make_run(cast.digits, pool, status="succeeded"), started_at=start, ended_at=end)
    accrual_run(now=timezone.now())
    # The helper's node has no devices; gone now, it must not cap what a submission may ask for.
    Node.objects.filter(pool=pool).update(state=NodeState.OFFLINE)


@pytest.fixture
def overspent(cast: Any) -> Any:
    pool = make_pool("local", prices=[(datetime(2024, 1, 1, tzinfo=UTC), "1.00")])
    template = make_template("digits")
    budget = budget_create(team=cast.vision, project=cast.digits, amount="8.00")
    _spend(cast, pool, 8.59)  # $8.59 of $8.00
    return budget, template


def _page(user: Any, path: str) -> str:
    client = Client()
    client.force_login(user)
    response = client.get(path)
    assert response.status_code == 200, path
    return response.content.decode()


def test_overspent_budget_reads_the_same_on_api_pages_and_admission(cast: Any, overspent: Any) -> None:
    data = cast.client(cast.alice).get(f"/api/v1/projects/{cast.digits.pk}/budget/").json()
    assert (data["spent"], data["remaining"], data["overspent"]) == ("8.59", "0.00", "0.59")
    listed = cast.client(cast.carol).get("/api/v1/finance/budgets/").json()
    row = next(b for b in listed.get("results", listed) if b["project"] == "vision/digits")
    assert (row["spent"], row["remaining"], row["overspent"]) == ("8.59", "0.00", "0.59")
    for user, path in ((cast.alice, "/budgets/"), (cast.carol, "/finance/"), (cast.alice, f"/projects/{cast.digits.pk}/")):
        html = _page(user, path)
        assert OVER in html and "$-0.59" not in html and "-$0.59" not in html, path
    with pytest.raises(ServiceError) as err:
        run_submit(project=cast.digits, template=overspent[1], params={}, tags=TAGS, resources=RESOURCES, user=cast.alice)
    assert err.value.code == "budget_exceeded" and OVER in err.value.message


class _ApiAsClient:
    """The CLI's client calls, answered by the real API in-process (no server to start here)."""

    def __init__(self, api: Any) -> None:
        self.api = api

    def finance_budgets(self) -> list[dict[str, Any]]:
        data = self.api.get("/api/v1/finance/budgets/").json()
        return list(data.get("results", data))

    def finance_spend(self, **params: Any) -> dict[str, Any]:
        return dict(self.api.get("/api/v1/finance/spend/", {k: v for k, v in params.items() if v is not None}).json())


def test_cli_finance_fallback_uses_the_apis_remaining(cast: Any, overspent: Any) -> None:
    data = _cli_reports._finance_budget(_ApiAsClient(cast.client(cast.carol)), "vision/digits")  # type: ignore[arg-type]
    assert data is not None and (data["remaining"], data["overspent"]) == ("0.00", "0.59")
    out = io.StringIO()
    with redirect_stdout(out):
        _cli_reports._print_budget(data)
    assert "0.00 (overspent by 0.59)" in out.getvalue() and "-0.59" not in out.getvalue()


def test_dry_run_with_tags_is_refused_exactly_as_the_submission(cast: Any, overspent: Any) -> None:
    template = overspent[1]
    body = {"project": cast.digits.pk, "template": template.slug, "params": {}, "resources": RESOURCES}
    api = cast.client(cast.alice)
    dry = api.post("/api/v1/queue/forecast/", {**body, "tags": TAGS}, format="json")
    real = api.post("/api/v1/runs/", {**body, "tags": TAGS}, format="json")
    assert dry.status_code == real.status_code == 400
    assert dry.json()["error"]["code"] == real.json()["error"]["code"] == "budget_exceeded"
    assert dry.json()["error"]["message"] == real.json()["error"]["message"]
    # Within budget, the dry run answers a forecast, and the submission queues.
    budget_update(budget=overspent[0], amount="100.00")
    assert api.post("/api/v1/queue/forecast/", {**body, "tags": TAGS}, format="json").status_code == 200
    assert api.post("/api/v1/runs/", {**body, "tags": TAGS}, format="json").status_code == 201


def test_raising_the_amount_rearms_alerts_and_pages_show_only_crossed_ones(
        cast: Any, overspent: Any, django_capture_on_commit_callbacks: Any) -> None:
    budget = overspent[0]
    with django_capture_on_commit_callbacks(execute=True):
        fired = budget_alerts_check(notify=tasks._queue_notify)
    # 50%, 80% and 100% crossed at once: all recorded, one message naming the highest.
    assert [a.threshold for a in fired] == [50, 80, 100]
    assert len(mail.outbox) == 1 and "reached 100%" in mail.outbox[0].subject
    assert "Alerts sent: 50%, 80%, 100%" in _page(cast.alice, "/budgets/")

    budget_update(budget=budget, amount="12.00")  # 8.59 of 12.00 = 71.6%: 80% and 100% re-arm
    period = timezone.now().strftime("%Y-%m")
    assert sorted(BudgetAlert.objects.filter(budget=budget, period=period).values_list("threshold", flat=True)) == [50]
    event = AuditEvent.objects.filter(action="budget.alerts_rearm").get()
    assert event.before["thresholds"] == [80, 100]
    html = _page(cast.alice, "/budgets/")
    assert "Alerts sent: 50%" in html and "80%, 100%" not in html.split("Alerts sent:")[1].split("</p>")[0]
    data = cast.client(cast.alice).get(f"/api/v1/projects/{cast.digits.pk}/budget/").json()
    assert [a["threshold"] for a in data["alerts"]] == [50]

    # Crossing 80% again (at the new amount) sends one message again.
    _spend(cast, NodePool.objects.get(name="local"), 1.5)  # 10.09 of 12.00 = 84%
    with django_capture_on_commit_callbacks(execute=True):
        assert [a.threshold for a in budget_alerts_check(notify=tasks._queue_notify)] == [80]
    assert len(mail.outbox) == 2 and "reached 80%" in mail.outbox[1].subject


def test_alerts_above_the_current_usage_are_not_shown(cast: Any, overspent: Any) -> None:
    """An amount raised outside budget_update (a script, the admin): what is shown still only
    lists thresholds crossed at the current amount, so "used 8.6%" never sits by "100% crossed"."""
    budget = overspent[0]
    budget_alerts_check()
    type(budget).objects.filter(pk=budget.pk).update(amount=100)
    data = cast.client(cast.alice).get(f"/api/v1/projects/{cast.digits.pk}/budget/").json()
    assert data["percent"] == pytest.approx(8.59) and data["alerts"] == []
    assert "Alerts sent" not in _page(cast.alice, "/budgets/")
