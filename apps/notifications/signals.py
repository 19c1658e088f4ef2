"""Turns audited happenings into notifications, as the webhooks app turns them into events: a
post_save receiver on AuditEvent (connected in NotificationsConfig.ready) inside the same
transaction as the change, so a rolled-back change tells no one. Budget alerts come from billing's
budget_alert_notified instead: one per check naming the highest threshold crossed, where the audit
log has a row per threshold.

Who hears: a run's submitter of its own runs, the team's admins and finance of its budgets, the
team's members of its models; never a user outside the team.
"""

from __future__ import annotations

from typing import Any

from apps.audit.models import AuditEvent
from apps.billing.models import BudgetAlert
from apps.billing.services import alert_message
from apps.nodes.models import Node
from apps.notifications.models import NotificationKind
from apps.notifications.selectors import budget_alert_user_ids, team_user_ids
from apps.notifications.services import Message, notifications_create
from apps.registry.models import ModelVersion
from apps.runs.models import ASSIGNMENT_HOLDS_DEVICES, Assignment, Run
from apps.tenants.models import Membership, Role

RUN_ACTIONS = {
    "run.succeeded": (NotificationKind.RUN_SUCCEEDED, "succeeded"),
    "run.failed": (NotificationKind.RUN_FAILED, "failed"),
    "run.cancelled": (NotificationKind.RUN_CANCELLED, "was cancelled"),
    "run.preempted": (NotificationKind.RUN_PREEMPTED, "was preempted"),
    "run.lost": (NotificationKind.RUN_LOST, "lost its node"),
}
MODEL_ACTIONS = {"model.promoted": NotificationKind.MODEL_PROMOTED, "model.rolled_back": NotificationKind.MODEL_ROLLED_BACK}
AFTERWORD = {
    NotificationKind.RUN_PREEMPTED: "It is back in the queue and resumes from its latest checkpoint.",
    NotificationKind.RUN_LOST: "It is requeued and resumes from its latest checkpoint, unless it ran out of restarts.",
}


def _sentence(text: str) -> str:
    text = text.strip()
    return "" if not text else text[:1].upper() + text[1:] + ("" if text.endswith((".", "!", "?")) else ".")


def _run_label(run: Run) -> str:
    return f"Run #{run.pk}" + (f" {run.name}" if run.name else "")


def _on_run(event: AuditEvent) -> None:
    run = Run.objects.select_related("project__team", "template").filter(pk=event.object_id).first()
    if run is None or run.submitted_by_id is None:
        return
    action = event.action
    if action == "run.requeued":
        if run.reason_code != "preempted":
            return  # a requeue after a lost node or an abort: run.lost or nothing told
        action = "run.preempted"
    kind, verb = RUN_ACTIONS[action]
    reason = str((event.after or {}).get("reason") or run.status_reason or "")
    parts = [f"{run.template.slug} in {run.project.full_slug}.", _sentence(reason), AFTERWORD.get(kind, "")]
    body = " ".join(p for p in parts if p)
    team_id = run.project.team_id
    notifications_create(user_ids=team_user_ids(team_id=team_id, among=[run.submitted_by_id]), message=Message(
        kind=kind, title=f"{_run_label(run)} {verb}", body=body, url=f"/runs/{run.pk}/", key=f"audit:{event.pk}",
        team_id=team_id))


def _on_node_lost(event: AuditEvent) -> None:
    """Each submitter of a run on the node hears once, of their own runs there."""
    node = Node.objects.filter(pk=event.object_id).first()
    if node is None:
        return
    held = (Assignment.objects.filter(node=node, state__in=ASSIGNMENT_HOLDS_DEVICES)
            .values_list("attempt__run_id", "attempt__run__submitted_by_id", "attempt__run__project__team_id")
            .order_by("attempt__run_id").distinct())
    runs: dict[tuple[int, int], list[int]] = {}
    for run_id, user_id, team_id in held:
        if user_id is not None:
            runs.setdefault((team_id, user_id), []).append(run_id)
    for (team_id, user_id), run_ids in sorted(runs.items()):
        listed = ", ".join(f"#{pk}" for pk in run_ids)
        notifications_create(user_ids=team_user_ids(team_id=team_id, among=[user_id]), message=Message(
            kind=NotificationKind.NODE_LOST, title=f"Node {node.hostname} lost",
            body=f"It went silent while running your run{'s' if len(run_ids) > 1 else ''} {listed}; they are requeued.",
            url=f"/runs/{run_ids[0]}/" if len(run_ids) == 1 else "/runs/", key=f"audit:{event.pk}", team_id=team_id))


def _on_model(event: AuditEvent) -> None:
    """The model's team hears of a new production version: who acted, what it replaced, on what evidence."""
    version = ModelVersion.objects.select_related("model__project__team").filter(pk=event.object_id).first()
    if version is None:
        return
    model, after = version.model, event.after or {}
    kind = MODEL_ACTIONS[event.action]
    who = event.actor.get_username() if event.actor is not None else (event.actor_label or "someone")
    if kind == NotificationKind.MODEL_PROMOTED:
        title = f"Model {model.name} v{version.number} promoted to production"
        replaced = after.get("replaced")
        parts = [f"{who} promoted it in {model.project.full_slug}", f"it replaces v{replaced}" if replaced else "",
                 f"evidence: run #{after['evidence_run']}" if after.get("evidence_run") else ""]
    else:
        title = f"Model {model.name} rolled back to v{version.number}"
        parts = [f"{who} rolled back {model.project.full_slug}",
                 f"v{after['from_version']} is archived" if after.get("from_version") else ""]
    team_id = model.project.team_id
    notifications_create(user_ids=team_user_ids(team_id=team_id), message=Message(
        kind=kind, title=title, body="; ".join(p for p in parts if p) + ".", url=f"/models/{model.pk}/",
        key=f"audit:{event.pk}", team_id=team_id))


def on_audit_event(sender: Any, instance: AuditEvent, created: bool, **kwargs: Any) -> None:
    if not created or kwargs.get("raw"):
        return
    if instance.action in RUN_ACTIONS or instance.action == "run.requeued":
        _on_run(instance)
    elif instance.action == "node.lost":
        _on_node_lost(instance)
    elif instance.action in MODEL_ACTIONS:
        _on_model(instance)


def on_budget_alert_notified(sender: Any, alert: BudgetAlert, payload: dict[str, Any], **kwargs: Any) -> None:
    """The team's admins (to the budgets page) and finance (to the finance page); the alert's id as
    key makes a repeated notification a no-op."""
    team_id = alert.budget.team_id
    subject, body = alert_message(alert=alert)
    title = subject.removeprefix("[Trainyard] ")
    admins = set(Membership.objects.filter(team_id=team_id, role=Role.ADMIN).values_list("user_id", flat=True))
    everyone = budget_alert_user_ids(team_id=team_id)
    audiences = (([pk for pk in everyone if pk in admins], "/budgets/"), ([pk for pk in everyone if pk not in admins], "/finance/"))
    for user_ids, url in audiences:
        notifications_create(user_ids=user_ids, message=Message(
            kind=NotificationKind.BUDGET_ALERT, title=title, body=body.strip(), url=url, key=f"budget-alert:{alert.pk}",
            team_id=team_id))
