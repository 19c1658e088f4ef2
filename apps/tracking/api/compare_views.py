"""Saved comparisons over the API: save the comparison page's state under a name, list, open, delete."""

from __future__ import annotations

from typing import Any

from django.http import Http404
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import generics, serializers
from rest_framework.request import Request
from rest_framework.response import Response

from apps.core.errors import FieldError
from apps.core.text import is_id
from apps.tenants.api.scoped import ScopedMixin
from apps.tenants.selectors import project_list
from apps.tracking.compare_selectors import saved_comparison_list
from apps.tracking.compare_services import X_AXES, ComparisonSettings, saved_comparison_create, saved_comparison_delete
from apps.tracking.models import SavedComparison


class SavedComparisonSerializer(serializers.Serializer[Any]):
    """What saved_comparison_dict answers, for the OpenAPI schema."""

    id = serializers.IntegerField()
    name = serializers.CharField()
    project = serializers.IntegerField(help_text="The project's id.")
    project_slug = serializers.CharField(help_text="'team/project'.")
    runs = serializers.ListField(child=serializers.IntegerField(), help_text="Run ids in the comparison's order.")
    keys = serializers.ListField(child=serializers.CharField(), help_text="Chosen metric keys; empty for the page's default.")
    metric = serializers.CharField(allow_blank=True, help_text="The parallel coordinates' final metric; empty for the default.")
    only_differences = serializers.BooleanField(allow_null=True, help_text="Null: the page's default (on above two runs).")
    x = serializers.ChoiceField(choices=list(X_AXES), help_text="The charts' x axis.")
    created_by = serializers.CharField(allow_null=True, help_text="Username of who saved it; null once that user is gone.")
    created_at = serializers.DateTimeField()
    url = serializers.CharField(help_text="The comparison page's path, to share.")


class SavedComparisonListSerializer(serializers.Serializer[Any]):
    results = SavedComparisonSerializer(many=True, help_text="By name.")


class SavedComparisonCreateSerializer(serializers.Serializer[Any]):
    """The body of a save, for the OpenAPI schema; _settings and the service check it."""

    name = serializers.CharField(help_text="Unique in the project.")
    runs = serializers.ListField(child=serializers.IntegerField(), help_text="Run ids to compare (or a comma-separated string).")
    keys = serializers.ListField(child=serializers.CharField(), required=False,
                                 help_text="Metric keys (or a comma-separated string); empty for the page's default.")
    metric = serializers.CharField(required=False, allow_blank=True, help_text="The parallel coordinates' final metric.")
    only_differences = serializers.BooleanField(required=False, allow_null=True, help_text="Null: the page's default.")
    x = serializers.ChoiceField(choices=list(X_AXES), required=False, help_text="The charts' x axis (default step).")
    project = serializers.IntegerField(required=False, allow_null=True, help_text="Default: the first run's project.")


def saved_comparison_dict(saved: SavedComparison) -> dict[str, Any]:
    return {
        "id": saved.pk, "name": saved.name, "project": saved.project_id, "project_slug": saved.project.full_slug,
        "runs": saved.run_ids, "keys": saved.keys, "metric": saved.metric,
        "only_differences": saved.only_differences, "x": saved.x_axis,
        "created_by": saved.created_by.get_username() if saved.created_by else None,
        "created_at": saved.created_at.isoformat(), "url": f"/compare/v/{saved.pk}/",
    }


def _id_list(value: Any, field: str) -> list[int]:
    """Ids as a JSON list or a comma-separated string."""
    parts = value.split(",") if isinstance(value, str) else value
    if not isinstance(parts, list):
        raise FieldError(field, "must be a list of run ids or comma-separated run ids")
    ids = []
    for part in parts:
        text = str(part).strip() if not isinstance(part, bool) else ""
        if not is_id(text):
            raise FieldError(field, f"{str(part)[:40]!r} is not a run id")
        ids.append(int(text))
    return ids


def _key_list(value: Any) -> list[str]:
    if value in (None, ""):
        return []
    parts = value.split(",") if isinstance(value, str) else value
    if not isinstance(parts, list) or not all(isinstance(p, str) for p in parts):
        raise FieldError("keys", "must be a list of metric keys or comma-separated keys")
    return [p.strip() for p in parts if p.strip()]


def _settings(data: Any) -> ComparisonSettings:
    if not isinstance(data, dict):
        raise FieldError("body", "must be a JSON object with name and runs")
    if "runs" not in data:
        raise FieldError("runs", "required: the run ids to compare")
    metric = data.get("metric") or ""
    if not isinstance(metric, str):
        raise FieldError("metric", "must be a metric key")
    only = data.get("only_differences")
    if only is not None and not isinstance(only, bool):
        raise FieldError("only_differences", "must be true, false or null (the page's default)")
    x_axis = data.get("x") or "step"
    if not isinstance(x_axis, str):
        raise FieldError("x", "must be step or time")
    return ComparisonSettings(run_ids=tuple(_id_list(data["runs"], "runs")), keys=tuple(_key_list(data.get("keys"))),
                              metric=metric, only_differences=only, x_axis=x_axis)


class _SavedScoped(ScopedMixin, generics.GenericAPIView):
    queryset = SavedComparison.objects.select_related("project__team", "created_by")
    team_path = "project__team"


class SavedComparisonListView(_SavedScoped):
    @extend_schema(operation_id="compare_views_list", parameters=[OpenApiParameter("project", int, description="Only this project's.")],
                   responses={200: SavedComparisonListSerializer}, description="Saved comparisons of your teams' projects, by name.")
    def get(self, request: Request) -> Response:
        qs = saved_comparison_list(user=request.user)
        project = request.query_params.get("project", "")
        if project:
            if not is_id(project):
                raise FieldError("project", "must be a project id")
            qs = qs.filter(project_id=int(project))
        return Response({"results": [saved_comparison_dict(s) for s in qs]})

    @extend_schema(operation_id="compare_views_create", request=SavedComparisonCreateSerializer,
                   responses={201: SavedComparisonSerializer}, description="Save a comparison of runs under a name.")
    def post(self, request: Request) -> Response:
        data: Any = request.data
        settings = _settings(data)
        project = None
        if data.get("project") not in (None, ""):
            if not is_id(str(data["project"])):
                raise FieldError("project", "must be a project id")
            project = project_list(user=request.user).filter(pk=int(data["project"])).first()
            if project is None:
                raise Http404
        saved = saved_comparison_create(user=request.user, name=data.get("name"), settings=settings, project=project)
        return Response(saved_comparison_dict(saved), status=201)


class SavedComparisonDetailView(_SavedScoped):
    @extend_schema(operation_id="compare_views_retrieve", responses={200: SavedComparisonSerializer})
    def get(self, request: Request, pk: int) -> Response:
        return Response(saved_comparison_dict(self.get_object()))

    @extend_schema(responses={204: None})
    def delete(self, request: Request, pk: int) -> Response:
        saved_comparison_delete(user=request.user, saved=self.get_object())
        return Response(status=204)
