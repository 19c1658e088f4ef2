"""What the run page's header offers the viewer: rerun, clone, notes and tags are for engineers
of the run's team (those who may submit to its project)."""

from __future__ import annotations

from typing import Any

from django import template

from apps.runs.forms import tags_text
from apps.tenants.selectors import has_role

register = template.Library()


@register.simple_tag
def may_submit(user: Any, run: Any) -> bool:
    return bool(has_role(user=user, team_id=run.project.team_id, at_least="engineer"))


@register.filter
def editable_tags(tags: Any) -> str:
    """The run's tags as the header's form edits them (owner is not the user's to change)."""
    return tags_text(dict(tags or {}), skip=("owner",))
