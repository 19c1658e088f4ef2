"""The API's ground rules: token and session auth, one error shape for every failure, a valid
OpenAPI description, offline docs, the API tokens page, and login lockout."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.cache import cache
from django.test import Client
from openapi_spec_validator import validate
from rest_framework.test import APIClient

from apps.accounts.api.views import TokenThrottle
from apps.accounts.models import ApiToken
from apps.core.errors import Conflict, api_exception_handler

TOKEN_URL = "/api/v1/auth/token/"


@pytest.fixture(autouse=True)
def _fresh_cache() -> Iterator[None]:
    # Lockout counters and throttle history live in the cache; tests must not share them.
    cache.clear()
    yield
    cache.clear()


def assert_error(response: Any, status: int, code: str | None = None) -> dict[str, Any]:
    assert response.status_code == status, (response.status_code, response.content[:300])
    assert response["Content-Type"].startswith("application/json"), response["Content-Type"]
    body = json.loads(response.content)
    assert set(body) == {"error"}, body
    error = body["error"]
    assert set(error) == {"status", "code", "message", "fields"}, error
    assert error["status"] == status
    assert isinstance(error["message"], str) and error["message"]
    assert isinstance(error["fields"], dict)
    if code is not None:
        assert error["code"] == code, error
    return dict(error)


def _token(username: str, password: str) -> Any:
    return APIClient().post(TOKEN_URL, {"username": username, "password": password}, format="json")


# --- tokens ---------------------------------------------------------------------------------
def test_token_for_good_credentials_is_shown_once_and_hashed_at_rest(cast: Any) -> None:
    response = _token("alice", "pw-alice-123456")
    assert response.status_code == 201, response.content
    key = response.json()["token"]
    assert key.startswith("ty_") and len(key) > 30
    stored = ApiToken.objects.get(pk=response.json()["id"])
    assert stored.key_hash == hashlib.sha256(key.encode()).hexdigest()
    assert key not in json.dumps([str(v) for v in ApiToken.objects.values().get(pk=stored.pk).values()])
    # The list shows tokens, never their keys.
    listing = APIClient(HTTP_AUTHORIZATION=f"Token {key}").get("/api/v1/auth/tokens/")
    assert listing.status_code == 200
    assert key not in listing.content.decode()
    assert [t["prefix"] for t in listing.json()] == [key[:10]]


def test_token_for_bad_credentials_is_refused(cast: Any) -> None:
    error = assert_error(_token("alice", "wrong-password"), 400, "invalid_credentials")
    assert "password" in error["message"].lower()
    assert_error(_token("nobody", "pw-alice-123456"), 400, "invalid_credentials")
    error = assert_error(APIClient().post(TOKEN_URL, {"username": "alice"}, format="json"), 400, "invalid")
    assert "password" in error["fields"]
    assert not ApiToken.objects.exists()


def test_token_header_authenticates_and_revoked_token_is_401(cast: Any) -> None:
    key = _token("bob", "pw-bob-1234567").json()["token"]
    client = APIClient(HTTP_AUTHORIZATION=f"Token {key}")
    teams = client.get("/api/v1/teams/")
    assert teams.status_code == 200
    assert [t["slug"] for t in teams.json()["results"]] == ["nlp"]
    token = ApiToken.objects.get(user=cast.bob)
    assert client.delete(f"/api/v1/auth/tokens/{token.pk}/").status_code == 204
    response = client.get("/api/v1/teams/")
    assert_error(response, 401, "authentication_failed")
    assert response["WWW-Authenticate"] == "Token"
    # Malformed and unknown keys are 401 too, with the same shape.
    assert_error(APIClient(HTTP_AUTHORIZATION="Token").get("/api/v1/teams/"), 401)
    assert_error(APIClient(HTTP_AUTHORIZATION="Token ty_not-a-real-key").get("/api/v1/teams/"), 401)
    # A node credential is not a user token.
    assert_error(APIClient(HTTP_AUTHORIZATION="Token tyn_abc").get("/api/v1/teams/"), 401)


def test_revoking_someone_elses_token_is_404(cast: Any) -> None:
    _token("bob", "pw-bob-1234567")
    token = ApiToken.objects.get(user=cast.bob)
    assert_error(cast.client(cast.alice).delete(f"/api/v1/auth/tokens/{token.pk}/"), 404, "not_found")
    token.refresh_from_db()
    assert token.revoked_at is None


def test_no_credentials_is_401(cast: Any) -> None:
    for path in ("/api/v1/teams/", "/api/v1/projects/", "/api/v1/auth/tokens/", "/api/v1/audit/"):
        assert_error(APIClient().get(path), 401, "not_authenticated")


def test_session_auth_works_and_needs_csrf_for_writes(cast: Any) -> None:
    client = APIClient(enforce_csrf_checks=True)
    assert client.login(username="alice", password="pw-alice-123456")
    response = client.get("/api/v1/projects/")
    assert response.status_code == 200
    assert [p["full_slug"] for p in response.json()["results"]] == ["vision/digits"]
    body = {"team": "vision", "slug": "new-one", "name": "New"}
    assert_error(client.post("/api/v1/projects/", body, format="json"), 403)
    client.get("/projects/")  # sets the CSRF cookie, as a browser page would
    csrf = client.cookies["csrftoken"].value
    assert client.post("/api/v1/projects/", body, format="json", HTTP_X_CSRFTOKEN=csrf).status_code == 201


def test_token_endpoint_is_rate_limited(cast: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(TokenThrottle, "rate", "3/min", raising=False)
    for _ in range(3):
        _token("alice", "wrong-password")
    error = assert_error(_token("alice", "pw-alice-123456"), 429, "throttled")
    assert "available in" in error["message"]


def test_login_form_locks_out_after_repeated_failures(cast: Any) -> None:
    client = Client()
    for _ in range(10):
        response = client.post("/login/", {"username": "alice", "password": "wrong"})
        assert response.status_code == 200
        assert "correct username and password" in response.content.decode()
    locked = client.post("/login/", {"username": "alice", "password": "pw-alice-123456"})
    assert locked.status_code == 429
    assert "Too many failed attempts" in locked.content.decode()
    assert "_auth_user_id" not in client.session
    # Another user from the same address is not locked out by alice's failures.
    assert client.post("/login/", {"username": "bob", "password": "pw-bob-1234567"}).status_code == 302


def test_token_endpoint_shares_the_login_lockout(cast: Any) -> None:
    for _ in range(10):
        _token("alice", "wrong-password")
    error = assert_error(_token("alice", "pw-alice-123456"), 429, "locked_out")
    assert "15 minutes" in error["message"]
    assert not ApiToken.objects.exists()


# --- one error shape --------------------------------------------------------------------
def test_error_shape_for_every_status(cast: Any) -> None:
    alice, victor = cast.client(cast.alice), cast.client(cast.victor)
    error = assert_error(alice.post("/api/v1/projects/", {"team": "vision", "slug": "Bad Slug!", "name": ""}, format="json"), 400)
    assert {"slug", "name"} <= set(error["fields"])
    assert_error(APIClient().get("/api/v1/projects/"), 401)
    assert_error(victor.patch(f"/api/v1/projects/{cast.digits.pk}/", {"name": "x"}, format="json"), 403)
    assert_error(alice.get(f"/api/v1/projects/{cast.tinylm.pk}/"), 404, "not_found")
    assert_error(alice.put(f"/api/v1/projects/{cast.digits.pk}/", {}, format="json"), 405, "method_not_allowed")
    error = assert_error(alice.post("/api/v1/projects/", "{not json", content_type="application/json"), 400, "parse_error")
    assert "JSON" in error["message"]


def test_conflict_is_409_with_the_same_shape() -> None:
    # No foundation endpoint has a state conflict; the handler is what every app's 409 goes through.
    response = api_exception_handler(Conflict("Run 7 already finished.", code="finished"), {})
    assert response is not None and response.status_code == 409
    assert response.data == {"error": {"status": 409, "code": "finished", "message": "Run 7 already finished.", "fields": {}}}


@pytest.mark.parametrize("path", ["/api/v1/no-such-thing/", "/api/nope", "/api/v1/projects/not-a-number/x/", "/api/v2/teams/"])
def test_unknown_api_urls_answer_json_not_html(cast: Any, path: str) -> None:
    for client in (APIClient(), cast.client(cast.alice)):
        for method in ("get", "post"):
            response = getattr(client, method)(path, HTTP_ACCEPT="text/html")
            assert_error(response, 404, "not_found")


# --- OpenAPI ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def schema(django_db_blocker: Any) -> dict[str, Any]:
    with django_db_blocker.unblock():
        response = Client().get("/api/schema/?format=json")
    assert response.status_code == 200
    return dict(json.loads(response.content))


def test_schema_is_valid_openapi_3(schema: dict[str, Any]) -> None:
    assert schema["openapi"].startswith("3.")
    validate(schema)
    assert "/api/v1/projects/" in schema["paths"]
    assert {"tokenAuth"} <= set(schema["components"]["securitySchemes"])


def test_every_operation_documents_its_responses(schema: dict[str, Any]) -> None:
    undocumented = []
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            if method not in ("get", "post", "put", "patch", "delete"):
                continue
            responses = operation.get("responses") or {}
            if not responses or not all(r.get("description") is not None for r in responses.values()):
                undocumented.append(f"{method.upper()} {path}")
    assert not undocumented, f"operations without documented responses: {undocumented}"


def test_api_docs_use_local_assets_only(cast: Any) -> None:
    client = Client()
    client.force_login(cast.alice)
    response = client.get("/api/docs/")
    assert response.status_code == 200
    html = response.content.decode()
    external = re.findall(r"""(?:src|href)\s*=\s*["'](https?:)?//[^"']+""", html)
    assert not external, f"/api/docs/ loads assets from elsewhere: {external}"
    assets = re.findall(r"""(?:src|href)\s*=\s*["'](/static/[^"']+)""", html)
    assert any("swagger-ui" in a for a in assets), assets
    for asset in assets:
        served = client.get(asset)
        assert served.status_code == 200, asset
        b"".join(served.streaming_content if served.streaming else [served.content])  # type: ignore[attr-defined]
    assert "/api/schema/" in html


# --- the API tokens page -------------------------------------------------------------------
def test_tokens_page_creates_and_revokes_with_csrf(cast: Any) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(cast.alice)
    page = client.get("/account/tokens/")
    assert page.status_code == 200
    csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.content.decode())
    assert csrf, "the create form has no CSRF token"
    assert client.post("/account/tokens/", {"name": "laptop", "action": "create"}).status_code == 403  # no CSRF token
    posted = client.post("/account/tokens/", {"name": "laptop", "action": "create", "csrfmiddlewaretoken": csrf.group(1)})
    # Redirected to a GET, so reloading the page shows it again rather than creating another token.
    assert posted.status_code == 302 and posted["Location"] == "/account/tokens/"
    created = client.get("/account/tokens/")
    assert created.status_code == 200 and created["Cache-Control"] == "no-store"
    key = re.search(r'<code id="new-token">(ty_[^<]+)</code>', created.content.decode())
    assert key, "the new key is not shown"
    api = APIClient(HTTP_AUTHORIZATION=f"Token {key.group(1)}")
    assert api.get("/api/v1/teams/").status_code == 200
    assert key.group(1) not in client.get("/account/tokens/").content.decode(), "the key is shown more than once"
    assert ApiToken.objects.filter(user=cast.alice).count() == 1
    assert 'data-confirm="Revoke token laptop' in created.content.decode()  # static/core/confirm.js asks first
    token = ApiToken.objects.get(user=cast.alice)
    revoked = client.post(
        "/account/tokens/", {"action": "revoke", "token": token.pk, "csrfmiddlewaretoken": csrf.group(1)}, follow=True
    )
    assert revoked.status_code == 200
    token.refresh_from_db()
    assert token.revoked_at is not None
    assert "revoked" in revoked.content.decode()
    assert api.get("/api/v1/teams/").status_code == 401
    # Another user's token cannot be revoked from the page: 404, and it stays active.
    bob_token = ApiToken.objects.create(user=cast.bob, name="b", prefix="ty_b", key_hash="f" * 64)
    other = client.post("/account/tokens/", {"action": "revoke", "token": bob_token.pk, "csrfmiddlewaretoken": csrf.group(1)})
    assert other.status_code == 404
    bob_token.refresh_from_db()
    assert bob_token.revoked_at is None


def test_navigation_fits_who_is_signed_in(cast: Any) -> None:
    def nav(user: Any, path: str) -> list[tuple[str, bool]]:
        client = Client()
        client.force_login(user)
        html = client.get(path).content.decode()
        block = html.split('<nav class="mainnav"', 1)[1].split("</nav>", 1)[0]
        return [(label, 'aria-current="page"' in attrs) for attrs, label in re.findall(r'<a href="[^"]+"([^>]*)>([^<]+)</a>', block)]

    alice = nav(cast.alice, "/runs/new/")
    # Submitting is one click away, and on its page only "New run" is current (not also "Runs").
    assert [label for label, _ in alice][:3] == ["Projects", "Runs", "New run"] and "Finance" not in dict(alice)
    assert [label for label, current in alice if current] == ["New run"]
    carol = nav(cast.carol, "/finance/")
    # Finance in no team: her page comes first, and there is nothing to submit.
    assert carol[0] == ("Finance", True) and not {"New run", "Projects", "Runs", "Compare"} & set(dict(carol))
