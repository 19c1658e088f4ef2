"""Choosing another project or template on /runs/new/ loads the form again (POST action=reload, as
static/runs/submit.js and the no-script "Load" buttons send it) with what the user typed, where it
still applies: what they changed carries over, what they left alone takes the new template's
default, and what the new template or project has no place for is dropped. A reload submits
nothing, so it names no errors. tests/browser/test_submit_reload.py does the same in Chromium."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from cryptography.fernet import Fernet
from django.test import Client, override_settings

from apps.jobtemplates.models import JobTemplate
from apps.jobtemplates.recipes import LOCAL_RESOURCES
from apps.runs.models import Run
from apps.tenants.services import project_create
from apps.vault.services import secret_set
from tests.runs.factories import form_data, local_pool, make_template

# Another template than digits-classifier (tests.runs.factories.DIGITS_SCHEMA): steps and lr again
# (steps with another default), arch with other choices, amp on by default, no hidden; more
# nodes by default, fewer devices and a shorter runtime allowed.
WIDE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "steps": {"type": "integer", "minimum": 1, "maximum": 100000, "default": 200},
        "lr": {"type": "number", "exclusiveMinimum": 0, "maximum": 1.0, "default": 0.003},
        "arch": {"type": "string", "enum": ["mlp", "resnet"], "default": "resnet"},
        "amp": {"type": "boolean", "default": True},
        "freeze": {"type": "integer", "minimum": 0, "maximum": 4, "default": 1},
    },
}
WIDE_RESOURCES = {**LOCAL_RESOURCES, "nodes": 2, "max_nodes": 8, "max_devices_per_node": 2, "max_runtime_limit_s": 3600}


@pytest.fixture
def templates(cast: Any) -> tuple[JobTemplate, JobTemplate]:
    local_pool("2.0")
    return make_template(), make_template("wide-train", schema=WIDE_SCHEMA, resources=WIDE_RESOURCES)


@pytest.fixture
def vault_keys() -> Iterator[None]:
    with override_settings(TRAINYARD_SECRET_KEYS=[Fernet.generate_key().decode()]):
        yield


def _client(user: Any, **options: Any) -> Client:
    client = Client(**options)
    client.force_login(user)
    return client


def _tag(html: str, element_id: str) -> str:
    """The opening tag of the element with this id (a select with its options)."""
    match = re.search(rf'<(input|textarea|select)[^>]*\bid="{element_id}"[^>]*>', html)
    assert match, f"no element #{element_id}"
    if match.group(1) != "select":
        return match.group(0)
    return html[match.start():html.index("</select>", match.end())]


def _value(html: str, element_id: str) -> str:
    tag = _tag(html, element_id)
    if tag.startswith("<select"):
        chosen = re.search(r'<option value="([^"]*)"[^>]*\bselected', tag)
        return chosen.group(1) if chosen else ""
    found = re.search(r'\bvalue="([^"]*)"', tag)
    return found.group(1) if found else ""


def _no_errors(html: str) -> None:
    assert "Nothing was queued." not in html and 'class="errorlist"' not in html and 'aria-invalid="true"' not in html


def _typed_into_digits(cast: Any, **changes: str) -> dict[str, Any]:
    """digits-classifier's form as the user left it: some inputs changed, others at its defaults."""
    return form_data(cast, **{
        "shown_template": "digits-classifier", "name": "keep me", "priority": "low", "extra_tags": "note=first try",
        "p_steps": "300", "p_lr": "0.05", "p_hidden": "64", "p_arch": "cnn", "p_classes": "[0, 1, 2]",
        "tag_task": "train", "tag_dataset": "mnist", "tag_candidate": "candidate", "tag_family": "digits-classifier-alice",
        "res_pool": "local", "res_nodes": "1", "res_devices_per_node": "4", "res_max_runtime_s": "3000",
        **changes})


