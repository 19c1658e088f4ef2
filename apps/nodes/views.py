from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from apps.nodes.selectors import node_overview


@login_required
def node_list_page(request: HttpRequest) -> HttpResponse:
    return render(request, "nodes/node_list.html", {"pools": node_overview(user=request.user)})
