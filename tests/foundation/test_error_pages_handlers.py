"""Errors with DEBUG off, as `make run` now serves (issue 26): an unknown URL or a crash is the
portal's own page with no URL list and no traceback, and every API error, an oversized body's
413 included, is the JSON shape naming the limit.

This module is also the URLconf of its crash tests: the portal's URLs plus two views that raise.
"""

from __future__ import annotations

import json
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.test import Client, override_settings
from django.urls import path

from portal import urls as portal_urls
from portal.launch import Launcher

FIFTY_MB = 50 * 1000 * 1000
LIMIT = 2_621_440  # Django's DATA_UPLOAD_MAX_MEMORY_SIZE default (2.5 MiB)


def _boom(request: HttpRequest) -> HttpResponse:
    raise RuntimeError("secret detail of a bug")


urlpatterns = [path("boom/", _boom), path("api/v1/boom/", _boom), *portal_urls.urlpatterns]
handler400, handler403 = portal_urls.handler400, portal_urls.handler403
handler404, handler500 = portal_urls.handler404, portal_urls.handler500


def _signed_in(user: Any) -> Client:
    client = Client(raise_request_exception=False)
    client.force_login(user)
    return client


def test_make_run_serves_with_debug_off_and_a_vault_key(monkeypatch: Any, tmp_path: Any) -> None:
    for name in ("TRAINYARD_DEBUG", "TRAINYARD_SECRET_KEYS", "TRAINYARD_SECRET_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TRAINYARD_VAR_DIR", str(tmp_path))
    env = Launcher().env
    assert env["TRAINYARD_DEBUG"] == "false"
    assert env["TRAINYARD_SECRET_KEYS"], "DEBUG off: the vault needs a key, or storing a secret is a 503"
    # A developer may still ask for the debug pages, and an operator's keys are kept.
    monkeypatch.setenv("TRAINYARD_DEBUG", "true")
    monkeypatch.setenv("TRAINYARD_SECRET_KEYS", "k1")
    env = Launcher().env
    assert env["TRAINYARD_DEBUG"] == "true" and env["TRAINYARD_SECRET_KEYS"] == "k1"


def test_the_make_run_vault_key_is_the_one_debug_derived(settings: Any) -> None:
    """Secrets stored by an earlier `make run` (DEBUG on, key derived from SECRET_KEY) stay readable."""
    from apps.vault.crypto import development_key

    assert development_key(settings.SECRET_KEY) == development_key()


def test_an_unknown_url_is_the_portals_page_without_url_patterns(cast: Any) -> None:
    for client in (Client(), _signed_in(cast.alice)):
        response = client.get("/no/such/page/")
        html = response.content.decode()
        assert response.status_code == 404 and "Page not found" in html and "/no/such/page/" in html
        assert "URLconf" not in html and "api/v1/" not in html and "admin/" not in html


def test_an_unknown_api_url_is_json(cast: Any) -> None:
    response = _signed_in(cast.alice).get("/api/v1/no-such-thing/")
    assert response.status_code == 404 and response["Content-Type"] == "application/json"
    assert response.json() == {"error": {"status": 404, "code": "not_found", "message": "Not found.", "fields": {}}}


@override_settings(ROOT_URLCONF=__name__)
def test_a_crash_is_the_portals_page_without_a_traceback(cast: Any) -> None:
    response = _signed_in(cast.alice).get("/boom/")
    html = response.content.decode()
    assert response.status_code == 500 and "Something went wrong" in html and "css/app.css" in html
    assert "Traceback" not in html and "secret detail" not in html and "RuntimeError" not in html


@override_settings(ROOT_URLCONF=__name__)
def test_a_crash_in_the_api_is_json(cast: Any) -> None:
    response = _signed_in(cast.alice).get("/api/v1/boom/")
    assert response.status_code == 500
    error = response.json()["error"]
    assert error["code"] == "server_error" and "secret detail" not in json.dumps(error)


def test_a_50_mb_json_post_is_a_json_413_naming_the_limit(cast: Any) -> None:
    body = b'{"blob": "' + b"x" * (FIFTY_MB - 12) + b'"}'
    for client in (Client(), _signed_in(cast.alice)):  # refused before authentication too
        response = client.post("/api/v1/runs/", body, content_type="application/json")
        assert response.status_code == 413
        assert response.json() == {"error": {
            "status": 413, "code": "too_large",
            "message": f"body: request body is {len(body):,} bytes; the limit is {LIMIT:,} bytes (2.5 MiB)",
            "fields": {"body": [f"request body is {len(body):,} bytes; the limit is {LIMIT:,} bytes (2.5 MiB)"]}}}


def test_an_oversized_form_post_to_the_api_is_a_json_413(cast: Any) -> None:
    """Django's own refusal (RequestDataTooBig, a form body) takes the same shape."""
    body = "name=" + "x" * (LIMIT + 10)
    response = _signed_in(cast.alice).post("/api/v1/runs/", body, content_type="application/x-www-form-urlencoded")
    assert response.status_code == 413
    error = response.json()["error"]
    assert error["code"] == "too_large" and f"the limit is {LIMIT:,} bytes" in error["message"]
