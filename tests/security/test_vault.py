"""The vault: values are write-only, encrypted at rest under rotatable keys, refused with a 400
that names the field, scoped like every tenant object, audited by name only, and checked when a
run asks for them. The live end-to-end (job sees it, nothing else does) is test_secret_leaks.py."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.test import Client, override_settings

from apps.audit.models import AuditEvent
from apps.runs.models import Run
from apps.vault import crypto
from apps.vault.checks import vault_keys_check
from apps.vault.models import Secret
from apps.vault.services import run_secret_values, secret_set
from tests.runs.factories import GOOD_TAGS, local_pool, make_template
from tests.security.conftest import KEY_A, KEY_B

VALUE = "s3cr3t-value-Zq9-ONLY-IN-THE-VAULT"
URL = "/api/v1/projects/{}/secrets/"


def _everything(response: Any) -> str:
    return response.content.decode(errors="replace") + json.dumps(dict(response.headers))


@pytest.fixture
def alice_secret(cast: Any, vault_keys: list[str]) -> Secret:
    secret, _ = secret_set(project=cast.digits, name="HF_TOKEN", value=VALUE, user=cast.alice)
    return secret


def test_admin_sets_lists_replaces_deletes_and_never_sees_the_value(cast: Any, vault_keys: list[str]) -> None:
    client = cast.client(cast.alice)
    url = URL.format(cast.digits.pk)
    created = client.post(url, {"name": "HF_TOKEN", "value": VALUE}, format="json")
    assert created.status_code == 201, created.content
    assert set(created.json()) == {"name", "created_at", "updated_at", "updated_by"}
    replaced = client.put(url + "HF_TOKEN/", {"value": VALUE + "-v2"}, format="json")
    assert replaced.status_code == 200
    listed = client.get(url)
    assert [s["name"] for s in listed.json()] == ["HF_TOKEN"]
    for response in (created, replaced, listed, client.get(url + "HF_TOKEN/")):
        assert VALUE not in _everything(response)
    row = Secret.objects.get(project=cast.digits, name="HF_TOKEN")
    assert VALUE not in row.ciphertext and crypto.decrypt(row.ciphertext) == VALUE + "-v2"
    assert client.delete(url + "HF_TOKEN/").status_code == 204
    assert client.delete(url + "HF_TOKEN/").status_code == 404
    assert not Secret.objects.exists()


def test_audit_says_secret_set_with_the_name_only(cast: Any, alice_secret: Secret) -> None:
    event = AuditEvent.objects.get(action="secret.set")
    assert event.after == {"name": "HF_TOKEN", "created": True} and event.team_id == cast.vision.pk
    assert event.actor == cast.alice
    dumped = json.dumps([list(e.values()) for e in AuditEvent.objects.values()], default=str)
    assert VALUE not in dumped


@pytest.mark.parametrize(
    ("who", "method", "status"),
    [("victor", "get", 200), ("victor", "post", 403), ("victor", "delete", 403), ("bob", "get", 404), ("bob", "post", 404),
     ("bob", "delete", 404), ("outsider", "get", 404), ("carol", "post", 404), (None, "get", 401), ("admin", "post", 200)],
)
def test_roles_and_tenants(cast: Any, alice_secret: Secret, who: str | None, method: str, status: int) -> None:
    client = cast.client(getattr(cast, who) if who else None)
    url = URL.format(cast.digits.pk)
    if method == "get":
        response = client.get(url)
    elif method == "post":
        response = client.post(url, {"name": "HF_TOKEN", "value": "another-value-123"}, format="json")
    else:
        response = client.delete(url + "HF_TOKEN/")
    assert response.status_code == status, response.content
    assert VALUE not in _everything(response)
    if status >= 400:
        assert response.json()["error"]["status"] == status


@pytest.mark.parametrize(
    ("body", "field", "text"),
    [({"name": "hf_token", "value": VALUE}, "name", "uppercase"),
     ({"name": "TRAINYARD_RUN_ID", "value": VALUE}, "name", "reserved"),
     ({"name": "PATH", "value": VALUE}, "name", "reserved"),
     ({"name": "X" * 65, "value": VALUE}, "name", "1-64"),
     ({"name": "SHORT", "value": "abc"}, "value", "8 to 16384 characters (got 3)"),
     ({"name": "HUGE", "value": "x" * 20000}, "value", "(got 20000)"),
     ({"name": "NOVALUE"}, "value", "required")],
)
def test_bad_input_is_400_naming_the_field(cast: Any, vault_keys: list[str], body: dict[str, Any], field: str, text: str) -> None:
    response = cast.client(cast.alice).post(URL.format(cast.digits.pk), body, format="json")
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert field in error["fields"] and text in " ".join(error["fields"][field])
    assert not Secret.objects.exists()


def test_rotation_reencrypts_with_the_newest_key(cast: Any, alice_secret: Secret) -> None:
    old_token, old_key = alice_secret.ciphertext, alice_secret.key_id
    with override_settings(TRAINYARD_SECRET_KEYS=[KEY_B, KEY_A]):
        call_command("rotate_secrets", stdout=open("/dev/null", "w"))
        row = Secret.objects.get(pk=alice_secret.pk)
        assert row.ciphertext != old_token and row.key_id != old_key
        call_command("rotate_secrets", stdout=open("/dev/null", "w"))  # idempotent
        assert Secret.objects.get(pk=alice_secret.pk).ciphertext == row.ciphertext
    with override_settings(TRAINYARD_SECRET_KEYS=[KEY_B]):  # the old key is gone: still readable
        assert crypto.decrypt(Secret.objects.get(pk=alice_secret.pk).ciphertext) == VALUE
    with override_settings(TRAINYARD_SECRET_KEYS=[KEY_A]), pytest.raises(crypto.VaultKeyError):
        crypto.decrypt(Secret.objects.get(pk=alice_secret.pk).ciphertext)
    assert AuditEvent.objects.filter(action="secret.rotated").count() == 1


def test_keys_required_unless_debug(settings: Any) -> None:
    settings.TRAINYARD_SECRET_KEYS = []
    settings.DEBUG = False
    with pytest.raises(ImproperlyConfigured, match="TRAINYARD_SECRET_KEYS must be set"):
        crypto.encrypt("whatever-value")
    assert [m.id for m in vault_keys_check()] == ["vault.E001"]
    settings.TRAINYARD_SECRET_KEYS = ["not-a-key"]
    assert [m.id for m in vault_keys_check()] == ["vault.E002"]
    assert "not-a-key" not in vault_keys_check()[0].msg
    settings.TRAINYARD_SECRET_KEYS = []
    settings.DEBUG = True
    assert crypto.decrypt(crypto.encrypt("development-value")) == "development-value"
    assert vault_keys_check() == []


def test_a_server_without_keys_says_so_with_a_503_and_stores_nothing(cast: Any, settings: Any) -> None:
    """Not a 500 (CI's schema fuzz found it): the request was fine, the deployment lacks its key."""
    settings.TRAINYARD_SECRET_KEYS = []
    settings.DEBUG = False
    client = cast.client(cast.alice)
    for response in (client.put(URL.format(cast.digits.pk) + "HF_TOKEN/", {"value": VALUE}, format="json"),
                     client.post(URL.format(cast.digits.pk), {"name": "HF_TOKEN", "value": VALUE}, format="json")):
        assert response.status_code == 503, response.content
        error = response.json()["error"]
        assert error["code"] == "vault_not_configured" and "TRAINYARD_SECRET_KEYS" in error["message"]
        assert VALUE not in _everything(response)
    page = Client()
    page.force_login(cast.alice)
    html = page.post(f"/projects/{cast.digits.pk}/secrets/set/", {"name": "HF_TOKEN", "value": VALUE}, follow=True).content.decode()
    assert "Secrets cannot be stored: this server has no encryption key configured" in html
    assert not Secret.objects.exists() and not AuditEvent.objects.filter(action="secret.set").exists()


def _submit(cast: Any, **extra: Any) -> Any:
    local_pool()
    make_template()
    body = {"project": cast.digits.pk, "template": "digits-classifier", "params": {"steps": 20}, "tags": dict(GOOD_TAGS), **extra}
    return cast.client(cast.alice).post("/api/v1/runs/", body, format="json")


def test_run_naming_a_missing_secret_is_refused(cast: Any, vault_keys: list[str]) -> None:
    response = _submit(cast, secrets=["HF_TOKEN"])
    assert response.status_code == 400, response.content
    assert "no secret named HF_TOKEN" in response.json()["error"]["fields"]["secrets"][0]
    bad = _submit(cast, secrets=["lower"])
    assert bad.status_code == 400 and "secrets" in bad.json()["error"]["fields"]
    assert not Run.objects.exists()


def test_run_gets_its_and_its_templates_secrets(cast: Any, alice_secret: Secret) -> None:
    secret_set(project=cast.digits, name="WANDB_KEY", value="another-secret-value", user=cast.alice)
    response = _submit(cast, secrets=["HF_TOKEN"])
    assert response.status_code == 201, response.content
    assert VALUE not in _everything(response)
    run = Run.objects.get(pk=response.json()["id"])
    assert run.secrets == ["HF_TOKEN"]
    assert run_secret_values(run=run) == {"HF_TOKEN": VALUE}
    # Names may also come inside params; a template may list secrets in its environment.
    via_params = _submit(cast, params={"steps": 20, "secrets": ["WANDB_KEY"]})
    assert via_params.status_code == 201, via_params.content
    assert Run.objects.get(pk=via_params.json()["id"]).secrets == ["WANDB_KEY"]
    template = make_template("with-secrets", environment={"secrets": ["WANDB_KEY"]})
    run.template = template
    assert run_secret_values(run=run) == {"HF_TOKEN": VALUE, "WANDB_KEY": "another-secret-value"}


def test_secrets_page_and_project_panel(cast: Any, alice_secret: Secret) -> None:
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(cast.alice)
    page = browser.get(f"/projects/{cast.digits.pk}/secrets/")
    html = page.content.decode()
    assert page.status_code == 200 and "HF_TOKEN" in html and 'id="secret-form"' in html and "csrfmiddlewaretoken" in html
    assert VALUE not in html
    # Deleting asks first (static/core/confirm.js), as revoking a token does: the value is gone for good.
    assert 'data-confirm="Delete secret HF_TOKEN?' in html
    project_page = browser.get(f"/projects/{cast.digits.pk}/").content.decode()
    assert "HF_TOKEN" in project_page and VALUE not in project_page
    token = page.cookies["csrftoken"].value if "csrftoken" in page.cookies else browser.cookies["csrftoken"].value
    posted = browser.post(f"/projects/{cast.digits.pk}/secrets/set/", {"name": "NEW_ONE", "value": "form-set-value-1",
                                                                        "csrfmiddlewaretoken": token}, follow=True)
    assert "NEW_ONE" in posted.content.decode() and "form-set-value-1" not in posted.content.decode()
    assert browser.post(f"/projects/{cast.digits.pk}/secrets/set/", {"name": "NO_CSRF", "value": "form-set-value-2"}).status_code == 403
    viewer = Client()
    viewer.force_login(cast.victor)
    viewer_html = viewer.get(f"/projects/{cast.digits.pk}/secrets/").content.decode()
    assert "HF_TOKEN" in viewer_html and 'id="secret-form"' not in viewer_html
    assert viewer.post(f"/projects/{cast.digits.pk}/secrets/HF_TOKEN/delete/").status_code == 302
    assert Secret.objects.filter(name="HF_TOKEN").exists()
    outsider = Client()
    outsider.force_login(cast.bob)
    assert outsider.get(f"/projects/{cast.digits.pk}/secrets/").status_code == 404
