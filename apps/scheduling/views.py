"""The Queue page: every pool's line, why each run waits, when it should start, who is ahead."""

from __future__ import annotations

from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from apps.nodes.closed import open_pools
from apps.scheduling.selectors import queue_fold, queue_list, scheduler_status

# A pool with thousands waiting would be a page nobody reads, fetched again every few seconds:
# past this many rows only the runs the viewer submitted are listed, and ?all=1 lists every one.
QUEUE_PAGE_ROWS = 50


@login_required
def queue_page(request: HttpRequest) -> HttpResponse:
    pool = request.GET.get("pool") or None
    if pool is not None and not open_pools().filter(name=pool).exists():
        pool = None  # an unknown pool in the address shows every pool rather than an error page
    show_all = request.GET.get("all") == "1"
    pools = queue_fold(pools=queue_list(user=request.user, pool=pool), head=None if show_all else QUEUE_PAGE_ROWS,
                       user=request.user)
    # The page refreshes itself by fetching just the pools' part every few seconds, as it was asked for.
    src = {"partial": "1", **({"pool": pool} if pool else {}), **({"all": "1"} if show_all else {})}
    context = {"pools": pools, "scheduler": scheduler_status(), "pool": pool, "show_all": show_all,
               "page_rows": QUEUE_PAGE_ROWS, "partial_src": "/queue/?" + urlencode(src),
               "pool_names": list(open_pools().values_list("name", flat=True))}
    template = "scheduling/_pools.html" if request.GET.get("partial") == "1" else "scheduling/queue.html"
    return render(request, template, context)
