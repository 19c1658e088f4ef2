"""Tracking API: metric ingestion for agents, and scoped reads for users."""

from __future__ import annotations

from typing import Any

from django.http import FileResponse, Http404, StreamingHttpResponse
from django.http.response import HttpResponseBase
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import generics
from rest_framework.request import Request
from rest_framework.response import Response

from apps.billing.costmodel import money
from apps.core.api.listing import ordering_apply, ordering_parameter
from apps.core.errors import FieldError
from apps.core.storage import ObjectMissing, store
from apps.core.storage_views import store_redirect
from apps.nodes.auth import AgentAPIView
from apps.runs.models import Attempt, Checkpoint, Run
from apps.runs.selectors import attempt_for_node_report
from apps.runs.services.checkpoints import checkpoint_download_url, checkpoint_open
from apps.tenants.api.scoped import ScopedMixin
from apps.tracking import environment_selectors, log_selectors, selectors, startup_selectors
from apps.tracking.api.serializers import (
    CheckpointPageSerializer,
    CompareResponseSerializer,
    EnergyResponseSerializer,
    LogPageSerializer,
    MetricIngestResponseSerializer,
    MetricKeysResponseSerializer,
    MetricSeriesResponseSerializer,
    RunEnvironmentSerializer,
    RunHistorySerializer,
)
from apps.tracking.environment_services import attempt_environment_record, environment_report_parse
from apps.tracking.history import run_history
from apps.tracking.services import MAX_BODY_BYTES, PayloadTooLarge, metric_batch_ingest, metric_batch_parse


def _int_param(request: Request, name: str, default: int, lo: int, hi: int) -> int:
    raw = request.query_params.get(name)
    if raw in (None, ""):
        return default
    try:
        value = int(raw)
    except ValueError:
        raise FieldError(name, "must be an integer") from None
    if not lo <= value <= hi:
        raise FieldError(name, f"must be between {lo} and {hi}")
    return value


def _float_param(request: Request, name: str) -> float | None:
    raw = request.query_params.get(name)
    if raw in (None, ""):
        return None
    try:
        value = float(raw)
    except ValueError:
        raise FieldError(name, "must be a number") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise FieldError(name, "must be a finite number")
    return value


def _series_query(request: Request) -> selectors.SeriesQuery:
    x = request.query_params.get("x", "step")
    if x not in ("step", "time"):
        raise FieldError("x", "must be 'step' or 'time'")
    return selectors.SeriesQuery(
        max_points=_int_param(request, "max_points", selectors.DEFAULT_MAX_POINTS, 1, selectors.MAX_MAX_POINTS),
        x=x, start=_float_param(request, "start"), end=_float_param(request, "end"),
    )


def _key_list(request: Request, name: str) -> list[str]:
    raw = ",".join(request.query_params.getlist(name))
    keys = [k.strip() for k in raw.split(",") if k.strip()]
    if len(keys) > selectors.COMPARE_MAX_KEYS:
        raise FieldError(name, f"{len(keys)} keys; the limit is {selectors.COMPARE_MAX_KEYS}")
    return list(dict.fromkeys(keys))


class MetricIngestView(AgentAPIView):
    """POST /api/v1/agent/metrics/: one batch of points for the attempt the node runs."""

    parser_classes: list[Any] = []  # the body is read and bounded here, never by DRF's parsers

    @extend_schema(
        request=OpenApiTypes.OBJECT,
        responses={200: MetricIngestResponseSerializer},
        description=(
            'Body {"attempt_id", "attempt", "points": [[key, step, value, wall_time], ...]} with at most 10,000 points and '
            '4 MB. Values are numbers or "NaN"/"Infinity"/"-Infinity". 409 means the attempt is stale or the run finished: '
            "stop sending. Any other 4xx rejects the whole batch; nothing of it is stored."
        ),
        tags=["agent"],
    )
    def post(self, request: Request) -> Response:
        declared = request.META.get("CONTENT_LENGTH") or ""
        if declared.isascii() and declared.isdecimal() and int(declared) > MAX_BODY_BYTES:
            raise PayloadTooLarge(f"body of {declared} bytes is larger than the limit of {MAX_BODY_BYTES} bytes")
        # Read past the limit by one byte, from the raw stream: Django's own body size check
        # would answer a bigger body with a 400 that does not say what the limit is.
        body = request._request.read(MAX_BODY_BYTES + 1)
        batch = metric_batch_parse(body=body)
        accepted = metric_batch_ingest(node_id=self.node.pk, batch=batch)
        return Response({"accepted": accepted})