def test_another_template_keeps_what_was_typed_and_still_applies(cast: Any, templates: Any) -> None:
    response = _client(cast.alice).post("/runs/new/", _typed_into_digits(cast, template="wide-train", action="reload"))
    assert response.status_code == 200
    html = response.content.decode()
    _no_errors(html)
    assert _value(html, "id_template") == "wide-train"
    assert '<input type="hidden" name="shown_template" value="wide-train">' in html
    # Typed, and the new template has a place for it: kept.
    assert _value(html, "id_name") == "keep me" and _value(html, "id_priority") == "low"
    assert _value(html, "id_p_lr") == "0.05"
    assert _value(html, "id_res_max_runtime_s") == "3000"
    assert _value(html, "id_tag_dataset") == "mnist"
    assert "note=first try</textarea>" in html
    # Left at digits-classifier's default: the new template's default, not the old one's.
    assert _value(html, "id_p_steps") == "200" and _value(html, "id_p_freeze") == "1"
    assert "checked" in _tag(html, "id_p_amp")
    assert _value(html, "id_res_nodes") == "2"
    assert _value(html, "id_tag_family") == "wide-train-alice"
    # Typed, but the new template has no such parameter, choice or room: dropped for its default.
    assert 'name="p_hidden"' not in html and 'name="p_classes"' not in html
    assert _value(html, "id_p_arch") == "resnet"
    assert _value(html, "id_res_devices_per_node") == "1"
    # The cost is the kept resources' (2.00 $/device-hour × 2 nodes × 1 device × 3000 s).
    assert '<strong id="expected-cost">$3.33</strong>' in html
    assert Run.objects.count() == 0


def test_a_reload_keeps_a_value_that_is_out_of_bounds_and_names_no_error(cast: Any, templates: Any) -> None:
    # A reload is not a submission: a bad value stays for the user to fix, unrefused until they submit.
    data = _typed_into_digits(cast, template="wide-train", action="reload", p_lr="5", p_steps="lots", name="x" * 300)
    html = _client(cast.alice).post("/runs/new/", data).content.decode()
    _no_errors(html)
    assert _value(html, "id_p_lr") == "5" and _value(html, "id_p_steps") == "lots"


def test_back_to_the_first_template_keeps_what_came_through(cast: Any, templates: Any) -> None:
    client = _client(cast.alice)
    there = client.post("/runs/new/", _typed_into_digits(cast, template="wide-train", action="reload")).content.decode()
    assert _value(there, "id_p_lr") == "0.05"
    # The wide-train form as it came back, sent again for digits-classifier.
    back = form_data(cast, shown_template="wide-train", template="digits-classifier", action="reload", name="keep me",
                     p_steps="200", p_lr="0.05", p_arch="resnet", p_amp="on", p_freeze="1", tag_task="train",
                     tag_dataset="mnist", tag_family="wide-train-alice", res_nodes="2", res_devices_per_node="1",
                     res_max_runtime_s="3000")
    html = client.post("/runs/new/", back).content.decode()
    _no_errors(html)
    assert _value(html, "id_name") == "keep me" and _value(html, "id_p_lr") == "0.05"
    assert _value(html, "id_p_steps") == "300" and _value(html, "id_p_hidden") == "128" and _value(html, "id_p_arch") == "mlp"
    assert "checked" not in _tag(html, "id_p_amp")
    assert _value(html, "id_res_nodes") == "1" and _value(html, "id_res_max_runtime_s") == "3000"
    assert _value(html, "id_tag_family") == "digits-classifier-alice" and _value(html, "id_tag_dataset") == "mnist"


