"""An attempt's per-node share (Assignment) as the node's agent takes it up."""

from __future__ import annotations

from django.utils import timezone

from apps.audit.context import acting_as
from apps.audit.services import audit_record
from apps.runs.models import Assignment, AssignmentState


def assignment_claim(*, assignment: Assignment, hostname: str) -> bool:
    """Pending -> claimed, once (a conditional update: a concurrent claim gets False); audited."""
    claimed = Assignment.objects.filter(pk=assignment.pk, state=AssignmentState.PENDING).update(
        state=AssignmentState.CLAIMED, claimed_at=timezone.now())
    if claimed:
        with acting_as(label=f"agent:{hostname}"):
            audit_record(action="assignment.claimed", target=assignment.attempt, team_id=None,
                         after={"node": hostname, "rank": assignment.node_rank})
    return bool(claimed)
