"""Web security: production cookie and HSTS settings, CSRF on every form, password validation
on the user-creation path, and credentials that are never interchangeable.

Covered elsewhere (not repeated): `check --deploy` is clean and unsafe production settings
refuse to start (tests/foundation/test_deploy.py); login throttling and lockout, shared with the
token endpoint (tests/foundation/test_api_basics.py::test_login_form_locks_out_after_repeated_failures,
::test_token_endpoint_shares_the_login_lockout, ::test_token_endpoint_is_rate_limited); session
API writes need CSRF (::test_session_auth_works_and_needs_csrf_for_writes); user tokens on
every agent route (tests/foundation/test_isolation_matrix.py::test_agent_routes_refuse_users);
code snapshot size limits and safe unpacking (tests/runs/test_snapshots.py).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from cryptography.fernet import Fernet
from django.contrib.auth.models import User
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.test import Client, override_settings
from rest_framework.test import APIClient

from apps.accounts.services import api_token_create
from apps.nodes.auth import NODE_CREDENTIAL_PREFIX, hash_secret
from apps.nodes.models import Node, NodePool
from tests.foundation.test_isolation_matrix import OBJECTS, ROUTES, Route, _owned, _path_for

ROOT = Path(__file__).resolve().parents[2]


# --- production settings ----------------------------------------------------------------------
def _production_settings() -> dict[str, Any]:
    code = ("import json, django; django.setup(); from django.conf import settings as s; print(json.dumps({k: getattr(s, k) for k in ["
            "'SESSION_COOKIE_SECURE','CSRF_COOKIE_SECURE','SESSION_COOKIE_HTTPONLY','SECURE_HSTS_SECONDS',"
            "'SECURE_HSTS_INCLUDE_SUBDOMAINS','SECURE_HSTS_PRELOAD','SECURE_SSL_REDIRECT','SECURE_CONTENT_TYPE_NOSNIFF',"
            "'X_FRAME_OPTIONS','DEBUG','SECURE_PROXY_SSL_HEADER']}))")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINYARD_") and k != "DJANGO_SETTINGS_MODULE"}
    env.update(DJANGO_SETTINGS_MODULE="portal.settings.production", TRAINYARD_SECRET_KEY=secrets.token_urlsafe(64),
               TRAINYARD_SECRET_KEYS=Fernet.generate_key().decode())
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=True)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def test_production_cookies_are_secure_and_hsts_is_on(cast: Any) -> None:
    prod = _production_settings()
    assert prod["SESSION_COOKIE_SECURE"] and prod["CSRF_COOKIE_SECURE"] and prod["SESSION_COOKIE_HTTPONLY"]
    assert prod["SECURE_HSTS_SECONDS"] >= 31536000 and prod["SECURE_HSTS_INCLUDE_SUBDOMAINS"] and prod["SECURE_HSTS_PRELOAD"]
    assert prod["SECURE_SSL_REDIRECT"] and prod["SECURE_CONTENT_TYPE_NOSNIFF"] and prod["X_FRAME_OPTIONS"] == "DENY"
    assert prod["DEBUG"] is False
    # And on the wire: a login over HTTPS (behind the proxy) sets Secure cookies and sends HSTS.
    wire = {k: v for k, v in prod.items() if k != "SECURE_PROXY_SSL_HEADER"}
    with override_settings(**wire, SECURE_PROXY_SSL_HEADER=tuple(prod["SECURE_PROXY_SSL_HEADER"])):
        client = Client(HTTP_X_FORWARDED_PROTO="https")
        page = client.get("/login/")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.content.decode())
        assert token is not None
        response = client.post("/login/", {"username": "alice", "password": "pw-alice-123456", "csrfmiddlewaretoken": token.group(1)},
                               HTTP_REFERER="https://testserver/login/")
        assert response.status_code == 302, response.content[:300]
        assert response["Strict-Transport-Security"].startswith("max-age=31536000")
        assert response.cookies["sessionid"]["secure"] and response.cookies["sessionid"]["httponly"]
        assert page.cookies["csrftoken"]["secure"]
        assert Client().get("/login/").status_code == 301, "plain HTTP is redirected to HTTPS"


# --- CSRF on every form -------------------------------------------------------------------------
class _Forms(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.forms: list[dict[str, Any]] = []
        self._open: dict[str, Any] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "form":
            self._open = {"method": (a.get("method") or "get").lower(), "action": a.get("action") or "", "id": a.get("id"),
                          "csrf": False}
            self.forms.append(self._open)
        elif tag == "input" and self._open is not None and a.get("name") == "csrfmiddlewaretoken" and a.get("value"):
            self._open["csrf"] = True
        elif tag == "input" and a.get("form") and a.get("name") == "csrfmiddlewaretoken":
            for form in self.forms:
                if form["id"] == a["form"]:
                    form["csrf"] = True

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self._open = None


def _page_paths(cast: Any) -> list[str]:
    paths = ["/login/"]
    for route in ROUTES:
        if route.is_api or route.key.startswith(("admin/", "static/")) or route.key in ("logout/",):
            continue
        if not route.kwargs:
            paths.append("/" + route.key)
        elif route.key in OBJECTS:
            paths.append(_path_for(route, _owned(route.key).make(cast, cast.vision)))
    return paths


def test_every_post_form_carries_a_csrf_token_and_is_refused_without(cast: Any) -> None:
    users = {"alice": cast.alice, "admin": cast.admin, "carol": cast.carol}
    checked: dict[str, str] = {}
    for label, user in users.items():
        client = Client()
        client.force_login(user)
        for path in _page_paths(cast):
            response = client.get(path)
            if response.status_code != 200 or "text/html" not in response.get("Content-Type", ""):
                continue
            parser = _Forms()
            parser.feed(response.content.decode(errors="replace"))
            for form in parser.forms:
                if form["method"] != "post":
                    continue
                where = f"{path} as {label}: form {form['id'] or form['action'] or '(self)'}"
                assert form["csrf"], f"{where} has no csrfmiddlewaretoken"
                checked.setdefault(form["action"] or path, where)
    assert len(checked) >= 5, f"too few forms found to prove anything: {sorted(checked)}"
    # Each form's target refuses a POST without the token (before doing anything).
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(cast.admin)
    for action, where in checked.items():
        response = strict.post(action, {"name": "X_CSRF_PROBE", "value": "probe-value-123"})
        assert response.status_code == 403, f"{where}: POST {action} without a CSRF token answered {response.status_code}"
    anonymous = Client(enforce_csrf_checks=True)
    assert anonymous.post("/login/", {"username": "alice", "password": "pw-alice-123456"}).status_code == 403


def test_session_writes_to_the_api_need_csrf(cast: Any) -> None:
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(cast.alice)
    response = strict.post(f"/api/v1/projects/{cast.digits.pk}/secrets/", data=json.dumps({"name": "A_B", "value": "12345678"}),
                           content_type="application/json")
    assert response.status_code == 403 and "CSRF" in response.json()["error"]["message"]


# --- passwords ----------------------------------------------------------------------------------
@pytest.mark.parametrize("weak", ["password", "12345678901", "short1", "alice-the-user"])
def test_weak_passwords_are_refused_by_user_creation(cast: Any, weak: str) -> None:
    with pytest.raises(ValidationError):
        validate_password(weak, user=User(username="alice-the-user"))
    # The user-creation path (the admin's add-user form) refuses it and creates nobody.
    client = Client()
    client.force_login(cast.admin)
    response = client.post("/admin/auth/user/add/", {"username": "alice-the-user", "password1": weak, "password2": weak,
                                                     "usable_password": "true"})
    assert response.status_code == 200, "the form is shown again with errors"
    assert "errorlist" in response.content.decode()
    assert not User.objects.filter(username="alice-the-user").exists()
    strong = "c0rrect-h0rse-battery-staple"
    response = client.post("/admin/auth/user/add/", {"username": "alice-the-user", "password1": strong, "password2": strong,
                                                     "usable_password": "true"})
    assert response.status_code == 302 and User.objects.filter(username="alice-the-user").exists()


# --- credentials never interchangeable ---------------------------------------------------------
def _node() -> tuple[Node, str]:
    pool = NodePool.objects.get_or_create(name="sec")[0]
    credential = NODE_CREDENTIAL_PREFIX + secrets.token_urlsafe(32)
    node = Node.objects.create(pool=pool, hostname="sec-node", agent_uid="sec-uid", credential_hash=hash_secret(credential))
    return node, credential


def test_node_credentials_are_not_user_credentials_and_vice_versa(cast: Any) -> None:
    node, credential = _node()
    user_key = api_token_create(user=cast.admin, name="sec")[1]
    user_routes = ["/api/v1/runs/", "/api/v1/projects/", f"/api/v1/projects/{cast.digits.pk}/secrets/", "/api/v1/nodes/"]
    for header in (f"Node {credential}", f"Token {credential}", f"Bearer {credential}", f"Node {user_key}"):
        for path in user_routes:
            status = APIClient(HTTP_AUTHORIZATION=header).get(path).status_code
            assert status == 401, f"GET {path} with {header.split()[0]} <{header.split()[1][:4]}...>: {status}"
    agent_paths = [_agent_path(r) for r in ROUTES if r.key.startswith("api/v1/agent/") and r.key != "api/v1/agent/register/"]
    assert agent_paths, "the agent protocol routes are there"
    for header in (f"Token {user_key}", f"Node {user_key}", f"Token {credential}"):
        for path in agent_paths:
            status = APIClient(HTTP_AUTHORIZATION=header).post(path, {}, format="json").status_code
            assert status in (401, 403), f"POST {path} with {header.split()[0]} <{header.split()[1][:4]}...>: {status}"
    # A signed-in session (even a superuser's) is not a node either.
    session = APIClient()
    session.force_login(cast.admin)
    for path in agent_paths:
        assert session.post(path, {}, format="json").status_code in (401, 403), path
    # And the genuine node credential works where it belongs.
    response = APIClient(HTTP_AUTHORIZATION=f"Node {credential}").post("/api/v1/agent/heartbeat/", {"session": node.session},
                                                                         format="json")
    assert response.status_code == 200, response.content


def _agent_path(route: Route) -> str:
    return route.path(dict.fromkeys(route.kwargs, 1))
