from __future__ import annotations

import json
from typing import Any

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
    rows = [(event, change_lines(event.before, event.after)) for event in page]
    return render(request, "audit/event_list.html", {"page_obj": page, "rows": rows})


def _word(value: Any) -> str:
    # JSON, not Python's repr: false/null, as the API and the CLI write them.
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)


def change_lines(before: Any, after: Any) -> list[str]:
    """A change as people read it: one "field: old → new" line per field that changed (or was set)."""
    if isinstance(before, dict) or isinstance(after, dict):
        before, after = before or {}, after or {}
    if not isinstance(before, dict) or not isinstance(after, dict):
        parts = [_word(v) for v in (before, after) if v not in (None, "", {})]
        return [" → ".join(parts)] if parts else []
    lines = []
    for key in sorted(set(before) | set(after)):
        old, new = before.get(key), after.get(key)
        if key not in after:
            lines.append(f"{key}: {_word(old)} → (removed)")
        elif key not in before:
            lines.append(f"{key}: {_word(new)}")
        elif old != new:
            lines.append(f"{key}: {_word(old)} → {_word(new)}")
    return lines
