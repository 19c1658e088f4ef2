"""The finance console as finance people use it: run links only where the run page opens,
refused forms that keep what was typed and say why next to the form, quotas that are not
silently replaced, over-committed pools pointed out, and a home page for finance."""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

from django.test import Client

from apps.audit.models import AuditEvent
from apps.billing.models import Budget, Quota
from apps.nodes.models import Device
from apps.runs.models import Run
from apps.tenants.models import Role
from apps.tenants.services import membership_set
from tests.billing.helpers import make_node


def _logged_in(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _tag(html: str, form_id: str, name: str) -> str:
    """The <input> or <select>…</select> of one field of one form on the page."""
    found = re.search(rf'<(input|select)[^>]*form="{form_id}"[^>]*name="{name}"[^>]*>(.*?</select>)?', html, re.S)
    assert found, f"no field {name} in form {form_id}"
    return found.group(0)


def _value(html: str, form_id: str, name: str) -> str:
    found = re.search(r'value="([^"]*)"', _tag(html, form_id, name))
    assert found
    return found.group(1)


def _selected(html: str, form_id: str, name: str) -> list[str]:
    return re.findall(r'<option value="([^"]*)" selected>', _tag(html, form_id, name))


def _section(html: str, section_id: str) -> str:
    start = html.index(f'<section class="card" id="{section_id}">')
    return html[start:html.index("</section>", start)]


# --- 1. run links ------------------------------------------------------------------------------


def test_top_runs_link_only_to_runs_the_viewer_can_open(cast: Any, spend: Any) -> None:
    vision_runs = list(Run.objects.filter(project=cast.digits).values_list("pk", flat=True))
    nlp_run = Run.objects.get(project=cast.tinylm).pk

    page = _logged_in(cast.carol).get("/finance/").content.decode()
    table = page[page.index('id="top-runs"'):]
    for run_id in [*vision_runs, nlp_run]:
        assert f'href="/runs/{run_id}/"' not in page, "carol is in no team: run pages would be a 404 for her"
        assert f"#{run_id}" in table  # still named, as plain text
    assert _logged_in(cast.carol).get(f"/runs/{nlp_run}/").status_code == 404  # why there is no link

    # Finance in a team sees links to that team's runs only; an admin sees them all.
    membership_set(team=cast.vision, user=cast.carol, role=Role.VIEWER)
    page = _logged_in(cast.carol).get("/finance/").content.decode()
    assert all(f'href="/runs/{run_id}/"' in page for run_id in vision_runs)
    assert f'href="/runs/{nlp_run}/"' not in page
    page = _logged_in(cast.admin).get("/finance/").content.decode()
    assert all(f'href="/runs/{run_id}/"' in page for run_id in [*vision_runs, nlp_run])


# --- 2. refused forms --------------------------------------------------------------------------


def test_refused_new_budget_keeps_the_input_and_says_why_next_to_the_form(cast: Any, spend: Any) -> None:
    client = _logged_in(cast.carol)
    typed = {"scope": f"team:{cast.nlp.pk}", "amount": "-5", "thresholds": "40, 90", "action": "stop_running"}
    response = client.post("/finance/budgets/new/", typed)
    assert response.status_code == 400
    page = response.content.decode()
    limits = _section(page, "limits")
    assert "Budget not created: amount: must be between 0 and 1,000,000,000" in limits
    assert 'id="bf-new-error"' in limits and 'role="alert"' in limits
    assert _value(page, "bf-new", "amount") == "-5" and _value(page, "bf-new", "thresholds") == "40, 90"
    assert _selected(page, "bf-new", "scope") == [f"team:{cast.nlp.pk}"]
    assert _selected(page, "bf-new", "action") == ["stop_running"]
    assert 'aria-invalid="true"' in _tag(page, "bf-new", "amount")
    assert 'action="/finance/budgets/new/#limits"' in page  # the browser comes back scrolled to the form
    assert not Budget.objects.filter(team=cast.nlp).exists()

    response = client.post("/finance/budgets/new/", {**typed, "amount": "abc"})
    assert response.status_code == 400 and "amount: must be a number" in _section(response.content.decode(), "limits")
    # A scope that is not there is a field error, not a 404 page.
    response = client.post("/finance/budgets/new/", {**typed, "scope": "99999", "amount": "10"})
    assert response.status_code == 400 and "scope: choose a project or team" in response.content.decode()


def test_refused_budget_edit_keeps_the_input_and_the_stored_budget(cast: Any, spend: Any) -> None:
    budget = Budget.objects.get()
    audited = AuditEvent.objects.filter(action="budget.update").count()
    response = _logged_in(cast.carol).post(f"/finance/budgets/{budget.pk}/",
                                           {"amount": "abc", "thresholds": "30, 60", "action": "block_new"})
    assert response.status_code == 400
    page = response.content.decode()
    assert "Budget vision/digits not saved: amount: must be a number" in _section(page, "limits")
    form = f"bf-{budget.pk}"
    assert _value(page, form, "amount") == "abc" and _value(page, form, "thresholds") == "30, 60"
    budget.refresh_from_db()
    assert (budget.amount, budget.thresholds) == (Decimal("100.00"), [50, 80, 100])
    assert AuditEvent.objects.filter(action="budget.update").count() == audited


def test_refused_quota_edit_keeps_the_input(cast: Any, spend: Any) -> None:
    quota = Quota.objects.get()
    response = _logged_in(cast.carol).post(f"/finance/quotas/{quota.pk}/", {"guaranteed_devices": "3", "borrow_limit": "x"})
    assert response.status_code == 400
    page = response.content.decode()
    assert "Quota of vision in local not saved: borrow_limit: must be a whole number" in _section(page, "quota-limits")
    assert _value(page, f"qf-{quota.pk}", "guaranteed_devices") == "3" and _value(page, f"qf-{quota.pk}", "borrow_limit") == "x"
    quota.refresh_from_db()
    assert (quota.guaranteed_devices, quota.borrow_limit) == (2, 1)


def test_saved_budget_goes_back_to_its_section(cast: Any, spend: Any) -> None:
    budget = Budget.objects.get()
    response = _logged_in(cast.carol).post(f"/finance/budgets/{budget.pk}/",
                                           {"amount": "75", "thresholds": "50, 100", "action": "block_new"}, follow=True)
    assert response.redirect_chain[-1][0] == "/finance/#limits"
    assert "Budget vision/digits saved." in _section(response.content.decode(), "limits")
    assert AuditEvent.objects.filter(action="budget.update", actor=cast.carol).exists()


# --- 3. quotas: no silent replacement, over-commitment said ------------------------------------


def test_adding_a_quota_that_exists_is_refused(cast: Any, spend: Any) -> None:
    quota = Quota.objects.get()
    events = AuditEvent.objects.filter(action__startswith="quota.").count()
    response = _logged_in(cast.carol).post("/finance/quotas/new/", {"team": str(cast.vision.pk), "pool": str(spend.pk),
                                                                     "guaranteed_devices": "1", "borrow_limit": "0"})
    assert response.status_code == 400
    page = response.content.decode()
    assert "Quota not added: pool: vision already has a quota in local; edit it instead" in _section(page, "quota-limits")
    assert _value(page, "qf-new", "guaranteed_devices") == "1"
    assert _selected(page, "qf-new", "team") == [str(cast.vision.pk)] and _selected(page, "qf-new", "pool") == [str(spend.pk)]
    quota.refresh_from_db()
    assert (quota.guaranteed_devices, quota.borrow_limit) == (2, 1)
    assert AuditEvent.objects.filter(action__startswith="quota.").count() == events


def test_api_refuses_a_second_quota_for_a_team_and_pool(cast: Any, spend: Any) -> None:
    client = cast.client(cast.carol)
    again = client.post("/api/v1/finance/quotas/", {"team": "vision", "pool": "local", "guaranteed_devices": 1}, format="json")
    assert again.status_code == 400, again.content
    assert again.json()["error"]["fields"] == {"pool": ["vision already has a quota in local; edit it instead"]}
    assert Quota.objects.get(team=cast.vision).guaranteed_devices == 2
    created = client.post("/api/v1/finance/quotas/", {"team": "nlp", "pool": "local", "guaranteed_devices": 1}, format="json")
    assert created.status_code == 201 and created.json()["guaranteed_devices"] == 1
    assert AuditEvent.objects.filter(action="quota.create", actor=cast.carol, team_id=cast.nlp.pk).exists()


def test_guarantees_beyond_the_pool_are_accepted_and_pointed_out(cast: Any, spend: Any) -> None:
    Device.objects.create(node=make_node(spend), index=0, kind="gpu")  # a one-device pool
    client = _logged_in(cast.carol)
    response = client.post("/finance/quotas/new/", {"team": str(cast.nlp.pk), "pool": str(spend.pk),
                                                    "guaranteed_devices": "50", "borrow_limit": "0"}, follow=True)
    assert response.redirect_chain[-1][0] == "/finance/#quota-limits"
    assert Quota.objects.get(team=cast.nlp).guaranteed_devices == 50
    assert AuditEvent.objects.filter(action="quota.create", actor=cast.carol).exists()
    quotas = _section(response.content.decode(), "quota-limits")
    assert "Quota of nlp in local added. Note: guarantees in local total 52 devices; the pool has 1" in quotas
    assert "Over-committed:" in quotas  # and it stays on the table
    assert "Over-committed:" in _section(client.get("/finance/").content.decode(), "quota-limits")
    listed = cast.client(cast.carol).get("/api/v1/finance/quotas/").json()
    assert all(q["warnings"] == ["guarantees in local total 52 devices; the pool has 1"] for q in listed["results"])

    # Within the pool's size, nothing to point out.
    client.post(f"/finance/quotas/{Quota.objects.get(team=cast.nlp).pk}/", {"guaranteed_devices": "0", "borrow_limit": "0"})
    Device.objects.create(node=make_node(spend), index=0, kind="gpu")
    assert "Over-committed:" not in client.get("/finance/").content.decode()


# --- 5. home -----------------------------------------------------------------------------------


def test_home_points_finance_without_a_team_to_the_console(cast: Any) -> None:
    response = _logged_in(cast.carol).get("/")
    assert response.status_code == 200
    page = response.content.decode()
    assert 'href="/finance/"' in page and 'href="/finance/#limits"' in page
    assert "Ask a team admin" not in page
    for engineer in (cast.alice, cast.admin):
        assert _logged_in(engineer).get("/").url == "/projects/"
    membership_set(team=cast.vision, user=cast.carol, role=Role.VIEWER)  # finance in a team: projects as usual
    assert _logged_in(cast.carol).get("/").url == "/projects/"
