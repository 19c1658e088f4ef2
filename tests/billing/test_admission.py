"""Admission against budgets: refusals name the figures (service, API, form), reservations
count, and concurrent submissions cannot overspend (real threads on PostgreSQL)."""

from __future__ import annotations

import html
import threading
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection, connections
from django.utils import timezone

from apps.billing.models import Budget
from apps.billing.selectors import period_for
from apps.billing.services import budget_admission_check, budget_create
from apps.core.errors import ServiceError
from apps.runs.models import Run, RunStatus
from apps.runs.services.submit import ADMISSION_CHECKS, run_submit
from apps.tenants.services import project_create
from tests.billing.helpers import make_pool, make_template

TAGS = {"task": "classify", "dataset": "digits", "candidate": "baseline", "family": "fam-a"}


@pytest.fixture
def local(cast: Any) -> Any:
    pool = make_pool("local", prices=[(datetime(2024, 1, 1, tzinfo=UTC), "0.50")])
    template = make_template("digits")
    return pool, template


def submit(cast: Any, template: Any, *, project: Any = None, devices: int = 2, runtime: int = 4 * 3600, user: Any = None) -> Run:
    return run_submit(project=project or cast.digits, template=template, params={}, tags=TAGS, priority="normal",
                      resources={"pool": "local", "devices_per_node": devices, "max_runtime_s": runtime}, user=user or cast.alice)


def test_check_is_registered() -> None:
    assert budget_admission_check in ADMISSION_CHECKS


def test_refusal_names_budget_left_and_cost(cast: Any, local: Any) -> None:
    _, template = local
    budget_create(team=cast.vision, project=cast.digits, amount="10.00")
    submit(cast, template)  # $4.00 reserved
    submit(cast, template)  # $8.00 reserved
    with pytest.raises(ServiceError) as err:
        submit(cast, template)
    label = period_for(at=timezone.now()).label
    assert err.value.code == "budget_exceeded"
    assert err.value.message == (
        f"Budget 'vision/digits {label}' has $2.00 left of $10.00 ($8.00 held by unfinished runs); "
        "this run would cost up to $4.00 (2 devices × 4.0 h, its max runtime, × $0.50/device-hour)."
    )
    assert Run.objects.filter(project=cast.digits).count() == 2
    # A finished run releases its reservation: room again.
    Run.objects.filter(project=cast.digits).update(status=RunStatus.CANCELLED)
    submit(cast, template)
    # Another team's budget is not this project's business.
    submit(cast, template, project=cast.tinylm, user=cast.bob, devices=8)


def test_cost_is_predicted_from_runs_like_it_when_there_are_some(cast: Any, local: Any) -> None:
    """With finished runs like this one (same team, template and devices), admission prices the
    predicted runtime (their median, here 1 h) instead of the 4 h max runtime, and says so."""
    pool, template = local
    now = timezone.now()
    for minutes in (50, 60, 70):
        Run.objects.create(project=cast.digits, template=template, pool=pool, nodes=1, devices_per_node=2, max_runtime_s=4 * 3600,
                           entrypoint="python -m x", status=RunStatus.SUCCEEDED, started_at=now - timedelta(hours=3),
                           finished_at=now - timedelta(hours=3) + timedelta(minutes=minutes))
    budget_create(team=cast.vision, project=cast.digits, amount="2.50")
    submit(cast, template)  # $1.00 predicted: admitted, and holds $1.00
    submit(cast, template)
    with pytest.raises(ServiceError) as err:
        submit(cast, template)
    assert err.value.message.endswith(
        "has $0.50 left of $2.50 ($2.00 held by unfinished runs); "
        "this run would cost about $1.00 (2 devices × 1.0 h, the predicted runtime, × $0.50/device-hour).")


def test_team_budget_applies_to_all_its_projects(cast: Any, local: Any) -> None:
    _, template = local
    other = project_create(team=cast.vision, slug="other", name="Other")
    budget_create(team=cast.vision, project=None, amount="5.00")
    submit(cast, template, project=other)
    with pytest.raises(ServiceError, match=r"Budget 'vision \(team\) .*' has \$1.00 left of \$5.00"):
        submit(cast, template)


def test_api_refusal_is_400_budget_exceeded(cast: Any, local: Any) -> None:
    _, template = local
    budget_create(team=cast.vision, project=cast.digits, amount="3.00")
    response = cast.client(cast.alice).post(
        "/api/v1/runs/",
        {"project": cast.digits.pk, "template": template.slug, "params": {}, "tags": TAGS,
         "resources": {"pool": "local", "devices_per_node": 2, "max_runtime_s": 4 * 3600}},
        format="json",
    )
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "budget_exceeded"
    assert ("has $3.00 left of $3.00; this run would cost up to $4.00 (2 devices × 4.0 h, its max runtime, × $0.50/device-hour)"
            in error["message"])


def test_form_shows_refusal(cast: Any, local: Any, client: Any) -> None:
    _, template = local
    budget_create(team=cast.vision, project=cast.digits, amount="3.00")
    client.force_login(cast.alice)
    response = client.post("/runs/new/", {
        "project": str(cast.digits.pk), "template": template.slug, **{f"tag_{k}": v for k, v in TAGS.items()},
        "res_pool": "local", "res_nodes": "1", "res_devices_per_node": "2", "res_max_runtime_s": str(4 * 3600),
    })
    assert response.status_code == 400
    text = html.unescape(response.content.decode())
    assert "has $3.00 left of $3.00; this run would cost up to $4.00 (2 devices × 4.0 h, its max runtime, × $0.50/device-hour)." in text
    assert not Run.objects.exists()


@pytest.mark.postgres
@pytest.mark.skipif(connection.vendor != "postgresql", reason="needs PostgreSQL (set DATABASE_URL)")
def test_concurrent_submissions_never_overspend(transactional_db: Any, cast: Any, local: Any) -> None:
    """50 threads, each with its own connection, submit $1 runs against a $10 team budget split
    over two projects (so the project lock in submit does not serialise them: the budget lock must)."""
    _, template = local
    other = project_create(team=cast.vision, slug="other", name="Other")
    budget_create(team=cast.vision, project=None, amount="10.00")
    barrier = threading.Barrier(50)
    results: list[str] = []
    lock = threading.Lock()

    def worker(i: int) -> None:
        try:
            barrier.wait(timeout=30)
            submit(cast, template, project=other if i % 2 else cast.digits, devices=1, runtime=3600 * 2)
            outcome = "ok"
        except ServiceError as err:
            outcome = err.code
        finally:
            connections.close_all()
        with lock:
            results.append(outcome)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(set(results)) == ["budget_exceeded", "ok"]
    assert results.count("ok") == 10, results  # 1 device x 2 h x $0.50 = $1.00 each: exactly 10 fit in $10.00
    assert results.count("budget_exceeded") == 40
    assert Run.objects.filter(project__team=cast.vision).count() == 10
    assert Budget.objects.get().amount == Decimal("10.00")
