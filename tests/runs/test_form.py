from __future__ import annotations

import pytest
from django.test import Client

from apps.runs.models import Run
from tests.runs.factories import field_block, local_pool, make_template
from tests.runs.factories import form_data as base_form_data


@pytest.fixture
def page(cast):
    local_pool("2.0")
    make_template()
    client = Client()
    client.force_login(cast.alice)
    return client


def form_data(cast, **changes):
    return base_form_data(cast, **{"name": "from the form", "p_lr": "0.01", "p_hidden": "64", "p_arch": "mlp",
                                   "p_classes": "[0, 1]", "tag_family": "digits-form", "extra_tags": "note=first try",
                                   **changes})


def test_form_is_generated_from_the_schema(cast, page):
    html = page.get("/runs/new/").content.decode()
    assert 'name="p_steps"' in html and 'min="1"' in html and 'max="100000"' in html and 'value="300"' in html
    assert "Optimizer steps." in html and "[1 – 100000]" in html
    # Defaults read as JSON, the way the fields take them: false and [0, 1], not False.
    assert "default false" in html and "default False" not in html
    assert '<option value="cnn">' in html and 'name="p_amp"' in html
    assert "Expected cost: at most <strong id=\"expected-cost\">$1.00</strong>" in html and "this run's max runtime" in html
    assert 'href="/queue/"' in html
    # The pool has no node yet: still choosable, but the choice says so.
    assert "local ($2.00/device-hour) — no node taking new runs</option>" in html


def test_form_submits_and_redirects_to_the_run(cast, page):
    response = page.post("/runs/new/", form_data(cast))
    run = Run.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/runs/{run.pk}/"
    assert run.params["steps"] == 25 and run.params["lr"] == 0.01 and run.params["classes"] == [0, 1] and run.params["amp"] is False
    assert run.tags == {"task": "classification", "dataset": "digits", "candidate": "baseline", "family": "digits-form",
                        "note": "first try", "owner": "alice"}


@pytest.mark.parametrize(("changes", "block", "text"), [
    ({"p_lr": "5"}, "p_lr", "must be ≤ 1.0 (got 5)"),
    ({"p_steps": "lots"}, "p_steps", "must be of type integer"),
    ({"p_classes": "[1, "}, "p_classes", "must be valid JSON"),
    ({"tag_dataset": ""}, "tag_dataset", "this tag is required"),
    ({"res_devices_per_node": "64"}, "res_devices_per_node", "must be ≤ 4 (got 64)"),
])
def test_form_errors_are_inline_and_nothing_is_queued(cast, page, changes, block, text):
    response = page.post("/runs/new/", form_data(cast, **changes))
    assert response.status_code == 400
    html = response.content.decode()
    assert "Nothing was queued." in html
    assert text in field_block(html, block)
    assert Run.objects.count() == 0


def test_form_lists_only_engineer_projects(cast):
    local_pool()
    make_template()
    viewer = Client()
    viewer.force_login(cast.victor)
    html = viewer.get("/runs/new/").content.decode()
    assert "you cannot submit runs" in html and "vision/digits" not in html
    alice = Client()
    alice.force_login(cast.alice)
    response = alice.post("/runs/new/", form_data(cast, project=str(cast.tinylm.pk)))
    # Not one of alice's projects: the form falls back to hers, never showing the other team's.
    assert response.status_code == 400 and "nlp/tiny-lm" not in response.content.decode()
    assert "no such project" in response.content.decode() and Run.objects.count() == 0


def test_one_bad_field_of_the_form_does_not_hide_the_others(cast, page):
    # The form's own checks (a bad extra-tags line, a param that is not a number) used to stop
    # there: the other mistakes showed only on the next try.
    response = page.post("/runs/new/", form_data(cast, extra_tags="novalue", p_steps="lots", tag_dataset="",
                                                 res_max_runtime_s="-100", priority="asap"))
    assert response.status_code == 400
    html = response.content.decode()
    assert "write one key=value per line" in html and "must be one of urgent, normal, low" in html
    assert "must be of type integer" in field_block(html, "p_steps")
    assert "this tag is required" in field_block(html, "tag_dataset")
    assert "must be ≥" in field_block(html, "res_max_runtime_s")
    assert Run.objects.count() == 0
