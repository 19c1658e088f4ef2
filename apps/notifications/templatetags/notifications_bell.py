"""The bell in the page header (templates/base.html): the unread count drawn by the server, so the
badge is right before the page's script polls it."""

from __future__ import annotations

from typing import Any

from django import template

from apps.notifications.selectors import notification_unread_count

register = template.Library()


def bell_label(unread: int) -> str:
    return f"Notifications, {unread} unread" if unread else "Notifications, none unread"


@register.inclusion_tag("notifications/_bell.html", takes_context=True)
def notification_bell(context: dict[str, Any]) -> dict[str, Any]:
    user = context.get("user")
    unread = notification_unread_count(user=user) if user is not None else 0
    return {"unread": unread, "badge": "99+" if unread > 99 else str(unread), "label": bell_label(unread)}
