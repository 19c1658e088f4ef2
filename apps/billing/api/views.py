"""Budget of a project (scoped to its team's members) and the finance API (finance role and
admins only: everyone's spend, budgets, quotas and the ledger)."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.http import HttpResponseBase
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import generics, mixins, permissions, status, viewsets
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.billing import selectors, services
from apps.billing.api.serializers import (
    BudgetSerializer,
    BudgetWriteSerializer,
    ProjectBudgetSerializer,
    QuotaSerializer,
    QuotaWriteSerializer,
)
from apps.billing.models import Budget, Quota, UsageEntry
from apps.billing.views import FILTER_KEYS, ledger_csv_response
from apps.core.api.listing import POLLING_LIST_BACKENDS
from apps.core.errors import FieldError, ServiceError
from apps.nodes.models import NodePool
from apps.tenants.api.scoped import ScopedMixin, UnscopedAPIMixin
from apps.tenants.models import Project, Team
from apps.tenants.selectors import user_is_finance

FILTER_PARAMS = [
    OpenApiParameter("period", str, description="YYYY-MM (default: this month for spend, all for the ledger) or 'all'"),
    OpenApiParameter("team", str, description="team slug"),
    OpenApiParameter("project", str, description="project id or team/project"),
    OpenApiParameter("pool", str, description="pool name"),
    OpenApiParameter("template", str, description="template slug"),
    OpenApiParameter("run", int),
    OpenApiParameter("kind", str, description="accrual, close or correction"),
    OpenApiParameter("since", str, description="ISO date-time, inclusive"),
    OpenApiParameter("until", str, description="ISO date-time, exclusive"),
]


class ProjectBudgetView(ScopedMixin, generics.GenericAPIView):
    """This period's spend, reservations, forecast and burn-down against the project's budget."""

    team_path = "team"
    queryset = Project.objects.select_related("team")
    lookup_url_kwarg = "project_id"
    serializer_class = None

    @extend_schema(responses={200: ProjectBudgetSerializer})
    def get(self, request: Request, project_id: int) -> Response:
        project = self.get_object()
        data = selectors.project_budget_status(project=project).as_dict()
        return Response({"project": {"id": project.pk, "full_slug": project.full_slug}, **data})


class IsFinance(permissions.BasePermission):
    message = "Only the finance role and admins may use the finance API."

    def has_permission(self, request: Request, view: Any) -> bool:
        return bool(request.user and request.user.is_authenticated and user_is_finance(user=request.user))


def _filters(request: Request, default_period: str) -> QuerySet[UsageEntry]:
    params = {k: str(request.query_params.get(k, "")).strip() for k in FILTER_KEYS}
    params["period"] = params["period"] or default_period
    entries, errors = selectors.ledger_filter(params=params)
    if errors:
        raise ServiceError("; ".join(f"{f}: {' '.join(m)}" for f, m in errors.items()), fields=errors)
    return entries


class FinanceSpendView(UnscopedAPIMixin, APIView):
    """Spend totals and a daily series grouped by team, project, pool or template."""

    permission_classes = [permissions.IsAuthenticated, IsFinance]

    @extend_schema(
        parameters=[OpenApiParameter("group_by", str, enum=list(selectors.GROUPS), description="default team"), *FILTER_PARAMS],
        responses={200: OpenApiTypes.OBJECT},
    )
    def get(self, request: Request) -> Response:
        group_by = request.query_params.get("group_by", "team")
        if group_by not in selectors.GROUPS:
            raise FieldError("group_by", f"one of {', '.join(selectors.GROUPS)}")
        period = selectors.period_for(at=timezone.now()).key
        entries = _filters(request, period)
        return Response({"period": request.query_params.get("period") or period, **selectors.spend_by(entries=entries, group_by=group_by)})


class FinanceLedgerCsvView(UnscopedAPIMixin, APIView):
    """The ledger as CSV, for any filter (default: everything)."""

    permission_classes = [permissions.IsAuthenticated, IsFinance]

    @extend_schema(parameters=FILTER_PARAMS, responses={(200, "text/csv"): OpenApiTypes.STR})
    def get(self, request: Request) -> HttpResponseBase:
        return ledger_csv_response(_filters(request, "all"))


class FinanceBudgetViewSet(UnscopedAPIMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Every budget (finance only). PATCH changes amount, thresholds or action (audited)."""

    permission_classes = [permissions.IsAuthenticated, IsFinance]
    serializer_class = BudgetSerializer
    queryset = Budget.objects.select_related("team", "project", "project__team").order_by("pk")
    filter_backends = POLLING_LIST_BACKENDS
    ordering_fields = {"team": "team__slug", "amount": "amount", "created_at": "created_at", "updated_at": "updated_at", "id": "id"}
    ordering = ["id"]

    @extend_schema(request=BudgetWriteSerializer, responses={201: BudgetSerializer})
    def create(self, request: Request) -> Response:
        data = BudgetWriteSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        project = None
        if values.get("project") is not None:
            project = Project.objects.select_related("team").filter(pk=values["project"]).first()
            if project is None:
                raise FieldError("project", "no such project")
            team = project.team
        else:
            found = Team.objects.filter(slug=values.get("team", "")).first()
            if found is None:
                raise FieldError("team", "give a team slug or a project id")
            team = found
        if "amount" not in values:
            raise FieldError("amount", "this field is required")
        budget = services.budget_create(team=team, project=project, amount=values["amount"], thresholds=values.get("thresholds"),
                                        action=values.get("action", "block_new"))
        return Response(BudgetSerializer(budget).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=BudgetWriteSerializer, responses={200: BudgetSerializer})
    def partial_update(self, request: Request, pk: str | None = None) -> Response:
        budget = self.get_object()
        data = BudgetWriteSerializer(data=request.data, partial=True)
        data.is_valid(raise_exception=True)
        changes = {k: v for k, v in data.validated_data.items() if k in ("amount", "thresholds", "action")}
        for key in ("team", "project"):
            if key in data.validated_data:
                raise FieldError(key, "cannot be changed; create another budget")
        budget = services.budget_update(budget=budget, **changes)
        return Response(BudgetSerializer(budget).data)


