from __future__ import annotations

from typing import Any

from django.http import HttpRequest

NAV = [
    ("Projects", "/projects/"),
    ("Runs", "/runs/"),
    ("Queue", "/queue/"),
    ("Compare", "/compare/"),
    ("Nodes", "/nodes/"),
    ("Budgets", "/budgets/"),
]


def navigation(request: HttpRequest) -> dict[str, Any]:
    path = request.path
    items = [{"label": label, "url": url, "active": path.startswith(url)} for label, url in NAV]
    return {"nav_items": items}
