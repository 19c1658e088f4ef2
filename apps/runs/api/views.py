from __future__ import annotations

from typing import Any

from django.db.models import Q, QuerySet
from django.http import FileResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response

from apps.core.api.listing import LIST_BACKENDS, POLLING_LIST_BACKENDS
from apps.core.errors import FieldError, Forbidden, NotFound
from apps.core.storage import ObjectMissing
from apps.core.storage_views import no_store
from apps.core.text import is_id
from apps.jobtemplates.models import TemplateKind
from apps.jobtemplates.selectors import template_get
from apps.nodes.auth import AgentAPIView
from apps.runs.api.extras import RUN_LIST_EXTRAS
from apps.runs.api.serializers import (
    CodeSnapshotSerializer,
    CodeSnapshotUploadSerializer,
    RunCreateSerializer,
    RunDetailSerializer,
    RunPatchSerializer,
    RunSerializer,
    TrialsRequestSerializer,
    TrialsSerializer,
)
from apps.runs.models import CodeSnapshot, Run, RunStatus
from apps.runs.services.family import run_family_cancel, run_family_refresh
from apps.runs.services.lifecycle import run_cancel
from apps.runs.services.rerun import run_annotate, run_rerun
from apps.runs.services.snapshots import snapshot_create, snapshot_download_url, snapshot_open
from apps.runs.services.submission import TAG_KEY_RE, Submission, submission_from_data
from apps.runs.services.submit import run_submit
from apps.runs.services.sweep import sweep_trial_count
from apps.tenants.api.scoped import ScopedMixin
from apps.tenants.selectors import has_role, project_by_ref_or_error


def submission_from_request(request: Request) -> Submission:
    """A run submission's body, its shape checked (a 400 naming each bad field): for submitting
    and forecasting, which check its content."""
    body = RunCreateSerializer(data=request.data)
    body.is_valid(raise_exception=True)
    return submission_from_data(body.validated_data)


LIST_PARAMETERS = [
    OpenApiParameter("project", OpenApiTypes.STR, description="Project id or 'team/project'."),
    OpenApiParameter("status", OpenApiTypes.STR, description="One status or several, comma-separated."),
    OpenApiParameter("template", OpenApiTypes.STR, description="Template slug."),
    OpenApiParameter("tag", OpenApiTypes.STR, many=True, description="key:value; repeat to require several tags."),
    OpenApiParameter("family", OpenApiTypes.STR, description="Runs of one family (e.g. a sweep)."),
    OpenApiParameter("parent", OpenApiTypes.INT, description="Children of a sweep run."),
    OpenApiParameter("search", OpenApiTypes.STR, description="Matches the name, family or id."),
    OpenApiParameter("metrics", OpenApiTypes.STR, description=(
        "Metric keys, comma-separated (at most 10): each row gets `metrics_summary` with the last, "
        "min and max of each key (null for a key the run has not logged).")),
]


