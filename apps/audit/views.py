from __future__ import annotations

from django.contrib.admin.views.decorators import staff_member_required
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from apps.audit.models import AuditEvent


@staff_member_required
def audit_page(request: HttpRequest) -> HttpResponse:
    qs = AuditEvent.objects.all()
    for field in ("action", "object_type"):
        if request.GET.get(field):
            qs = qs.filter(**{f"{field}__startswith": request.GET[field]})
    if request.GET.get("actor"):
        qs = qs.filter(actor_label=request.GET["actor"])
    page = Paginator(qs, 100).get_page(request.GET.get("page"))
    return render(request, "audit/event_list.html", {"page_obj": page})
