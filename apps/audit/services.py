"""audit_record is the only writer of AuditEvent; services call it for every state change."""

from __future__ import annotations

from typing import Any

from django.db import models

from apps.audit.context import current
from apps.audit.models import AuditEvent


def audit_record(
    *,
    action: str,
    target: models.Model | None = None,
    object_type: str = "",
    object_id: str | int = "",
    team_id: int | None = None,
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
    actor: Any = None,
    actor_label: str = "",
) -> AuditEvent:
    ctx = current()
    user, label = _actor(actor, actor_label)
    if target is not None:
        object_type = object_type or target._meta.label_lower
        object_id = object_id or str(target.pk)
    return AuditEvent.objects.create(
        actor=user,
        actor_label=label[:200],
        action=action,
        object_type=object_type,
        object_id=str(object_id),
        object_repr=str(target)[:300] if target is not None else "",
        team_id=team_id,
        before=before,
        after=after,
        ip=ctx.ip,
    )


def snapshot(obj: models.Model, fields: list[str]) -> dict[str, Any]:
    """A JSON-safe copy of the named fields, for an event's before/after."""
    out: dict[str, Any] = {}
    for name in fields:
        value = getattr(obj, name)
        if isinstance(value, models.Model):
            value = value.pk
        elif value is not None and not isinstance(value, (str, int, float, bool, list, dict)):
            value = str(value)
        out[name] = value
    return out


def _actor(actor: Any, actor_label: str) -> tuple[Any, str]:
    """The user (None unless signed in) and the label an event records, for a caller that may
    name either; the audit context (request or `acting_as`) fills what it does not."""
    ctx = current()
    user = actor if actor is not None else ctx.user
    if user is not None and not getattr(user, "is_authenticated", False):
        user = None
    if actor_label:
        return user, actor_label
    if actor is not None and user is not None:
        # A caller that names the user (a service called with `user=`) wins over the context,
        # whose label outside a request is "system".
        return user, user.get_username()
    return user, ctx.label or (user.get_username() if user is not None else "system")


def audit_record_many(*, records: list[dict[str, Any]]) -> list[AuditEvent]:
    """Several events at once (one INSERT), for passes that change many objects: each record has
    audit_record's keyword arguments, and its actor is resolved the same way (`_actor`)."""
    ctx = current()
    events: list[AuditEvent] = []
    for rec in records:
        user, label = _actor(rec.get("actor"), rec.get("actor_label") or "")
        target = rec.get("target")
        object_type, object_id = rec.get("object_type", ""), rec.get("object_id", "")
        if target is not None:
            object_type = object_type or target._meta.label_lower
            object_id = object_id or str(target.pk)
        events.append(AuditEvent(actor=user, actor_label=label[:200], action=rec["action"], object_type=object_type,
                                 object_id=str(object_id), object_repr=str(target)[:300] if target is not None else "",
                                 team_id=rec.get("team_id"), before=rec.get("before"), after=rec.get("after"), ip=ctx.ip))
    return AuditEvent.objects.bulk_create(events, batch_size=500)
