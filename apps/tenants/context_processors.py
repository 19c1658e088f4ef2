from __future__ import annotations

from typing import Any

from django.http import HttpRequest

from apps.tenants.selectors import team_list, user_is_finance

NAV = [
    ("Projects", "/projects/"),
    ("Runs", "/runs/"),
    ("Queue", "/queue/"),
    ("Compare", "/compare/"),
    ("Nodes", "/nodes/"),
    ("Budgets", "/budgets/"),
]

TEAM_PAGES = {"/projects/", "/runs/", "/compare/"}


def navigation(request: HttpRequest) -> dict[str, Any]:
    path = request.path
    nav = list(NAV)
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {"nav_items": []}
    in_a_team = team_list(user=user).exists()
    if in_a_team:
        # Submitting is the main thing engineers come for: one click from anywhere.
        nav.insert(2, ("New run", "/runs/new/"))
    else:
        # Projects, runs and comparisons are a team's: in no team they would all be empty.
        nav = [item for item in nav if item[1] not in TEAM_PAGES]
    if user_is_finance(user=user):
        # Finance people in no team have nothing under Projects or Runs: their page goes first.
        nav.insert(len(nav) if in_a_team else 0, ("Finance", "/finance/"))
    # The longest matching prefix is the current page (/runs/new/ is not also "Runs").
    current = max((url for _, url in nav if path.startswith(url)), key=len, default=None)
    items = [{"label": label, "url": url, "active": url == current} for label, url in nav]
    return {"nav_items": items}
