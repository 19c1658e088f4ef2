"""GET /api/v1/queue/: every pool's line, in order, with reasons and estimated starts.
POST /api/v1/queue/forecast/: where a run would stand, and when it would start, if submitted now."""

from __future__ import annotations

from typing import Any

from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import permissions
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.throttling import UserRateThrottle
from rest_framework.views import APIView

from apps.core.errors import FieldError
from apps.nodes.closed import pool_closed_reason
from apps.nodes.models import NodePool
from apps.runs.api.serializers import RunCreateSerializer
from apps.runs.api.views import submission_from_request
from apps.scheduling.api.serializers import ForecastSerializer, QueueSerializer
from apps.scheduling.forecast import Forecast, forecast_for_submission
from apps.scheduling.selectors import NO_ESTIMATE, queue_list, scheduler_status
from apps.tenants.api.scoped import UnscopedAPIMixin

POOL_MAX = 63


def queue_payload(*, user: Any, pool: str | None) -> dict[str, Any]:
    if pool is not None:
        if not pool or len(pool) > POOL_MAX:
            raise FieldError("pool", f"a pool name of 1 to {POOL_MAX} characters")
        if not NodePool.objects.filter(name=pool).exists():
            raise FieldError("pool", f"no pool named {pool!r}")
        if pool_closed_reason(name=pool):
            raise FieldError("pool", f"{pool_closed_reason(name=pool)}: no run waits in it")
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


def forecast_payload(forecast: Forecast) -> dict[str, Any]:
    data = {
        "pool": forecast.pool, "starts_now": forecast.starts_now, "position": forecast.position, "ahead": forecast.ahead,
        "reason": {"code": forecast.reason_code, "label": forecast.reason, "message": forecast.message},
        "predicted_runtime_s": forecast.predicted_runtime_s, "runtime_basis": forecast.runtime_basis,
        "estimated_start": {"at": forecast.start, "low": forecast.start_low, "high": forecast.start_high,
                            "none_because": NO_ESTIMATE.get(forecast.reason_code)},
        "summary": forecast.summary, "refused": forecast.refused, "pool_reason": forecast.pool_reason,
    }
    return dict(ForecastSerializer(data).data)


class ForecastThrottle(UserRateThrottle):
    scope = "forecast"


class ForecastView(UnscopedAPIMixin, APIView):
    """A dry run of a submission: nothing is queued, charged or recorded."""

    permission_classes = [permissions.IsAuthenticated]
    throttle_classes = [ForecastThrottle]

    @extend_schema(
        summary="Forecast a submission: would it start at once, and if not, when?",
        description=("Takes the body you would POST to /api/v1/runs/ and answers "
                     "where the run would stand in its pool's line right now, why it would wait, and its estimated "
                     "start with a range, from the same scheduler and estimator the queue uses. Nothing is queued. "
                     "Bad fields get 400 naming the field, as a submission would. A body with `tags` (a dry run) is "
                     "checked as the submission would be, but for the code snapshot (not uploaded yet); without, only "
                     "what decides the place in line, so a form can ask while it is half filled."),
        request=RunCreateSerializer,
        responses={200: ForecastSerializer},
    )
    def post(self, request: Request) -> Response:
        # Sent with tags (as `trainyard submit --dry-run` does), the rest is checked as a submission would be.
        forecast = forecast_for_submission(user=request.user, submission=submission_from_request(request))
        return Response(forecast_payload(forecast))