class RunViewSet(ScopedMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Runs of your teams' projects: submit, list, inspect, annotate, rerun, cancel."""

    team_path = "project__team"
    serializer_class = RunSerializer
    filter_backends = POLLING_LIST_BACKENDS
    ordering_fields = ["created_at", "updated_at", "queued_at", "started_at", "finished_at", "status", "priority", "name", "id"]
    ordering = ["-created_at", "-id"]

    def get_base_queryset(self) -> QuerySet[Run]:
        queryset = Run.objects.select_related("project__team", "template", "pool", "submitted_by", "init_checkpoint", "code_snapshot")
        if self.action == "retrieve":
            queryset = queryset.prefetch_related("attempts__assignments__node")
        return queryset

    def get_serializer_class(self) -> type[RunSerializer]:
        return RunDetailSerializer if self.action in ("retrieve", "cancel", "create", "rerun", "partial_update") else RunSerializer

    def filter_queryset(self, queryset: QuerySet[Any]) -> QuerySet[Any]:
        params = self.request.query_params
        if params.get("project"):
            queryset = queryset.filter(project=project_by_ref_or_error(user=self.request.user, ref=params["project"]))
        if params.get("status"):
            wanted = [s.strip() for s in params["status"].split(",") if s.strip()]
            bad = [s for s in wanted if s not in RunStatus.values]
            if bad:
                raise FieldError("status", f"unknown status {bad[0]!r} (allowed: {', '.join(RunStatus.values)})")
            queryset = queryset.filter(status__in=wanted)
        if params.get("template"):
            queryset = queryset.filter(template__slug=params["template"])
        for tag in params.getlist("tag"):
            key, sep, value = tag.partition(":")
            if not sep or not TAG_KEY_RE.match(key):
                raise FieldError("tag", f"must be key:value with a valid key (got {tag!r})")
            queryset = queryset.filter(**{f"tags__{key}": value})
        if params.get("family"):
            queryset = queryset.filter(family=params["family"])
        if params.get("parent"):
            if not is_id(params["parent"]):
                raise FieldError("parent", f"must be a run id (got {params['parent']!r})")
            queryset = queryset.filter(parent_id=int(params["parent"]))
        if params.get("search"):
            term = params["search"].strip()
            match = Q(name__icontains=term) | Q(family__icontains=term)
            if is_id(term):
                match |= Q(pk=int(term))
            queryset = queryset.filter(match)
        # ?ordering= and ?updated_after= (apps.core.api.listing)
        return super().filter_queryset(queryset)

    @extend_schema(parameters=LIST_PARAMETERS, responses={200: RunSerializer(many=True)})
    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        response = super().list(request, *args, **kwargs)
        rows = response.data["results"] if isinstance(response.data, dict) else response.data
        for extra in RUN_LIST_EXTRAS:
            extra(request.query_params, rows)
        return response

    @extend_schema(responses={200: RunDetailSerializer})
    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        run = self.get_object()
        if run.template.kind == TemplateKind.SWEEP and not run.is_finished:
            # Fallback roll-up for children finished by a conditional update (no save signal).
            run = run_family_refresh(parent=run)
            run = self.get_object()
        return Response(RunDetailSerializer(run).data)

    @extend_schema(request=RunCreateSerializer, responses={201: RunDetailSerializer})
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        run = run_submit(submission=submission_from_request(request), user=request.user)
        run = self.get_base_queryset().get(pk=run.pk)
        return Response(RunDetailSerializer(run).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=RunPatchSerializer, responses={200: RunDetailSerializer})
    def partial_update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Change the run's `notes` and `tags` (engineers of its team); audited old → new."""
        run = self.get_object()
        body = RunPatchSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        run_annotate(run=run, user=request.user, notes=body.validated_data.get("notes"), tags=body.validated_data.get("tags"))
        return Response(RunDetailSerializer(self.get_base_queryset().get(pk=run.pk)).data)

    @extend_schema(request=None, responses={201: RunDetailSerializer})
    @action(detail=True, methods=["post"])
    def rerun(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Submit the run again: its template version, params, tags, resources and priority, tagged
        `rerun_of=<id>`; checked and admitted (budget, quota) as any submission."""
        new = run_rerun(run=self.get_object(), user=request.user)
        return Response(RunDetailSerializer(self.get_base_queryset().get(pk=new.pk)).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=TrialsRequestSerializer, responses={200: TrialsSerializer})
    @action(detail=False, methods=["post"])
    def trials(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """How many runs a submission of `template` with `params` would queue: a sweep's trial
        count, as the submission counts it (the submit page multiplies a trial's cost by it), else 1.
        Nothing is written; a bad sweep, or a `project` not of your teams, is a 400 naming the field."""
        body = TrialsRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        if "project" in data:  # as a submission would: another team's project is answered as a missing one
            project_by_ref_or_error(user=request.user, ref=data["project"])
        try:
            template = template_get(user=request.user, slug=data["template"], version=data.get("template_version"))
        except NotFound as err:
            raise FieldError("template", f"no such template {data['template']!r}") from err
        if template.kind != TemplateKind.SWEEP:
            return Response({"trials": 1, "sweep": False})
        if not isinstance(data["params"], dict):
            raise FieldError("params", "must be an object")
        count = sweep_trial_count(schema=template.param_schema or {}, params=data["params"])
        return Response({"trials": count, "sweep": True})

    @extend_schema(request=None, responses={200: RunDetailSerializer})
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Cancel the run (a sweep cancels its children too). 409 if it already finished."""
        run = self.get_object()
        if not has_role(user=request.user, team_id=run.project.team_id, at_least="engineer"):
            raise Forbidden("Only engineers of the project's team may cancel runs.")
        if run.template.kind == TemplateKind.SWEEP:
            run_family_cancel(parent=run, user=request.user)
        else:
            run_cancel(run=run, user=request.user)
        return Response(RunDetailSerializer(self.get_base_queryset().get(pk=run.pk)).data)


class CodeSnapshotViewSet(ScopedMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Code snapshots (.tar.gz) for the custom template, content-addressed by sha256."""

    team_path = "project__team"
    serializer_class = CodeSnapshotSerializer
    queryset = CodeSnapshot.objects.select_related("project").order_by("-created_at")
    filter_backends = LIST_BACKENDS
    ordering_fields = ["created_at", "size", "id"]
    ordering = ["-created_at", "-id"]
    parser_classes = [MultiPartParser, FormParser]

    @extend_schema(request={"multipart/form-data": CodeSnapshotUploadSerializer}, responses={201: CodeSnapshotSerializer})
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        body = CodeSnapshotUploadSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        project = project_by_ref_or_error(user=request.user, ref=body.validated_data["project"])
        upload = body.validated_data["file"]
        snapshot = snapshot_create(project=project, user=request.user, fileobj=upload, size=upload.size,
                                   git_commit=body.validated_data["git_commit"])
        return Response(CodeSnapshotSerializer(snapshot).data, status=status.HTTP_201_CREATED)


class AgentSnapshotDownloadView(AgentAPIView):
    """The agent fetches a run's code snapshot: only for a run with an assignment on its node."""

    @extend_schema(responses={(200, "application/gzip"): OpenApiTypes.BINARY})
    def get(self, request: Request, sha256: str) -> FileResponse:
        snapshot = CodeSnapshot.objects.filter(sha256=sha256, runs__attempts__assignments__node=self.node).first()
        if snapshot is None:
            raise NotFound("no such snapshot for this node")
        try:
            body = snapshot_open(snapshot=snapshot)
        except ObjectMissing:
            raise NotFound("no such snapshot for this node") from None
        return FileResponse(body, content_type="application/gzip", as_attachment=True, filename=f"{snapshot.sha256}.tar.gz")


class AgentSnapshotLinkView(AgentAPIView):
    """Protocol 5: a URL to fetch the snapshot from the object store directly."""

    @extend_schema(responses=None)
    def get(self, request: Request, sha256: str) -> Response:
        snapshot = CodeSnapshot.objects.filter(sha256=sha256, runs__attempts__assignments__node=self.node).first()
        if snapshot is None:
            raise NotFound("no such snapshot for this node")
        return no_store(Response({"url": snapshot_download_url(snapshot=snapshot), "size": snapshot.size, "sha256": snapshot.sha256}))
