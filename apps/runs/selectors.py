"""Reads over runs and attempts, including the fencing check every agent report goes through."""

from __future__ import annotations

from django.db.models import QuerySet

from apps.core.errors import Conflict, NotFound
from apps.runs.models import FINISHED_STATUSES, Attempt, Run
from apps.tenants.selectors import AnyUser, team_ids_for_user


def run_list(*, user: AnyUser) -> QuerySet[Run]:
    return Run.objects.filter(project__team_id__in=team_ids_for_user(user=user)).select_related("project__team", "template", "pool")


def attempt_for_node_report(*, node_id: int, attempt_id: int, number: int | None = None, allow_finished: bool = False) -> Attempt:
    """The attempt an agent reports for, if it may still report for it.

    Unknown attempts, and attempts with no assignment on this node, are 404 (another node's run
    is not this agent's business). A stale attempt (the run has moved on to a newer attempt, or
    the number does not match) is 409, which tells the agent to kill it: that is the fence.
    """
    attempt = Attempt.objects.select_related("run").filter(pk=attempt_id, assignments__node_id=node_id).first()
    if attempt is None:
        raise NotFound(f"attempt {attempt_id} is not assigned to this node")
    if number is not None and attempt.number != number:
        raise Conflict(f"attempt {attempt_id} is number {attempt.number}, not {number}", code="stale_attempt")
    latest = Attempt.objects.filter(run_id=attempt.run_id).order_by("-number").values_list("number", flat=True).first()
    if latest != attempt.number:
        raise Conflict(f"attempt {attempt.number} of run {attempt.run_id} was superseded by attempt {latest}", code="stale_attempt")
    if not allow_finished and attempt.run.status in FINISHED_STATUSES:
        raise Conflict(f"run {attempt.run_id} is already {attempt.run.status}", code="run_finished")
    return attempt
