"""The budget endpoint (scoped), the finance API and pages (finance and admins only)."""

from __future__ import annotations

import csv
import io
from decimal import Decimal
from typing import Any

from apps.audit.models import AuditEvent
from apps.billing.models import Budget, Quota


def test_project_budget_is_scoped(cast: Any, spend: Any) -> None:
    url = f"/api/v1/projects/{cast.digits.pk}/budget/"
    data = cast.client(cast.alice).get(url).json()
    assert data["project"]["full_slug"] == "vision/digits"
    assert data["budget"]["amount"] == "100.00" and data["budget"]["thresholds"] == [50, 80, 100]
    assert data["spent"] == "3.00" and data["remaining"] == "97.00" and data["percent"] == 3.0
    assert data["burndown"][-1]["spent"] == "3.00"
    assert Decimal(data["forecast"]) >= Decimal("3.00")
    assert cast.client(cast.victor).get(url).status_code == 200  # viewers may look
    for outsider in (cast.bob, cast.outsider):
        response = cast.client(outsider).get(url)
        assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"
    assert cast.client(None).get(url).status_code in (401, 403)
    assert cast.client(cast.bob).get(f"/api/v1/projects/{cast.tinylm.pk}/budget/").json()["budget"] is None


FINANCE_GETS = ["/api/v1/finance/spend/", "/api/v1/finance/budgets/", "/api/v1/finance/quotas/", "/api/v1/finance/ledger.csv"]


def test_finance_api_is_for_finance_and_admins(cast: Any, spend: Any) -> None:
    for user in (cast.alice, cast.bob, cast.victor, cast.outsider):
        for url in FINANCE_GETS:
            response = cast.client(user).get(url)
            assert response.status_code == 403, (user, url)
            assert response.json()["error"]["code"] in ("permission_denied", "forbidden")
        budget = Budget.objects.get()
        assert cast.client(user).patch(f"/api/v1/finance/budgets/{budget.pk}/", {"amount": "1"}, format="json").status_code == 403
    for user in (cast.carol, cast.admin):
        for url in FINANCE_GETS:
            assert cast.client(user).get(url).status_code == 200, (user, url)


def test_finance_spend_groups(cast: Any, spend: Any) -> None:
    client = cast.client(cast.carol)
    teams = client.get("/api/v1/finance/spend/?group_by=team").json()
    assert {r["label"]: r["cost"] for r in teams["rows"]} == {"vision": "3.00", "nlp": "1.00"}
    projects = client.get("/api/v1/finance/spend/?group_by=project").json()
    assert {r["label"] for r in projects["rows"]} == {"vision/digits", "nlp/tiny-lm"}
    assert client.get("/api/v1/finance/spend/?group_by=pool").json()["rows"][0]["cost"] == "4.00"
    assert client.get("/api/v1/finance/spend/?group_by=template").json()["rows"][0]["label"] == "digits"
    bad = client.get("/api/v1/finance/spend/?group_by=colour").json()["error"]
    assert bad["fields"] == {"group_by": ["one of team, project, pool, template"]}
    bad = client.get("/api/v1/finance/spend/?period=november").json()["error"]
    assert "period" in bad["fields"]