# 5,000 packages of 200 characters and a 100,000-character environment, as JSON, with room.
MAX_LINEAGE_BODY_BYTES = 2 * 1024 * 1024


class LineageReportView(AgentAPIView):
    """POST /api/v1/agent/lineage/: the environment a node ran its rank of an attempt in, stored once."""

    @extend_schema(
        request=OpenApiTypes.OBJECT,
        responses={200: OpenApiTypes.OBJECT, 201: OpenApiTypes.OBJECT},
        description=(
            'Body {"attempt_id", "number", "node_rank", "environment": {...} (at most 100,000 characters as JSON), '
            '"packages": ["name==version", ...] (at most 5,000 of 200 characters), "packages_sha256"}. 201 stores it; the same '
            "report again is 200. A different report for an attempt and rank that has one is 409 lineage_immutable, and a stale "
            "attempt or finished run 409 as for every agent report."
        ),
        tags=["agent"],
    )
    def post(self, request: Request) -> Response:
        declared = request.META.get("CONTENT_LENGTH") or ""
        if declared.isascii() and declared.isdecimal() and int(declared) > MAX_LINEAGE_BODY_BYTES:
            raise PayloadTooLarge(f"body of {declared} bytes is larger than the limit of {MAX_LINEAGE_BODY_BYTES} bytes")
        data = request.data
        if not isinstance(data, dict):
            raise FieldError("body", "a JSON object")
        attempt_id, number = data.get("attempt_id"), data.get("number")
        if isinstance(attempt_id, bool) or not isinstance(attempt_id, int) or attempt_id < 1:
            raise FieldError("attempt_id", "a positive integer")
        if isinstance(number, bool) or not isinstance(number, int) or not 1 <= number <= 1_000_000:
            raise FieldError("number", "an integer from 1 to 1000000")
        report = environment_report_parse(data=data)
        attempt = attempt_for_node_report(node_id=self.node.pk, attempt_id=attempt_id, number=number, allow_finished=True)
        record, created = attempt_environment_record(attempt=attempt, node_id=self.node.pk, hostname=self.node.hostname,
                                                     report=report)
        return Response({"stored": created, "id": record.pk}, status=201 if created else 200)


class _RunScoped(ScopedMixin, generics.GenericAPIView):
    queryset = Run.objects.select_related("project__team", "template", "pool")
    team_path = "project__team"


_SERIES_PARAMS = [
    OpenApiParameter("max_points", int, description="At most this many buckets per series (1-5000, default 500)."),
    OpenApiParameter("x", str, enum=["step", "time"], description="x axis: step (default) or wall time (Unix seconds)."),
    OpenApiParameter("start", float, description="Lowest x to include."),
    OpenApiParameter("end", float, description="Highest x to include."),
]


class RunMetricsView(_RunScoped):
    @extend_schema(
        parameters=[OpenApiParameter("key", str, required=True, description="Metric key; several comma-separated."), *_SERIES_PARAMS],
        responses={200: MetricSeriesResponseSerializer},
        description="Downsampled series: per bucket x, mean, min and max; true_min/true_max are the series' exact extremes.",
    )
    def get(self, request: Request, pk: int) -> Response:
        run = self.get_object()
        keys = _key_list(request, "key")
        if not keys:
            raise FieldError("key", "required: the metric key (see metrics/keys/)")
        series = selectors.metric_series_for_runs(run_ids=[run.pk], keys=keys, q=_series_query(request))
        return Response({"run": run.pk, "series": series})


