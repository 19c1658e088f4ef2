from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render

from apps.tenants.models import Project
from apps.tenants.selectors import has_role, project_list
from apps.webhooks.selectors import delivery_list, endpoint_list, webhook_summary, webhooks_visible


@login_required
def delivery_log_page(request: HttpRequest, pk: int) -> HttpResponse:
    """A project's webhook endpoints and every delivery attempt's outcome, newest first."""
    project = get_object_or_404(project_list(user=request.user), pk=pk)
    page = Paginator(delivery_list(project=project), 50).get_page(request.GET.get("page"))
    return render(request, "webhooks/delivery_log.html", {
        "project": project, "endpoints": endpoint_list(project=project), "page": page,
        "is_admin": has_role(user=request.user, team_id=project.team_id, at_least="admin"),
    })


def project_webhooks_panel(request: HttpRequest, project: Project) -> dict[str, Any] | None:
    """The webhooks card on the project page (registered in PROJECT_PANELS): the only way to the delivery log."""
    if not webhooks_visible(user=request.user, project=project):
        return None
    return {"template": "webhooks/_webhooks_panel.html", "data": {"project": project, **webhook_summary(project=project)}}
