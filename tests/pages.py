"""A page as a signed-in user sees it, for tests that read the HTML the server renders."""

from __future__ import annotations

from typing import Any

from django.test import Client


def page_html(user: Any, path: str, *, status: int = 200) -> str:
    client = Client()
    client.force_login(user)
    response = client.get(path)
    assert response.status_code == status, (path, response.status_code)
    return response.content.decode()
