"""Free-text notes on a run: taken by the API, the form and `trainyard submit --notes`, shown on the
run's page and in its API detail; too long is a 400 naming the limit; the forecast is not moved by them."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from apps.runs.models import Run
from tests.runs.factories import GOOD_TAGS, body, form_data, local_pool, make_sweep_template, make_template

NOTES = "Trying a wider MLP.\nSame seed as #12."


@pytest.fixture
def digits(cast: Any) -> Any:
    local_pool()
    return make_template()


def page_client(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_api_takes_notes_and_the_detail_and_run_page_show_them(cast: Any, digits: Any) -> None:
    client = cast.client(cast.alice)
    created = client.post("/api/v1/runs/", body(cast, notes=NOTES), format="json")
    assert created.status_code == 201, created.json()
    run_id = created.json()["id"]
    assert created.json()["notes"] == NOTES and Run.objects.get(pk=run_id).notes == NOTES
    assert client.get(f"/api/v1/runs/{run_id}/").json()["notes"] == NOTES
    html = page_client(cast.alice).get(f"/runs/{run_id}/").content.decode()
    assert '<dt>Notes</dt><dd id="run-notes">Trying a wider MLP.<br>Same seed as #12.</dd>' in html
    plain = client.post("/api/v1/runs/", body(cast), format="json").json()
    assert plain["notes"] == "" and 'id="run-notes"' not in page_client(cast.alice).get(f"/runs/{plain['id']}/").content.decode()


def test_notes_longer_than_the_limit_are_refused_naming_it(cast: Any, digits: Any) -> None:
    response = cast.client(cast.alice).post("/api/v1/runs/", body(cast, notes="x" * 2001), format="json")
    assert response.status_code == 400
    assert "2000" in " ".join(response.json()["error"]["fields"]["notes"])
    assert cast.client(cast.alice).post("/api/v1/runs/", body(cast, notes="x" * 2000), format="json").status_code == 201
    page = page_client(cast.alice).post("/runs/new/", form_data(cast, notes="x" * 2001))
    assert page.status_code == 400 and "must be at most 2000 characters" in page.content.decode()
    assert Run.objects.count() == 1


def test_form_offers_notes_and_submits_them(cast: Any, digits: Any) -> None:
    client = page_client(cast.alice)
    html = client.get("/runs/new/").content.decode()
    assert '<textarea name="notes" id="id_notes" maxlength="2000" rows="3"' in html
    response = client.post("/runs/new/", form_data(cast, notes=NOTES))
    assert response.status_code == 302, response.content.decode()[:2000]
    assert Run.objects.get().notes == NOTES
    # Kept when the form comes back with an error.
    again = client.post("/runs/new/", form_data(cast, notes="keep these", p_steps="lots")).content.decode()
    assert ">keep these</textarea>" in again


def test_a_sweeps_trials_carry_its_notes(cast: Any, digits: Any) -> None:
    make_sweep_template()
    parent = cast.client(cast.alice).post("/api/v1/runs/", body(cast, template="sweep", params={}, notes=NOTES),
                                          format="json").json()
    assert {run.notes for run in Run.objects.filter(pk__in=[parent["id"], *parent["children"]])} == {NOTES}


def test_the_forecast_is_not_moved_by_notes(cast: Any, digits: Any) -> None:
    client = cast.client(cast.alice)
    place = {k: v for k, v in body(cast).items() if k != "tags"}
    without = client.post("/api/v1/queue/forecast/", place, format="json").json()
    with_notes = client.post("/api/v1/queue/forecast/", {**place, "notes": NOTES}, format="json").json()
    assert with_notes["summary"] == without["summary"] and with_notes["position"] == without["position"]
    assert client.post("/api/v1/queue/forecast/", {**body(cast), "notes": NOTES}, format="json").status_code == 200
    assert Run.objects.count() == 0


def test_cli_submit_sends_notes(cast: Any, digits: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # The CLI's HTTP goes through Django's test client (as in tests/cli/test_cli_output.py).
    from trainyard import cli

    from tests.cli.test_cli_output import DjangoTransport

    client = DjangoTransport(cast.alice)
    monkeypatch.setattr(cli, "_client", lambda args: client)
    tags = [f"--tag={k}={v}" for k, v in GOOD_TAGS.items()]
    argv = ["submit", "digits-classifier", "--project", "vision/digits", "--param", "steps=5", *tags, "--notes", NOTES]
    assert cli.main([*argv, "--dry-run"]) == 0 and Run.objects.count() == 0
    assert cli.main(argv) == 0, capsys.readouterr().err
    assert Run.objects.get().notes == NOTES
    assert cli.main(["submit", "digits-classifier", "--project", "vision/digits", *tags, "--notes", "x" * 2001]) == 6
    assert "notes" in capsys.readouterr().err


def test_a_refused_edit_keeps_the_typed_text_in_the_box_beside_the_error(cast: Any, digits: Any) -> None:
    run_id = cast.client(cast.alice).post("/api/v1/runs/", body(cast, notes=NOTES), format="json").json()["id"]
    client = page_client(cast.alice)
    tags = Run.objects.get(pk=run_id).tags
    lines = "\r\n".join(f"{k}={v}" for k, v in {**tags, "why": "wider"}.items() if k != "owner")
    typed = "A long account of the ablation. " * 63  # 2,016 characters
    response = client.post(f"/runs/{run_id}/annotate/", {"notes": typed, "tags": lines}, follow=True)
    page = response.content.decode()
    assert response.redirect_chain == [(f"/runs/{run_id}/", 302)]
    form = page[page.index('id="run-annotate"'):page.index("</details>", page.index('id="run-annotate"'))]
    assert form.startswith('id="run-annotate" open>'), form[:200]
    assert '<li>Notes: must be at most 2000 characters (got 2016)</li>' in form
    assert f'<textarea name="notes" id="id_run_notes" maxlength="2000" rows="4">{typed}</textarea>' in form
    assert "why=wider" in form and Run.objects.get(pk=run_id).notes == NOTES
    # Shown once: the page read again holds the saved notes, closed.
    again = client.get(f"/runs/{run_id}/").content.decode()
    assert 'id="run-annotate">' in again and 'id="annotate-errors"' not in again and "ablation" not in again
    # Bad tags keep the notes typed beside them too.
    refused = client.post(f"/runs/{run_id}/annotate/", {"notes": "short and new", "tags": "no equals sign"}, follow=True).content.decode()
    assert ">short and new</textarea>" in refused and ">no equals sign</textarea>" in refused and "key=value" in refused
