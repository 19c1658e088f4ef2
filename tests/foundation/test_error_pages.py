"""Refusals in the browser are pages of the portal that say what happened, not Django's bare text."""

from __future__ import annotations

import re
from typing import Any

from django.test import Client


def _signed_in(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_not_found_page_keeps_the_menu_and_names_no_object(cast: Any) -> None:
    response = _signed_in(cast.alice).get(f"/projects/{cast.tinylm.pk}/")
    assert response.status_code == 404
    html = response.content.decode()
    assert "Page not found" in html and f"/projects/{cast.tinylm.pk}/" in html
    assert 'aria-label="Main"' in html and 'href="/"' in html
    # Another team's project reads exactly like one that never existed.
    assert "Tiny LM" not in html and "tiny-lm" not in html
    missing = _signed_in(cast.alice).get("/projects/999999/").content.decode()
    # Each render masks the logout form's CSRF token afresh.
    unmask = re.compile(r'name="csrfmiddlewaretoken" value="\w+"')
    assert unmask.sub("", missing.replace("999999", str(cast.tinylm.pk))) == unmask.sub("", html)


def test_forbidden_page_says_why(cast: Any) -> None:
    response = _signed_in(cast.alice).get("/finance/")
    assert response.status_code == 403
    html = response.content.decode()
    assert "Not allowed" in html and "The finance console is for the finance role and admins." in html
    assert 'aria-label="Main"' in html


def test_api_errors_stay_json(cast: Any) -> None:
    response = _signed_in(cast.alice).get("/api/v1/projects/999999/")
    assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"


def test_not_found_is_the_portals_page_with_debug_on_too(cast: Any, settings: Any) -> None:
    # With DEBUG on (`TRAINYARD_DEBUG=true make run`), another team's run must still be the
    # portal's 404 page, not Django's debug page listing every URL pattern.
    settings.DEBUG = True
    response = _signed_in(cast.alice).get(f"/projects/{cast.tinylm.pk}/")
    html = response.content.decode()
    assert response.status_code == 404 and "Page not found" in html and 'aria-label="Main"' in html
    assert "URLconf" not in html
