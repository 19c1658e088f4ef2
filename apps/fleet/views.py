from __future__ import annotations

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from apps.core.conditional import revalidated
from apps.core.text import fmt_duration
from apps.fleet.selectors import node_overview


@login_required
def node_list_page(request: HttpRequest) -> HttpResponse:
    """The fleet by pool. With ?partial=1, the pools alone: static/nodes/nodes.js fetches them every
    few seconds, so states, heartbeat ages and readings stay current on an open page."""
    context = {"pools": node_overview(user=request.user), "node_timeout": fmt_duration(settings.TRAINYARD_NODE_TIMEOUT_S),
               "server_zone": settings.TIME_ZONE}
    if request.GET.get("partial"):
        return revalidated(request, render(request, "nodes/_pools.html", context))
    return render(request, "nodes/node_list.html", context)