def test_another_project_drops_the_secrets_it_lacks(cast: Any, templates: Any, vault_keys: None) -> None:
    other = project_create(team=cast.vision, slug="digits-two", name="Digits two")
    secret_set(project=cast.digits, name="HF_TOKEN", value="value-one-1", user=cast.alice)
    secret_set(project=cast.digits, name="WANDB_KEY", value="value-two-2", user=cast.alice)
    secret_set(project=other, name="HF_TOKEN", value="value-three-3", user=cast.alice)
    data = {**_typed_into_digits(cast, template="digits-classifier", project=str(other.pk), action="reload"),
            "secrets": ["HF_TOKEN", "WANDB_KEY"]}
    html = _client(cast.alice).post("/runs/new/", data).content.decode()
    _no_errors(html)
    assert _value(html, "id_project") == str(other.pk)
    assert '<input type="checkbox" name="secrets" value="HF_TOKEN" checked>' in html and "WANDB_KEY" not in html
    # The same template: what was typed stays, defaults stay defaults.
    assert _value(html, "id_name") == "keep me" and _value(html, "id_p_lr") == "0.05" and _value(html, "id_p_hidden") == "64"
    assert _value(html, "id_res_devices_per_node") == "4" and _value(html, "id_res_nodes") == "1"


def test_without_the_shown_template_what_differs_from_the_new_defaults_is_kept(cast: Any, templates: Any) -> None:
    data = _typed_into_digits(cast, template="wide-train", action="reload")
    del data["shown_template"]
    html = _client(cast.alice).post("/runs/new/", data).content.decode()
    _no_errors(html)
    assert _value(html, "id_name") == "keep me" and _value(html, "id_p_lr") == "0.05" and _value(html, "id_p_steps") == "300"


def test_the_page_offers_reloading_without_a_script(cast: Any, templates: Any) -> None:
    html = _client(cast.alice).get("/runs/new/").content.decode()
    assert '<noscript><button type="submit" name="action" value="reload">Load project</button></noscript>' in html
    assert '<noscript><button type="submit" name="action" value="reload">Load template</button></noscript>' in html
    assert '<input type="hidden" name="shown_template" value="digits-classifier">' in html


def test_reloaded_form_still_submits_with_its_csrf_token(cast: Any, templates: Any) -> None:
    client = _client(cast.alice, enforce_csrf_checks=True)

    def token(html: str) -> str:
        found = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', html)
        assert found
        return found.group(1)

    first = client.get("/runs/new/").content.decode()
    data = _typed_into_digits(cast, template="wide-train", action="reload", csrfmiddlewaretoken=token(first))
    reloaded = client.post("/runs/new/", data)
    assert reloaded.status_code == 200
    html = reloaded.content.decode()
    submit = form_data(cast, csrfmiddlewaretoken=token(html), shown_template="wide-train", template="wide-train",
                       name=_value(html, "id_name"), priority=_value(html, "id_priority"), p_lr=_value(html, "id_p_lr"),
                       p_steps=_value(html, "id_p_steps"), p_arch=_value(html, "id_p_arch"), p_amp="on",
                       p_freeze=_value(html, "id_p_freeze"), res_nodes=_value(html, "id_res_nodes"),
                       res_devices_per_node=_value(html, "id_res_devices_per_node"),
                       res_max_runtime_s=_value(html, "id_res_max_runtime_s"), tag_dataset=_value(html, "id_tag_dataset"))
    response = client.post("/runs/new/", submit)
    run = Run.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/runs/{run.pk}/"
    assert run.template.slug == "wide-train" and run.name == "keep me" and run.priority == "low"
    assert run.params["lr"] == 0.05 and run.params["steps"] == 200 and run.nodes == 2 and run.max_runtime_s == 3000


def test_a_submission_is_still_a_submission(cast: Any, templates: Any) -> None:
    response = _client(cast.alice).post("/runs/new/", form_data(cast, shown_template="digits-classifier", name="plain", p_lr="0.01"))
    run = Run.objects.get()
    assert response.status_code == 302 and run.name == "plain" and run.params["lr"] == 0.01
    refused = _client(cast.alice).post("/runs/new/", form_data(cast, shown_template="digits-classifier", p_lr="5"))
    assert refused.status_code == 400 and "Nothing was queued." in refused.content.decode()
