"""The `tracked` pool holds runs MLflow clients log; it runs nothing. A submission (API, form,
forecast) naming it is a 400 naming the pool; the submit form, the queue and the nodes pages
and their APIs leave it out rather than show an empty pool that work could wait in."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from apps.mlflow_api.services import TRACKED_POOL, tracked_run_create
from apps.nodes.closed import closed_pool_admission_check
from apps.runs.models import Run
from apps.runs.services.submit import ADMISSION_CHECKS
from tests.runs.factories import body, form_data, local_pool, make_template

pytestmark = pytest.mark.django_db

REASON = "pool tracked holds runs logged by MLflow clients; it runs nothing"


@pytest.fixture
def tracked_pool(cast: Any) -> Any:
    local_pool()
    make_template()
    run = tracked_run_create(user=cast.alice, project=cast.digits, run_name="logged")
    assert run.pool.name == TRACKED_POOL
    return run.pool


def test_a_submission_naming_the_tracked_pool_is_a_400_naming_pool(cast: Any, tracked_pool: Any) -> None:
    assert closed_pool_admission_check in ADMISSION_CHECKS
    client = cast.client(cast.alice)
    before = Run.objects.count()
    response = client.post("/api/v1/runs/", body(cast, resources={"pool": TRACKED_POOL}), format="json")
    assert response.status_code == 400, response.content
    assert response.json()["error"]["fields"]["resources.pool"] == [REASON]
    # The forecast asks the same checks: refused with the same words, not "would wait".
    forecast = client.post("/api/v1/queue/forecast/", body(cast, resources={"pool": TRACKED_POOL}), format="json")
    assert forecast.status_code == 400 and forecast.json()["error"]["fields"]["resources.pool"] == [REASON]
    asked = {k: v for k, v in body(cast, resources={"pool": TRACKED_POOL}).items() if k != "tags"}  # as the form asks
    untagged = client.post("/api/v1/queue/forecast/", asked, format="json")
    assert untagged.status_code == 400 and untagged.json()["error"]["fields"]["resources.pool"] == [REASON]
    assert Run.objects.count() == before
    # Another pool is still fine.
    assert client.post("/api/v1/runs/", body(cast), format="json").status_code == 201


def test_the_tracked_pool_is_no_choice_on_the_form_queue_or_nodes(cast: Any, tracked_pool: Any) -> None:
    page = Client()
    page.force_login(cast.alice)
    form = page.get("/runs/new/?template=digits-classifier").content.decode()
    assert '<option value="local"' in form and f'<option value="{TRACKED_POOL}"' not in form
    posted = page.post("/runs/new/", form_data(cast, res_pool=TRACKED_POOL))
    assert posted.status_code == 400 and REASON in posted.content.decode()
    queue = page.get("/queue/").content.decode()
    assert f'value="{TRACKED_POOL}"' not in queue and f'data-pool="{TRACKED_POOL}"' not in queue
    nodes = page.get("/nodes/").content.decode()
    assert 'data-pool="local"' in nodes and f'data-pool="{TRACKED_POOL}"' not in nodes
    api = cast.client(cast.alice)
    assert TRACKED_POOL not in [p["pool"] for p in api.get("/api/v1/queue/").json()["pools"]]
    assert TRACKED_POOL not in str(api.get("/api/v1/nodes/").json())
    refused = api.get("/api/v1/queue/", {"pool": TRACKED_POOL})
    assert refused.status_code == 400 and REASON in refused.json()["error"]["fields"]["pool"][0]


def test_tracked_runs_say_so_in_the_api_the_run_page_and_the_runs_list(cast: Any, tracked_pool: Any) -> None:
    tracked = Run.objects.get(tracked_only=True)
    api = cast.client(cast.alice)
    scheduled = api.post("/api/v1/runs/", body(cast), format="json").json()["id"]
    assert api.get(f"/api/v1/runs/{tracked.pk}/").json()["tracked_only"] is True
    assert api.get(f"/api/v1/runs/{scheduled}/").json()["tracked_only"] is False
    listed = {r["id"]: r["tracked_only"] for r in api.get("/api/v1/runs/").json()["results"]}
    assert listed == {tracked.pk: True, scheduled: False}
    page = Client()
    page.force_login(cast.alice)
    html = page.get(f"/runs/{tracked.pk}/").content.decode()
    assert 'id="run-tracked"' in html and "Tracked by an MLflow client" in html
    assert 'id="run-tracked"' not in page.get(f"/runs/{scheduled}/").content.decode()
    rows = page.get("/runs/").content.decode()
    tracked_row = rows.split(f'data-run="{tracked.pk}"', 1)[1].split("</tr>", 1)[0]
    scheduled_row = rows.split(f'data-run="{scheduled}"', 1)[1].split("</tr>", 1)[0]
    assert "Tracked by an MLflow client" in tracked_row and "Tracked by an MLflow client" not in scheduled_row
