from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render

from apps.core.users import signed_in_user
from apps.tenants.models import Membership, Project
from apps.tenants.selectors import project_list, team_list, user_is_finance

# Other apps add panels to the project page (spend, recent runs) without this app importing
# them: each registers a callable (request, project) -> {"template", "data"} or None.
PROJECT_PANELS: list[Callable[[HttpRequest, Project], dict[str, Any] | None]] = []
# And cards above the project list, the signed-in home page (your runs): (request) -> panel or None.
HOME_PANELS: list[Callable[[HttpRequest], dict[str, Any] | None]] = []


@login_required
def home(request: HttpRequest) -> HttpResponse:
    # Someone in the finance role and in no team would land on an empty Projects page telling
    # them to ask for a team: their work is the finance console, so home points there.
    if user_is_finance(user=request.user) and not team_list(user=request.user).exists():
        return render(request, "core/home_finance.html")
    return redirect("project-list")


@login_required
def project_list_page(request: HttpRequest) -> HttpResponse:
    roles = dict(Membership.objects.filter(user=signed_in_user(request)).values_list("team_id", "role"))
    projects = list(project_list(user=request.user))
    teams = []
    for team in team_list(user=request.user):
        team.role = roles.get(team.pk)  # type: ignore[attr-defined]
        team.project_rows = [p for p in projects if p.team_id == team.pk]  # type: ignore[attr-defined]
        teams.append(team)
    panels = [panel for panel in (make(request) for make in HOME_PANELS) if panel]
    return render(request, "tenants/project_list.html", {"teams": teams, "panels": panels})


@login_required
def project_detail_page(request: HttpRequest, pk: int) -> HttpResponse:
    project = get_object_or_404(project_list(user=request.user), pk=pk)
    members = Membership.objects.filter(team=project.team).select_related("user")
    panels = [panel for panel in (make(request, project) for make in PROJECT_PANELS) if panel]
    return render(request, "tenants/project_detail.html", {"project": project, "members": members, "panels": panels})
