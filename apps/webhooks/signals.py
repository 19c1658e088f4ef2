"""Turns audited state changes into webhook events, so the run lifecycle, the node sweep and the
budget alerts emit webhooks without importing this app: every state change of theirs is audited
(audit_record), and this receiver runs inside the same transaction as the change. A budget
alert's notification (billing.signals.budget_alert_notified) goes to the team's endpoints.

The audit event's id is the webhook event's key: one happening, one event, however often the
receiver runs.
"""

from __future__ import annotations

from typing import Any

from apps.audit.models import AuditEvent
from apps.billing.models import Budget, BudgetAlert
from apps.nodes.models import Node
from apps.registry.models import ModelVersion
from apps.runs.models import ASSIGNMENT_HOLDS_DEVICES, Assignment, Run
from apps.tenants.models import Project
from apps.webhooks.models import EventType
from apps.webhooks.services import webhook_emit

RUN_ACTIONS = {"run.succeeded": EventType.RUN_SUCCEEDED, "run.failed": EventType.RUN_FAILED,
               "run.cancelled": EventType.RUN_CANCELLED}
MODEL_ACTIONS = {"model.promoted": EventType.MODEL_PROMOTED, "model.rolled_back": EventType.MODEL_ROLLED_BACK}


def run_payload(run: Run) -> dict[str, Any]:
    return {"run": {"id": run.pk, "name": run.name, "status": run.status, "status_reason": run.status_reason,
                    "reason_code": run.reason_code, "template": run.template.slug, "project": run.project.full_slug,
                    "tags": run.tags, "family": run.family, "steps_done": run.steps_done, "total_steps": run.total_steps,
                    "restarts": run.restarts, "started_at": run.started_at, "finished_at": run.finished_at,
                    "url": f"/runs/{run.pk}/"}}


def model_payload(version: ModelVersion, event: AuditEvent) -> dict[str, Any]:
    """The version now in production, who moved it there, and on what evidence (the audit record's figures)."""
    after = event.after or {}
    model = version.model
    return {"model": {"id": model.pk, "name": model.name, "project": model.project.full_slug, "url": f"/models/{model.pk}/"},
            "version": {"number": version.number, "stage": version.stage, "source_run": version.source_run_id,
                        "checkpoint": version.checkpoint_id},
            "previous_version": after.get("replaced", after.get("from_version")), "evidence_run": after.get("evidence_run"),
            "figures": after.get("figures"), "by": event.actor_label, "at": event.at}


def on_audit_event(sender: Any, instance: AuditEvent, created: bool, **kwargs: Any) -> None:
    if not created or kwargs.get("raw"):
        return
    action, key = instance.action, f"audit:{instance.pk}"
    if action in RUN_ACTIONS or action == "run.requeued":
        run = Run.objects.select_related("project__team", "template").filter(pk=instance.object_id).first()
        if run is None:
            return
        if action == "run.requeued":
            if run.reason_code != "preempted":
                return
            webhook_emit(project_id=run.project_id, event=EventType.RUN_PREEMPTED, payload=run_payload(run), key=key)
            return
        webhook_emit(project_id=run.project_id, event=RUN_ACTIONS[action], payload=run_payload(run), key=key)
    elif action in MODEL_ACTIONS:
        version = ModelVersion.objects.select_related("model__project__team").filter(pk=instance.object_id).first()
        if version is not None:
            webhook_emit(project_id=version.model.project_id, event=MODEL_ACTIONS[action], key=key,
                         payload=model_payload(version, instance))
    elif action == "node.lost":
        node = Node.objects.select_related("pool").filter(pk=instance.object_id).first()
        if node is None:
            return
        # Projects with work on the node now: their runs are about to be requeued.
        held = Assignment.objects.filter(node=node, state__in=ASSIGNMENT_HOLDS_DEVICES)
        runs: dict[int, list[int]] = {}
        for project_id, run_id in held.values_list("attempt__run__project_id", "attempt__run_id").order_by("attempt__run_id"):
            runs.setdefault(project_id, []).append(run_id)
        for project_id, run_ids in runs.items():
            webhook_emit(project_id=project_id, event=EventType.NODE_LOST, key=key,
                         payload={"node": {"id": node.pk, "hostname": node.hostname, "pool": node.pool.name}, "runs": run_ids})
    elif action == "budget.alert":
        budget = Budget.objects.filter(pk=instance.object_id).first()
        if budget is None:
            return
        after = instance.after or {}
        projects = [budget.project_id] if budget.project_id else list(
            Project.objects.filter(team_id=budget.team_id).values_list("pk", flat=True))
        payload = {"budget": {"id": budget.pk, "scope": "project" if budget.project_id else "team", "amount": str(budget.amount),
                              "action": budget.action},
                   "period": after.get("period"), "threshold": after.get("threshold"), "spent": after.get("spent")}
        for project_id in projects:
            webhook_emit(project_id=project_id, event=EventType.BUDGET_THRESHOLD, payload=payload, key=key)


def on_budget_alert_notified(sender: Any, alert: BudgetAlert, payload: dict[str, Any], **kwargs: Any) -> None:
    """billing's notification of an alert (the highest threshold one check crossed) to the team's
    team-wide endpoints; the alert's id as key makes a repeated notification a no-op."""
    webhook_emit(team_id=alert.budget.team_id, event=EventType.BUDGET_THRESHOLD, payload=payload,
                 key=f"budget-alert:{alert.pk}")
