"""The agent's side of artifacts (protocol: agents.protocol ArtifactReport / ArtifactComplete):
a plan to put a job's file in the store, then the confirmation that records it."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from agents import protocol
from apps.artifacts.services import artifact_upload_complete, artifact_upload_plan
from apps.audit.context import acting_as
from apps.core.errors import FieldError
from apps.core.storage_views import no_store
from apps.nodes.auth import AgentAPIView
from apps.runs.models import Attempt
from apps.runs.selectors import attempt_for_node_report


def _body(request: Request) -> dict[str, Any]:
    if not isinstance(request.data, dict):
        raise FieldError("body", "a JSON object")
    return request.data


def _int(data: dict[str, Any], field: str, *, minimum: int = 0, maximum: int = 2**62) -> int:
    value = data.get(field)
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        raise FieldError(field, f"an integer from {minimum} to {maximum}")
    return value


def _str(data: dict[str, Any], field: str, limit: int) -> str:
    value = data.get(field, "")
    if not isinstance(value, str) or len(value) > limit:
        raise FieldError(field, f"a string of at most {limit} characters")
    return value


def _attempt(view: AgentAPIView, data: dict[str, Any]) -> Attempt:
    # Finished runs too: a job's last artifacts are shipped after it exits.
    return attempt_for_node_report(node_id=view.node.pk, attempt_id=_int(data, "attempt_id", minimum=1),
                                   number=_int(data, "number", minimum=1, maximum=1_000_000), allow_finished=True)


class AgentArtifactView(AgentAPIView):
    @extend_schema(request=None, responses=None)
    def post(self, request: Request) -> Response:
        data = _body(request)
        attempt = _attempt(self, data)
        plan, token = artifact_upload_plan(run=attempt.run, name=_str(data, "name", 1000), size=_int(data, "size"),
                                           sha256=_str(data, "sha256", 64))
        answer: protocol.ArtifactPlan = {"upload": plan.message(), "token": token}
        return no_store(Response(answer))


class AgentArtifactCompleteView(AgentAPIView):
    @extend_schema(request=None, responses=None)
    def post(self, request: Request) -> Response:
        data = _body(request)
        attempt = _attempt(self, data)
        parts: list[tuple[int, str]] = []
        raw_parts = data.get("parts")
        if not isinstance(raw_parts, list) or len(raw_parts) > 10_000:
            raise FieldError("parts", "a list of at most 10000 {number, etag}")
        for part in raw_parts:
            etag = part.get("etag") if isinstance(part, dict) else None
            if not isinstance(etag, str) or len(etag) > 200:
                raise FieldError("parts", "a list of {number, etag} as the store answered each part")
            parts.append((_int(part, "number", minimum=1, maximum=10_000), etag))
        with acting_as(label=f"agent:{self.node.hostname}"):
            artifact = artifact_upload_complete(run=attempt.run, token=_str(data, "token", 4000), parts=parts)
        return Response({"stored": True, "name": artifact.name, "sha256": artifact.sha256, "size": artifact.size})
