"""The Queue page: every pool's line, why each run waits, when it should start, who is ahead."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from apps.nodes.models import NodePool
from apps.scheduling.selectors import queue_list, scheduler_status


@login_required
def queue_page(request: HttpRequest) -> HttpResponse:
    pool = request.GET.get("pool") or None
    if pool is not None and not NodePool.objects.filter(name=pool).exists():
        pool = None  # an unknown pool in the address shows every pool rather than an error page
    context = {"pools": queue_list(user=request.user, pool=pool), "scheduler": scheduler_status(), "pool": pool,
               "pool_names": list(NodePool.objects.order_by("name").values_list("name", flat=True))}
    # The page refreshes itself by fetching just the pools' part every few seconds.
    template = "scheduling/_pools.html" if request.GET.get("partial") == "1" else "scheduling/queue.html"
    return render(request, template, context)
