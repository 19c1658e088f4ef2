from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from apps.notifications import selectors, services


@login_required
def notifications_page(request: HttpRequest) -> HttpResponse:
    """All of the user's notifications, newest first (`?unread=1`: unread only)."""
    unread = request.GET.get("unread") == "1"
    page = Paginator(selectors.notification_list(user=request.user, unread=unread), 50).get_page(request.GET.get("page"))
    return render(request, "notifications/list.html", {
        "page_obj": page, "unread_only": unread, "unread_count": selectors.notification_unread_count(user=request.user),
    })


@login_required
@require_POST
def notification_read(request: HttpRequest, pk: int) -> HttpResponse:
    """Mark one read and follow it (its link), or come back to the list."""
    notification = get_object_or_404(selectors.notification_list(user=request.user), pk=pk)
    services.notification_mark_read(notification=notification)
    target = notification.url if request.POST.get("follow") == "1" else "/notifications/"
    if not url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}):
        target = "/notifications/"
    return redirect(target or "/notifications/")


@login_required
@require_POST
def notifications_read_all(request: HttpRequest) -> HttpResponse:
    services.notifications_mark_all_read(user=request.user)
    return redirect("/notifications/")
