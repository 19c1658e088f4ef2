"""Logging in through the real form in Chromium, against a real gunicorn on a seeded database."""

from __future__ import annotations

from typing import Any

import pytest

from tests.fixtures.browser import VIEWPORT, login, screenshot

pytestmark = [pytest.mark.browser, pytest.mark.live]


def _project_id(live_stack: Any, team: str, slug: str) -> int:
    rows = live_stack.query(
        "SELECT p.id FROM tenants_project p JOIN tenants_team t ON p.team_id = t.id WHERE t.slug = ? AND p.slug = ?", (team, slug)
    )
    assert rows, f"seed_demo made no {team}/{slug}"
    return int(rows[0][0])


def _assert_fits_the_screen(page: Any) -> None:
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= VIEWPORT["width"], f"{page.url} scrolls sideways at {VIEWPORT['width']}px: {width}px wide"


def _assert_forms_have_csrf(page: Any) -> None:
    missing = page.evaluate(
        """() => [...document.querySelectorAll('form')]
              .filter(f => (f.method || 'get').toLowerCase() === 'post')
              .filter(f => !f.querySelector('input[name=csrfmiddlewaretoken]'))
              .map(f => f.outerHTML.slice(0, 120))"""
    )
    assert not missing, f"POST forms without a CSRF token on {page.url}: {missing}"


def test_alice_logs_in_and_sees_only_her_team(live_stack: Any, browser_page: Any) -> None:
    page = browser_page
    page.goto(live_stack.url + "/projects/")
    assert "/login/" in page.url, "an anonymous visitor must be sent to the login form"
    _assert_forms_have_csrf(page)
    _assert_fits_the_screen(page)
    screenshot(page, "login")

    page.fill("#id_username", "alice")
    page.fill("#id_password", "not-her-password")
    page.click("button[type=submit]")
    assert page.get_by_role("alert").inner_text().strip(), "a failed login must say why"
    assert "/login/" in page.url

    login(page, live_stack, "alice")
    page.goto(live_stack.url + "/projects/")
    body = page.inner_text("main")
    assert "vision/digits" in body
    assert "nlp/tiny-lm" not in body and "NLP" not in body
    _assert_forms_have_csrf(page)
    _assert_fits_the_screen(page)
    screenshot(page, "projects")

    page.get_by_role("link", name="vision/digits", exact=True).click()
    page.wait_for_url(f"**/projects/{_project_id(live_stack, 'vision', 'digits')}/")
    assert "alice" in page.inner_text("main")
    _assert_fits_the_screen(page)
    screenshot(page, "project-detail")

    response = page.goto(f"{live_stack.url}/projects/{_project_id(live_stack, 'nlp', 'tiny-lm')}/")
    assert response is not None and response.status == 404
    assert "tiny-lm" not in page.content()

    page.goto(live_stack.url + "/account/tokens/")
    _assert_forms_have_csrf(page)
    _assert_fits_the_screen(page)
    page.fill("#id_name", "browser")
    page.click("button[value=create]")
    assert page.inner_text("#new-token").startswith("ty_")
    screenshot(page, "tokens")

    page.click("text=Log out")
    page.goto(live_stack.url + "/projects/")
    assert "/login/" in page.url