class RunMetricKeysView(_RunScoped):
    @extend_schema(responses={200: MetricKeysResponseSerializer}, description="Per-key summaries (count, first, last, min, max, last step) "
                   "and the run's status and progress, for live pages.")
    def get(self, request: Request, pk: int) -> Response:
        run = self.get_object()
        summaries = selectors.metric_summaries(run_ids=[run.pk])[run.pk]
        cost = selectors.run_cost(run=run)
        return Response({
            "run": {"id": run.pk, "status": run.status, "status_reason": run.status_reason, "is_finished": run.is_finished,
                    "progress": selectors.run_progress(run=run), "cost": str(cost), "cost_text": money(cost),
                    "queue": selectors.queue_standing(run=run), "starting": startup_selectors.run_starting(run=run)},
            "keys": [selectors.summary_dict(s) for s in summaries.values()],
        })


CHECKPOINT_ORDERING = ["step", "created_at", "size", "id"]


class RunCheckpointsView(_RunScoped):
    @extend_schema(
        parameters=[ordering_parameter(CHECKPOINT_ORDERING, "step"),
                    OpenApiParameter("page", int, description="A page number within the paginated result set."),
                    OpenApiParameter("page_size", int, description="Number of results to return per page (at most 500).")],
        responses={200: CheckpointPageSerializer},
        description="The run's checkpoints (removed ones too, marked), a page at a time.",
    )
    def get(self, request: Request, pk: int) -> Response:
        run = self.get_object()
        queryset = ordering_apply(Checkpoint.objects.filter(run=run).select_related("attempt"), request,
                                  fields=CHECKPOINT_ORDERING, default=["step", "id"])
        page = self.paginate_queryset(queryset)
        assert page is not None  # the project's pagination is always on
        rows = selectors.checkpoint_rows(run=run, checkpoints=page, best_id=selectors.checkpoint_best_id(run=run))
        response = self.get_paginated_response(rows)
        response.data["checkpoints"] = rows  # the pre-pagination key, for older clients and the run page
        return response


class CheckpointDownloadView(ScopedMixin, generics.GenericAPIView):
    queryset = Checkpoint.objects.all()
    team_path = "run__project__team"

    @extend_schema(responses={(200, "application/octet-stream"): OpenApiTypes.BINARY})
    def get(self, request: Request, run_pk: int, pk: int) -> HttpResponseBase:
        ckpt = self.get_object()
        if ckpt.run_id != run_pk or not ckpt.stored_path or ckpt.deleted_at is not None:
            raise Http404
        name = ckpt.file_name or ckpt.stored_path.rsplit("/", 1)[-1]
        if store().direct:
            # S3: the browser fetches it from the store; no web worker carries the bytes.
            return store_redirect(checkpoint_download_url(checkpoint=ckpt, filename=name))
        try:
            body = checkpoint_open(checkpoint=ckpt)  # the local store never leaves MEDIA_ROOT
        except ObjectMissing:
            raise Http404 from None
        # Named, not guessed: mimetypes takes ".pt" for "application/vnd.snesdev-page-table".
        return FileResponse(body, as_attachment=True, filename=name, content_type="application/octet-stream")


class RunLogsView(_RunScoped):
    @extend_schema(
        parameters=[OpenApiParameter("after", int, description="Cursor: the last chunk id seen (0 to start)."),
                    OpenApiParameter("limit", int, description="Chunks per page, 1-1000 (default 200; with q, chunks searched, "
                                                                "1-5000, default 2000)."),
                    OpenApiParameter("q", str, description=f"Only the lines holding this text (case-insensitive, at most "
                                                           f"{log_selectors.LOG_QUERY_MAX_CHARS} characters); each chunk then "
                                                           "holds its matching lines.")],
        responses={200: LogPageSerializer},
        description="Log chunks in the order they arrived, after a cursor: follow with after=next while more is true.",
    )
    def get(self, request: Request, pk: int) -> Response:
        run = self.get_object()
        after = _int_param(request, "after", 0, 0, 2**62)
        q = log_selectors.log_query_clean(request.query_params.get("q"))
        if q:
            limit = _int_param(request, "limit", log_selectors.LOG_SEARCH_CHUNKS, 1, 5000)
            return Response(log_selectors.log_search(run=run, q=q, after=after, limit=limit))
        limit = _int_param(request, "limit", 200, 1, 1000)
        return Response(selectors.log_chunks(run=run, after=after, limit=limit))