def test_finance_budget_and_quota_edits_are_audited(cast: Any, spend: Any) -> None:
    client = cast.client(cast.carol)
    budget = Budget.objects.get()
    response = client.patch(f"/api/v1/finance/budgets/{budget.pk}/", {"amount": "250.00", "thresholds": [90, 50]}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["amount"] == "250.00" and response.json()["thresholds"] == [50, 90]
    event = AuditEvent.objects.filter(action="budget.update").latest("pk")
    assert event.actor == cast.carol and event.before and event.after
    assert event.before["amount"] == "100.00" and event.after["amount"] == "250.00"
    bad = client.patch(f"/api/v1/finance/budgets/{budget.pk}/", {"thresholds": [0, 50]}, format="json")
    assert bad.status_code == 400 and "between 1 and 1000" in bad.json()["error"]["fields"]["thresholds"][0]
    bad = client.patch(f"/api/v1/finance/budgets/{budget.pk}/", {"amount": "-5"}, format="json")
    assert bad.status_code == 400 and "amount" in bad.json()["error"]["fields"]
    created = client.post("/api/v1/finance/budgets/", {"team": "nlp", "amount": "40"}, format="json")
    assert created.status_code == 201 and created.json()["project"] is None
    again = client.post("/api/v1/finance/budgets/", {"team": "nlp", "amount": "40"}, format="json")
    assert again.status_code == 400

    quota = Quota.objects.get()
    response = client.patch(f"/api/v1/finance/quotas/{quota.pk}/", {"guaranteed_devices": 4}, format="json")
    assert response.status_code == 200 and response.json()["guaranteed_devices"] == 4 and response.json()["borrow_limit"] == 1
    assert AuditEvent.objects.filter(action="quota.update", actor=cast.carol).exists()
    bad = client.patch(f"/api/v1/finance/quotas/{quota.pk}/", {"borrow_limit": 10**9}, format="json")
    assert bad.status_code == 400 and "borrow_limit" in bad.json()["error"]["fields"]


def test_ledger_csv_filters(cast: Any, spend: Any) -> None:
    client = cast.client(cast.carol)
    rows = list(csv.DictReader(io.StringIO(b"".join(client.get("/api/v1/finance/ledger.csv").streaming_content).decode())))
    assert {r["team"] for r in rows} == {"vision", "nlp"}
    assert sum(Decimal(r["cost"]) for r in rows) == Decimal("4")
    vision = client.get("/api/v1/finance/ledger.csv?team=vision&kind=close")
    rows = list(csv.DictReader(io.StringIO(b"".join(vision.streaming_content).decode())))
    assert {r["team"] for r in rows} == {"vision"} and {r["outcome"] for r in rows} == {"succeeded", "failed"}
    assert client.get("/api/v1/finance/ledger.csv?run=abc").status_code == 400


def test_pages(cast: Any, spend: Any, client: Any) -> None:
    client.force_login(cast.alice)
    page = client.get("/budgets/").content.decode()
    assert "vision/digits" in page and "nlp/tiny-lm" not in page and "$3.00" in page
    assert "burndown-" in page
    assert "Spend vs budget" in client.get(f"/projects/{cast.digits.pk}/").content.decode()
    for url in ("/finance/", "/finance/ledger.csv"):
        assert client.get(url).status_code == 403
    assert client.post(f"/finance/budgets/{Budget.objects.get().pk}/", {"amount": "1"}).status_code == 403

    client.force_login(cast.carol)
    page = client.get("/finance/").content.decode()
    for text in ("Spend over time", "spend-team-data", "Cost per successful experiment family", "fam-a", "Waste", "failed",
                 "Energy and CO₂ per team", "Top runs by cost", "accuracy=0.9731", "10.0"):
        assert text in page, text
    budget = Budget.objects.get()
    response = client.post(f"/finance/budgets/{budget.pk}/", {"amount": "75", "thresholds": "50, 100", "action": "stop_running"})
    assert response.status_code == 302
    budget.refresh_from_db()
    assert (budget.amount, budget.thresholds, budget.action) == (Decimal("75.00"), [50, 100], "stop_running")
    quota = Quota.objects.get()
    client.post(f"/finance/quotas/{quota.pk}/", {"guaranteed_devices": "3", "borrow_limit": "x"})
    quota.refresh_from_db()
    assert quota.borrow_limit == 1  # refused, message shown, nothing changed
    csv_text = b"".join(client.get("/finance/ledger.csv?team=nlp").streaming_content).decode()
    assert "nlp/tiny-lm" in csv_text and "vision/digits" not in csv_text
