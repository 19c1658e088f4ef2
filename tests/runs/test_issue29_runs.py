"""Issue 29 on the runs side: a budget refusal on the submit page is shown once, in words,
never under a raw key; the admin lists runs (read-mostly) and says "usage entries"; the form
tags a new run as a baseline, not candidate=candidate."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.test import Client

from apps.billing.services import budget_create
from apps.runs.forms import tag_defaults
from apps.runs.models import Run
from tests.billing.helpers import make_pool, make_run, make_template


def _client(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_budget_refusal_renders_once_without_raw_keys(cast: Any) -> None:
    make_pool("local", prices=[(datetime(2024, 1, 1, tzinfo=UTC), "1.00")])
    template = make_template("digits")
    budget_create(team=cast.vision, project=cast.digits, amount="0.10")
    post = {"project": str(cast.digits.pk), "template": template.slug, "priority": "normal", "res_pool": "local",
            "res_nodes": "1", "res_devices_per_node": "1", "res_max_runtime_s": "3600", "tag_task": "classify",
            "tag_dataset": "digits", "tag_candidate": "baseline", "tag_family": "fam"}
    response = _client(cast.alice).post("/runs/new/", post)
    assert response.status_code == 400
    html = response.content.decode()
    assert "non_field_errors" not in html
    assert html.count("has $0.10 left of $0.10") == 1
    assert not Run.objects.exists()


def test_admin_lists_runs_read_mostly_and_names_usage_entries(cast: Any) -> None:
    run = make_run(cast.digits, make_pool("local"))
    admin = _client(cast.admin)
    index = admin.get("/admin/").content.decode()
    assert "Usage entries" in index and "Usage entrys" not in index and "/admin/runs/run/" in index
    listing = admin.get("/admin/runs/run/")
    assert listing.status_code == 200 and f"/admin/runs/run/{run.pk}/change/" in listing.content.decode()
    assert admin.get(f"/admin/runs/run/{run.pk}/change/").status_code == 200  # viewable
    assert admin.get("/admin/runs/run/add/").status_code == 403
    assert admin.post(f"/admin/runs/run/{run.pk}/delete/", {"post": "yes"}).status_code == 403
    response = admin.post("/admin/runs/run/", {"action": "cancel_runs", "_selected_action": [run.pk]}, follow=True)
    assert response.status_code == 200
    run.refresh_from_db()
    assert run.status in ("cancelled", "cancelling") or run.cancel_requested_at is not None


def test_form_tags_a_new_run_as_baseline(cast: Any) -> None:
    assert tag_defaults(template=make_template("digits"), username="alice")["candidate"] == "baseline"
    html = _client(cast.alice).get("/runs/new/").content.decode()
    assert '<option value="baseline" selected>' in html and '<option value="candidate" selected>' not in html
