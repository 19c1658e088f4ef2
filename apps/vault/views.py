"""The project's secrets page (/projects/<id>/secrets/) and its card on the project page.

Members see names and dates; team admins set (write-only field) and delete. The value never
comes back into a page: not in a re-rendered form after an error, not in a message.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404, render
from django.views.decorators.http import require_POST

from apps.core.errors import ServiceError
from apps.tenants.models import Project
from apps.tenants.selectors import project_list
from apps.vault import selectors, services


def _project(request: HttpRequest, pk: int) -> Project:
    return get_object_or_404(project_list(user=request.user), pk=pk)


@login_required
def secrets_page(request: HttpRequest, project_id: int) -> HttpResponse:
    project = _project(request, project_id)
    return render(request, "vault/secrets.html", {
        "project": project,
        "secrets": list(selectors.secret_list(project=project)),
        "can_edit": selectors.secrets_can_edit(user=request.user, project=project),
        "min_chars": services.MIN_VALUE_CHARS,
        "max_chars": services.MAX_VALUE_CHARS,
        # Shown next to the field and as its title, which browsers add to "Please match the requested format."
        "name_rule": services.NAME_RULE,
        "reserved_prefixes": ", ".join(services.RESERVED_PREFIXES),
    })


@login_required
@require_POST
def secret_set_page(request: HttpRequest, project_id: int) -> HttpResponse:
    project = _project(request, project_id)
    name = request.POST.get("name", "").strip()
    try:
        _, created = services.secret_set(project=project, name=name, value=request.POST.get("value", ""), user=request.user)
    except ServiceError as err:
        messages.error(request, err.message)
    else:
        messages.success(request, f"Secret {name} {'created' if created else 'replaced'}.")
    return HttpResponseRedirect(f"/projects/{project.pk}/secrets/")


@login_required
@require_POST
def secret_delete_page(request: HttpRequest, project_id: int, name: str) -> HttpResponse:
    project = _project(request, project_id)
    try:
        services.secret_delete(project=project, name=name, user=request.user)
    except ServiceError as err:
        messages.error(request, err.message)
    else:
        messages.success(request, f"Secret {name} deleted.")
    return HttpResponseRedirect(f"/projects/{project.pk}/secrets/")


def project_secrets_panel(request: HttpRequest, project: Project) -> dict[str, Any] | None:
    """The secrets card on the project page (registered in PROJECT_PANELS)."""
    names = list(selectors.secret_list(project=project).values_list("name", flat=True))
    can_edit = selectors.secrets_can_edit(user=request.user, project=project)
    return {"template": "vault/_secrets_panel.html", "data": {"project": project, "names": names, "can_edit": can_edit}}
