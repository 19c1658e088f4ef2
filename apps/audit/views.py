from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from apps.audit.models import AuditEvent


@login_required
def audit_page(request: HttpRequest) -> HttpResponse:
    # The portal's own login and a plain refusal: the admin's staff login would ask a signed-in
    # engineer to sign in again and then say nothing useful.
    if not request.user.is_staff:
        raise PermissionDenied("The audit log is for staff. A run's history of state changes is on the run's own page.")
    qs = AuditEvent.objects.all()
    for field in ("action", "object_type"):
        if request.GET.get(field):
            qs = qs.filter(**{f"{field}__startswith": request.GET[field]})
    if request.GET.get("actor"):
        qs = qs.filter(actor_label=request.GET["actor"])
    page = Paginator(qs, 100).get_page(request.GET.get("page"))
    return render(request, "audit/event_list.html", {"page_obj": page})
