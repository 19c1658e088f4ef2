"""GET /api/v1/queue/: every pool's line, in order, with reasons and estimated starts."""

from __future__ import annotations

from typing import Any

from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import permissions
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.core.api.scoped import UnscopedAPIMixin
from apps.core.errors import FieldError
from apps.nodes.models import NodePool
from apps.scheduling.api.serializers import QueueSerializer
from apps.scheduling.selectors import queue_list, scheduler_status

POOL_MAX = 63


def queue_payload(*, user: Any, pool: str | None) -> dict[str, Any]:
    if pool is not None:
        if not pool or len(pool) > POOL_MAX:
            raise FieldError("pool", f"a pool name of 1 to {POOL_MAX} characters")
        if not NodePool.objects.filter(name=pool).exists():
            raise FieldError("pool", f"no pool named {pool!r}")
    data = {"generated_at": timezone.now(), "scheduler": scheduler_status(), "pools": queue_list(user=user, pool=pool)}
    return dict(QueueSerializer(data).data)


class QueueView(UnscopedAPIMixin, APIView):
    """Pools are shared by all teams, so every signed-in user sees every line; details of a run
    (id, name, project, full reason) appear only for the user's own teams' runs."""

    permission_classes = [permissions.IsAuthenticated]

    @extend_schema(
        summary="The queue: waiting runs per pool, in order",
        description=("Queued runs of each pool in scheduling order with position, class, size, predicted runtime, "
                     "why each waits (code and plain words) and its estimated start with a range. Other teams' runs "
                     "show only team, class, size and predicted runtime. Also: the pool's rules in plain words, how "
                     "accurate estimates were over the last 7 days, and utilization/fragmentation history."),
        parameters=[OpenApiParameter("pool", OpenApiTypes.STR, description="Only this pool (by name).")],
        responses={200: QueueSerializer},
    )
    def get(self, request: Request) -> Response:
        return Response(queue_payload(user=request.user, pool=request.query_params.get("pool")))
