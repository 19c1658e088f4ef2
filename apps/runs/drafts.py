"""What the run page's notes-and-tags form held when a save was refused, kept in the session
across the redirect back to the run page: the typed text is in the boxes again, beside the error."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest

SESSION_KEY = "runs.annotate_draft"


def annotate_draft_keep(request: HttpRequest, *, run_id: int, notes: str, tags: str, errors: list[str]) -> None:
    request.session[SESSION_KEY] = {"run": run_id, "notes": notes, "tags": tags, "errors": errors}


def annotate_draft_take(request: HttpRequest, *, run_id: int) -> dict[str, Any] | None:
    """The refused form of this run, once (a reload shows the saved notes again); None if none."""
    draft = request.session.get(SESSION_KEY)
    if not isinstance(draft, dict) or draft.get("run") != run_id:
        return None
    del request.session[SESSION_KEY]
    return draft