class RunLogDownloadView(_RunScoped):
    @extend_schema(responses={(200, "text/plain"): OpenApiTypes.STR},
                   description="The run's whole log as a text/plain attachment, streamed in the order it arrived.")
    def get(self, request: Request, pk: int) -> HttpResponseBase:
        run = self.get_object()
        response = StreamingHttpResponse(log_selectors.log_text(run=run), content_type="text/plain; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="run-{run.pk}-log.txt"'
        return response


class RunHistoryView(_RunScoped):
    @extend_schema(responses={200: RunHistorySerializer},
                   description="The run's history (its and its attempts' audit events, in words) and its attempts, for live pages.")
    def get(self, request: Request, pk: int) -> Response:
        run = self.get_object()
        attempts = list(Attempt.objects.filter(run=run).prefetch_related("assignments__node").order_by("number"))
        events, older = run_history(run=run, attempts=attempts)
        return Response({
            "events": [{"at": e.at, "actor": e.actor, "what": e.what, "detail": e.detail} for e in events],
            "older": older,
            "attempts": selectors.attempt_timeline(run=run, attempts=attempts),
        })


class RunEnergyView(_RunScoped):
    @extend_schema(responses={200: EnergyResponseSerializer}, description="Energy samples per device and the cumulative total.")
    def get(self, request: Request, pk: int) -> Response:
        return Response(selectors.energy_series(run=self.get_object()))


class RunEnvironmentView(_RunScoped):
    @extend_schema(responses={200: RunEnvironmentSerializer},
                   description="The environment each attempt ran in, per node, as its agent captured it (immutable), and the "
                               "lineage the job itself reported through the SDK, apart.")
    def get(self, request: Request, pk: int) -> Response:
        run = self.get_object()
        latest = Attempt.objects.filter(run=run).order_by("-number").first()
        return Response({"run": run.pk, "environments": environment_selectors.run_environments(run=run),
                         "reported": latest.lineage if latest else {}})


class CompareView(ScopedMixin, generics.GenericAPIView):
    queryset = Run.objects.select_related("project__team", "template", "pool", "init_checkpoint", "code_snapshot")
    team_path = "project__team"

    @extend_schema(
        parameters=[OpenApiParameter("runs", str, required=True, description="2-50 comma-separated run ids."),
                    OpenApiParameter("keys", str, description="Metric keys (default: all, up to 20)."), *_SERIES_PARAMS],
        responses={200: CompareResponseSerializer},
        description="Params, lineage and summaries side by side with a diff, and downsampled series per run and key.",
    )
    def get(self, request: Request) -> Response:
        raw = ",".join(request.query_params.getlist("runs"))
        try:
            ids = list(dict.fromkeys(int(part) for part in raw.split(",") if part.strip()))
        except ValueError:
            raise FieldError("runs", "must be comma-separated run ids") from None
        if not selectors.COMPARE_MIN_RUNS <= len(ids) <= selectors.COMPARE_MAX_RUNS:
            raise FieldError("runs", f"{len(ids)} runs; compare takes {selectors.COMPARE_MIN_RUNS} to {selectors.COMPARE_MAX_RUNS}")
        found = {r.pk: r for r in self.get_queryset().filter(pk__in=ids)}
        if len(found) != len(ids):
            raise Http404
        q = _series_query(request)
        if "max_points" not in request.query_params:
            q = selectors.SeriesQuery(max_points=200, x=q.x, start=q.start, end=q.end)
        data = selectors.run_compare(runs=[found[i] for i in ids], keys=_key_list(request, "keys") or None, q=q)
        return Response(data)