class FinanceQuotaViewSet(UnscopedAPIMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Device quotas per team and pool (finance only); the scheduler reads them."""

    permission_classes = [permissions.IsAuthenticated, IsFinance]
    serializer_class = QuotaSerializer
    queryset = Quota.objects.select_related("team", "pool").order_by("pk")
    filter_backends = POLLING_LIST_BACKENDS
    ordering_fields = {"team": "team__slug", "pool": "pool__name", "guaranteed_devices": "guaranteed_devices",
                       "updated_at": "updated_at", "id": "id"}
    ordering = ["id"]

    @extend_schema(request=QuotaWriteSerializer, responses={201: QuotaSerializer})
    def create(self, request: Request) -> Response:
        data = QuotaWriteSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        team = Team.objects.filter(slug=values.get("team", "")).first()
        if team is None:
            raise FieldError("team", "no such team")
        pool = NodePool.objects.filter(name=values.get("pool", "")).first()
        if pool is None:
            raise FieldError("pool", "no such pool")
        # Refuses a second quota for the same team and pool (PATCH that one instead), as budgets do.
        quota = services.quota_create(team=team, pool=pool, guaranteed_devices=values.get("guaranteed_devices", 0),
                                      borrow_limit=values.get("borrow_limit", 0))
        return Response(QuotaSerializer(quota).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=QuotaWriteSerializer, responses={200: QuotaSerializer})
    def partial_update(self, request: Request, pk: str | None = None) -> Response:
        quota = self.get_object()
        data = QuotaWriteSerializer(data=request.data, partial=True)
        data.is_valid(raise_exception=True)
        for key in ("team", "pool"):
            if key in data.validated_data:
                raise FieldError(key, "cannot be changed; create another quota")
        quota = services.quota_update(quota=quota, **data.validated_data)
        return Response(QuotaSerializer(quota).data)
