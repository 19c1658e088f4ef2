"""Issue 29: rerun, clone and edit, and notes and tags edited after submission. A rerun goes
through run_submit (so a budget refusal reads as any submission's) and is tagged rerun_of=<id>;
the clone form is the submit form filled in from the run; PATCH /api/v1/runs/{id}/ changes notes
and tags with the submission's rules; another team's run is a 404; each action is audited."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from apps.audit.models import AuditEvent
from apps.billing.services import budget_create
from apps.jobtemplates.models import TemplateKind
from apps.runs.models import Attempt, Checkpoint, Run, RunStatus
from tests.runs.factories import DIGITS_SCHEMA, GOOD_TAGS, body, form_data, local_pool, make_sweep_template, make_template

NOTES = "Wider MLP.\nSame seed as #12."


@pytest.fixture
def digits(cast: Any) -> Any:
    local_pool()
    return make_template()


def page_client(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def submitted(cast: Any, **changes: Any) -> Run:
    response = cast.client(cast.alice).post("/api/v1/runs/", body(cast, **changes), format="json")
    assert response.status_code == 201, response.json()
    return Run.objects.get(pk=response.json()["id"])


def full_run(cast: Any) -> Run:
    return submitted(cast, name="wide", notes=NOTES, params={"steps": 40, "lr": 0.01, "hidden": 256, "amp": True},
                     tags={**GOOD_TAGS, "note": "x"}, priority="low",
                     resources={"max_runtime_s": 900, "preemptible": False, "devices_per_node": 1})


def test_rerun_copies_everything_and_links_to_the_original(cast: Any, digits: Any) -> None:
    source = full_run(cast)
    make_template()  # a newer version since: the rerun keeps the original's
    assert source.template.version == 1
    response = cast.client(cast.alice).post(f"/api/v1/runs/{source.pk}/rerun/", format="json")
    assert response.status_code == 201, response.json()
    new = Run.objects.get(pk=response.json()["id"])
    assert new.pk != source.pk and new.status == "queued"
    assert new.template_id == source.template_id
    assert (new.params, new.priority, new.name, new.notes) == (source.params, source.priority, source.name, source.notes)
    assert (new.pool_id, new.nodes, new.devices_per_node, new.max_runtime_s, new.preemptible) == (
        source.pool_id, source.nodes, source.devices_per_node, source.max_runtime_s, source.preemptible)
    assert new.tags == {**source.tags, "rerun_of": str(source.pk)} and new.family == source.family
    assert new.parent_id is None  # parent is a sweep's controller; the link is the tag
    assert response.json()["tags"]["rerun_of"] == str(source.pk)
    event = AuditEvent.objects.get(action="run.rerun")
    assert (event.object_id, event.before, event.after) == (str(new.pk), {"run": source.pk}, {"run": new.pk, "rerun_of": source.pk})
    assert AuditEvent.objects.filter(action="run.submit", object_id=str(new.pk)).exists()
    # A rerun of a rerun names its own source, once.
    again = cast.client(cast.alice).post(f"/api/v1/runs/{new.pk}/rerun/", format="json").json()
    assert again["tags"]["rerun_of"] == str(new.pk)


def test_rerun_is_refused_as_a_submission_would_be(cast: Any, digits: Any) -> None:
    source = submitted(cast)
    budget_create(team=cast.vision, project=cast.digits, amount="0.01")
    response = cast.client(cast.alice).post(f"/api/v1/runs/{source.pk}/rerun/", format="json")
    assert response.status_code == 400 and response.json()["error"]["code"] == "budget_exceeded", response.json()
    # From the run's page: the submit page, filled in as the rerun was, with the refusal once, in words.
    page = page_client(cast.alice).post(f"/runs/{source.pk}/rerun/")
    assert page.status_code == 400
    html = page.content.decode()
    assert "Nothing was queued." in html and "The rerun of run #" in html and "non_field_errors" not in html
    assert html.count("Nothing was queued") == 1 and html.count("of $0.01 (") == 1
    assert f"rerun_of={source.pk}" in html and 'name="from"' not in html
    assert Run.objects.count() == 1 and not AuditEvent.objects.filter(action="run.rerun").exists()


def test_rerun_and_clone_of_another_teams_run_are_404(cast: Any, digits: Any) -> None:
    source = submitted(cast)
    assert cast.client(cast.bob).post(f"/api/v1/runs/{source.pk}/rerun/", format="json").status_code == 404
    assert cast.client(cast.bob).patch(f"/api/v1/runs/{source.pk}/", {"notes": "x"}, format="json").status_code == 404
    bob = page_client(cast.bob)
    assert bob.post(f"/runs/{source.pk}/rerun/").status_code == 404
    assert bob.post(f"/runs/{source.pk}/annotate/", {"notes": "x", "tags": ""}).status_code == 404
    assert bob.get(f"/runs/new/?from={source.pk}").status_code == 404
    assert bob.get("/runs/new/?from=nope").status_code == 404
    # A viewer of the team sees the run but may not act on it.
    assert cast.client(cast.victor).post(f"/api/v1/runs/{source.pk}/rerun/", format="json").status_code == 403
    assert cast.client(cast.victor).patch(f"/api/v1/runs/{source.pk}/", {"notes": "x"}, format="json").status_code == 403
    assert page_client(cast.victor).post(f"/runs/{source.pk}/rerun/").status_code == 403
    assert Run.objects.count() == 1 and Run.objects.get().notes == ""


def test_clone_form_is_prefilled_and_submits_the_edit(cast: Any, digits: Any) -> None:
    source = full_run(cast)
    client = page_client(cast.alice)
    html = client.get(f"/runs/new/?from={source.pk}").content.decode()
    assert 'id="clone-notice"' in html and f'<input type="hidden" name="from" value="{source.pk}">' in html
    assert 'name="p_steps" id="id_p_steps" value="40"' in html and 'name="p_hidden" id="id_p_hidden" value="256"' in html
    assert 'name="p_amp" id="id_p_amp" checked' in html
    assert 'name="name" id="id_name" maxlength="200" value="wide"' in html and ">Wider MLP.\nSame seed as #12.</textarea>" in html
    assert 'name="res_max_runtime_s" id="id_res_max_runtime_s" value="900"' in html
    assert '<option value="low" selected>' in html or '<option value="low"  selected>' in html
    assert f"note=x\ncloned_from={source.pk}</textarea>" in html
    # The user changes one param and submits the form as it came.
    post = form_data(cast, **{"from": str(source.pk), "name": "wide", "notes": source.notes, "priority": "low", "p_steps": "40",
                              "p_lr": "0.02", "p_hidden": "256", "p_amp": "on", "res_max_runtime_s": "900",
                              "tag_task": GOOD_TAGS["task"], "tag_dataset": GOOD_TAGS["dataset"], "tag_family": GOOD_TAGS["family"],
                              "extra_tags": f"note=x\ncloned_from={source.pk}"})
    response = client.post("/runs/new/", post)
    assert response.status_code == 302, response.content.decode()[:3000]
    new = Run.objects.exclude(pk=source.pk).get()
    assert new.params == {**source.params, "lr": 0.02} and new.tags["cloned_from"] == str(source.pk)
    event = AuditEvent.objects.get(action="run.clone")
    assert (event.object_id, event.before) == (str(new.pk), {"run": source.pk})


def test_patch_changes_notes_and_tags_audited_old_to_new(cast: Any, digits: Any) -> None:
    run = submitted(cast)
    tags = {**GOOD_TAGS, "candidate": "promoted", "family": "digits-wide", "why": "best so far", "owner": "mallory"}
    response = cast.client(cast.alice).patch(f"/api/v1/runs/{run.pk}/", {"notes": NOTES, "tags": tags}, format="json")
    assert response.status_code == 200, response.json()
    assert response.json()["notes"] == NOTES and response.json()["tags"]["candidate"] == "promoted"
    run.refresh_from_db()
    assert run.notes == NOTES and run.tags == {**tags, "owner": "alice"} and run.family == "digits-wide"
    event = AuditEvent.objects.get(action="run.annotate")
    assert event.before == {"notes": "", "tags": {**GOOD_TAGS, "owner": "alice"}}
    assert event.after == {"notes": NOTES, "tags": {**tags, "owner": "alice"}}
    assert cast.client(cast.alice).patch(f"/api/v1/runs/{run.pk}/", {"notes": "only notes"}, format="json").status_code == 200
    run.refresh_from_db()
    assert run.notes == "only notes" and run.tags["candidate"] == "promoted"
    assert cast.client(cast.alice).put(f"/api/v1/runs/{run.pk}/", {"notes": "x"}, format="json").status_code == 405


@pytest.mark.parametrize(("data", "field", "words"), [
    ({"notes": "x" * 2001}, "notes", "at most 2000 characters (got 2001)"),
    ({"notes": 5}, "notes", "must be a string"),
    ({"tags": {**GOOD_TAGS, "candidate": "best"}}, "tags.candidate", "must be one of baseline"),
    ({"tags": {"task": "t", "dataset": "d", "candidate": "baseline"}}, "tags.family", "this tag is required"),
    ({"tags": {**GOOD_TAGS, "Bad Key": "v"}}, "tags.Bad Key", "key must be 1-63 characters"),
    ({"tags": {**GOOD_TAGS, "long": "v" * 201}}, "tags.long", "at most 200 characters (got 201)"),
    ({"tags": {**GOOD_TAGS, **{f"k{i}": "v" for i in range(40)}}}, "tags", "at most 32 tags"),
    ({"tags": ["task"]}, "tags", "must be an object"),
])
def test_patch_refuses_bad_input_naming_the_field_and_limit(cast: Any, digits: Any, data: dict[str, Any], field: str,
                                                           words: str) -> None:
    run = submitted(cast)
    response = cast.client(cast.alice).patch(f"/api/v1/runs/{run.pk}/", data, format="json")
    assert response.status_code == 400
    assert words in " ".join(response.json()["error"]["fields"][field]), response.json()
    run.refresh_from_db()
    assert run.notes == "" and run.tags == {**GOOD_TAGS, "owner": "alice"}
    assert not AuditEvent.objects.filter(action="run.annotate").exists()


def test_run_page_offers_the_actions_and_edits_notes_and_tags(cast: Any, digits: Any) -> None:
    run = submitted(cast)
    client = page_client(cast.alice)
    html = client.get(f"/runs/{run.pk}/").content.decode()
    actions = html[html.index('id="run-actions"'):html.index('id="run-annotate"')]
    assert 'id="rerun-button"' in actions and f'href="/runs/new/?from={run.pk}"' in actions and 'id="cancel-button"' in actions
    lines = "\n".join(f"{k}={v}" for k, v in {**GOOD_TAGS, "why": "wider"}.items())
    response = client.post(f"/runs/{run.pk}/annotate/", {"notes": "A note\r\nsecond line", "tags": lines}, follow=True)
    page = response.content.decode()
    assert response.redirect_chain == [(f"/runs/{run.pk}/", 302)] and "Notes and tags saved." in page
    assert '<dd id="run-notes">A note<br>second line</dd>' in page and "why=wider" in page
    run.refresh_from_db()
    assert run.tags["why"] == "wider" and run.notes == "A note\nsecond line"
    refused = client.post(f"/runs/{run.pk}/annotate/", {"notes": "y" * 2001, "tags": lines}, follow=True).content.decode()
    assert "Notes: must be at most 2000 characters (got 2001)" in refused
    refused = client.post(f"/runs/{run.pk}/annotate/", {"notes": "", "tags": "no equals sign"}, follow=True).content.decode()
    assert "write one key=value per line" in refused
    run.refresh_from_db()
    assert run.notes == "A note\nsecond line"
    # A viewer sees no actions but cancel's place; the rerun button posts and lands on the new run.
    viewer = page_client(cast.victor).get(f"/runs/{run.pk}/").content.decode()
    assert 'id="rerun-button"' not in viewer and 'id="run-annotate"' not in viewer
    rerun = client.post(f"/runs/{run.pk}/rerun/")
    new = Run.objects.exclude(pk=run.pk).get()
    assert rerun.status_code == 302 and rerun["Location"] == f"/runs/{new.pk}/"
    # Each run's History card says what happened, in words.
    assert "notes or tags changed" in client.get(f"/runs/{run.pk}/").content.decode()
    history = client.get(f"/runs/{new.pk}/").content.decode()
    assert "submitted as a rerun" in history and f"rerun of run #{run.pk}" in history


def test_rerun_of_a_sweep_and_of_a_finetune_keep_what_they_need(cast: Any, digits: Any) -> None:
    make_sweep_template()
    sweep = {"template": "digits-classifier", "strategy": "grid", "space": {"lr": [0.001, 0.01]}, "params": {"steps": 10},
             "max_runs": 4}
    parent = submitted(cast, template="sweep", params=sweep, resources={"max_runtime_s": 600})
    response = cast.client(cast.alice).post(f"/api/v1/runs/{parent.pk}/rerun/", format="json")
    assert response.status_code == 201, response.json()
    again = Run.objects.get(pk=response.json()["id"])
    assert again.template_id == parent.template_id and again.params == parent.params and again.tags["rerun_of"] == str(parent.pk)
    assert [c.max_runtime_s for c in again.children.all()] == [600, 600]  # the trials' resources, not the controller's
    # A fine-tune starts from the same checkpoint as the run it reruns.
    make_template("finetune", TemplateKind.FINETUNE, DIGITS_SCHEMA)
    done = Run.objects.create(project=cast.digits, template=digits, pool=local_pool(), entrypoint="x", status=RunStatus.SUCCEEDED)
    attempt = Attempt.objects.create(run=done, number=1)
    for step in (10, 20):
        Checkpoint.objects.create(run=done, attempt=attempt, step=step, file_name=f"c{step}.pt", size=1, sha256=f"{step:064d}")
    tune = submitted(cast, template="finetune", init_checkpoint=str(done.checkpoints.get(step=10).pk))
    response = cast.client(cast.alice).post(f"/api/v1/runs/{tune.pk}/rerun/", format="json")
    assert response.status_code == 201, response.json()
    assert Run.objects.get(pk=response.json()["id"]).init_checkpoint_id == tune.init_checkpoint_id
    # Their clone forms come filled in too: the sweep's space as JSON, the fine-tune's start.
    client = page_client(cast.alice)
    sweep_form = client.get(f"/runs/new/?from={parent.pk}")
    assert sweep_form.status_code == 200 and "&quot;lr&quot;: [" in sweep_form.content.decode()
    tune_form = client.get(f"/runs/new/?from={tune.pk}").content.decode()
    assert f'name="init_run" id="id_init_run" value="{done.pk}"' in tune_form


def test_clone_keeps_the_template_version_and_preemptible(cast: Any, digits: Any) -> None:
    """The clone form carries what it has no input for (preemptible, the template version: a newer
    one was published since) in hidden inputs, and the submitted clone has them as the source had."""
    source = full_run(cast)
    latest = make_template()
    assert (source.template.version, latest.version, source.preemptible) == (1, 2, False)
    client = page_client(cast.alice)
    html = client.get(f"/runs/new/?from={source.pk}").content.decode()
    hidden = dict(re.findall(r'<input type="hidden" name="(template_version|res_preemptible)" value="([^"]*)">', html))
    assert hidden == {"template_version": "digits-classifier@1", "res_preemptible": "false"}, hidden
    notice = html[html.index('id="clone-notice"'):]
    assert "(digits-classifier v1)" in notice[:notice.index("</p>")] and "latest published version" not in notice[:notice.index("</p>")]
    post = form_data(cast, **{"from": str(source.pk), "p_steps": "40", "p_lr": "0.01", "p_hidden": "256", "p_amp": "on",
                              "res_max_runtime_s": "900", **hidden})
    response = client.post("/runs/new/", post)
    assert response.status_code == 302, response.content.decode()[:3000]
    new = Run.objects.exclude(pk=source.pk).get()
    assert (new.template_id, new.preemptible, new.max_runtime_s) == (source.template_id, False, 900)
    # A pin of another version than the form's template's published ones is no pin: the latest.
    assert client.post("/runs/new/", {**post, "template_version": "digits-classifier@7"}).status_code == 302
    assert Run.objects.latest("pk").template_id == latest.pk
