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
    nav = list(NAV)
    user = getattr(request, "user", None)
    if user is not None and user.is_authenticated and (user.is_superuser or user.groups.filter(name="finance").exists()):
        nav.append(("Finance", "/finance/"))
    items = [{"label": label, "url": url, "active": path.startswith(url)} for label, url in nav]
    return {"nav_items": items}
