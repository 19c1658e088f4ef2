from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render

from apps.tenants.selectors import team_list, user_is_finance


@login_required
def home(request: HttpRequest) -> HttpResponse:
    # Someone in the finance role and in no team would land on an empty Projects page telling
    # them to ask for a team: their work is the finance console, so home points there.
    if user_is_finance(user=request.user) and not team_list(user=request.user).exists():
        return render(request, "core/home_finance.html")
    return redirect("project-list")


def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness + database reachability, for load balancers and docker-compose."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return JsonResponse({"status": "ok"})
