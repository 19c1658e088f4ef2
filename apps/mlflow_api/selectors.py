"""Reads for the MLflow API: experiments (projects) and runs in MLflow's shapes, scoped to the user's teams.

An experiment is a project: its id is the project's id, its name the slug ``team/project``.
Another team's experiment or run reads exactly like one that does not exist.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from django.db.models import Exists, OuterRef, QuerySet

from apps.core.text import is_id
from apps.mlflow_api.errors import does_not_exist, invalid
from apps.mlflow_api.models import DatasetInput, DeletedRun, SupersededPoint
from apps.runs.models import Run, RunStatus
from apps.runs.selectors import run_list
from apps.tenants.models import Project
from apps.tenants.selectors import AnyUser, project_by_ref, project_list
from apps.tracking.downsample import NAN_S, NEG_INF_S, POS_INF_S
from apps.tracking.models import Flag, MetricPoint, MetricSummary
from apps.tracking.selectors import metric_summaries

# Trainyard status -> MLflow RunStatus name.
MLFLOW_STATUS = {
    RunStatus.QUEUED: "SCHEDULED", RunStatus.SCHEDULED: "SCHEDULED", RunStatus.RUNNING: "RUNNING",
    RunStatus.PREEMPTED: "RUNNING", RunStatus.LOST: "RUNNING", RunStatus.SUCCEEDED: "FINISHED",
    RunStatus.FAILED: "FAILED", RunStatus.CANCELLED: "KILLED",
}
_FLAG_TEXT = {Flag.NAN.value: NAN_S, Flag.POS_INF.value: POS_INF_S, Flag.NEG_INF.value: NEG_INF_S}
HISTORY_PAGE_MAX = 25_000
SEARCH_PAGE_MAX = 1_000
# runs/search's run_view_type, as the client sends it (the enum's name) or as a number.
VIEW_TYPES = {"ACTIVE_ONLY": "ACTIVE_ONLY", "1": "ACTIVE_ONLY", "DELETED_ONLY": "DELETED_ONLY", "2": "DELETED_ONLY",
              "ALL": "ALL", "3": "ALL"}
_NAME_FILTER = re.compile(r"^\s*(?:attributes?\.)?name\s*=\s*'([^']*)'\s*$", re.IGNORECASE)


def ms(value: Any) -> int | None:
    return None if value is None else int(round(value.timestamp() * 1000))


def experiment_get(*, user: AnyUser, experiment_id: Any) -> Project:
    text = str(experiment_id if experiment_id is not None else "").strip()
    project = project_list(user=user).filter(pk=int(text)).first() if is_id(text) else None
    if project is None:
        raise does_not_exist(f"No experiment with id {text[:40]!r} in your teams (an experiment is a Trainyard project).")
    return project


def experiment_by_name(*, user: AnyUser, name: Any) -> Project:
    text = str(name if name is not None else "").strip()
    project = project_by_ref(user=user, ref=text) if text.count("/") == 1 else None
    if project is None:
        raise does_not_exist(f"No experiment named {text[:200]!r} in your teams: an experiment is a Trainyard "
                             "project, named team/project such as vision/digits.")
    return project


def experiments_search(*, user: AnyUser, filter_string: str = "") -> list[Project]:
    projects = project_list(user=user).order_by("team__slug", "slug")
    if not filter_string.strip():
        return list(projects)
    match = _NAME_FILTER.match(filter_string)
    if match is None:
        raise invalid("filter", "only \"name = '<team>/<project>'\" is supported here")
    return [p for p in projects if p.full_slug == match.group(1)]


def experiment_dict(project: Project) -> dict[str, Any]:
    created = ms(project.created_at)
    return {"experiment_id": str(project.pk), "name": project.full_slug, "artifact_location": f"mlflow-artifacts:/{project.pk}",
            "lifecycle_stage": "active", "creation_time": created, "last_update_time": created, "tags": []}


def _is_deleted() -> Exists:
    return Exists(DeletedRun.objects.filter(run_id=OuterRef("pk")))


def _with_stage(runs: QuerySet[Run]) -> QuerySet[Run]:
    """Runs annotated ``mlflow_deleted`` (deleted through runs/delete), read by run_info_dict."""
    return runs.annotate(mlflow_deleted=_is_deleted())


def run_get(*, user: AnyUser, run_id: Any) -> Run:
    text = str(run_id if run_id is not None else "").strip()
    run = _with_stage(run_list(user=user)).filter(pk=int(text)).first() if is_id(text) else None
    if run is None:
        raise does_not_exist(f"Run with id={text[:40]!r} not found")
    return run


def run_artifact_uri(run: Run) -> str:
    return f"mlflow-artifacts:/{run.project_id}/{run.pk}/artifacts"


def run_info_dict(run: Run) -> dict[str, Any]:
    user = run.submitted_by
    return {"run_id": str(run.pk), "run_uuid": str(run.pk), "run_name": run.name, "experiment_id": str(run.project_id),
            "user_id": user.get_username() if user is not None else "", "status": MLFLOW_STATUS.get(RunStatus(run.status), "RUNNING"),
            "start_time": ms(run.started_at or run.created_at), "end_time": ms(run.finished_at),
            "artifact_uri": run_artifact_uri(run), "lifecycle_stage": "deleted" if _deleted(run) else "active"}


def _deleted(run: Run) -> bool:
    flag = getattr(run, "mlflow_deleted", None)
    return bool(flag) if flag is not None else DeletedRun.objects.filter(run_id=run.pk).exists()


def metric_value(value: float | None, flag: int) -> float | str:
    return _FLAG_TEXT[flag] if flag in _FLAG_TEXT else float(value if value is not None else 0.0)


def _latest_metric(s: MetricSummary) -> dict[str, Any]:
    return {"key": s.key, "value": metric_value(s.last_value, s.last_flag), "timestamp": int(round(s.last_step_wall * 1000)),
            "step": s.last_step}


def runs_dicts(runs: Sequence[Run]) -> list[dict[str, Any]]:
    """Each run as MLflow's Run: info, data (latest metrics, params, tags), inputs (datasets)."""
    summaries = metric_summaries(run_ids=[r.pk for r in runs])
    inputs = dataset_inputs(run_ids=[r.pk for r in runs])
    return [{"info": run_info_dict(run), "inputs": {"dataset_inputs": inputs[run.pk]} if inputs.get(run.pk) else {}, "data": {
        "metrics": [_latest_metric(s) for s in summaries[run.pk].values()],
        "params": [{"key": str(k), "value": _text(v)} for k, v in sorted(run.params.items())],
        "tags": [{"key": str(k), "value": _text(v)} for k, v in sorted(run.tags.items())],
    }} for run in runs]


def dataset_inputs(*, run_ids: Sequence[int]) -> dict[int, list[dict[str, Any]]]:
    """Each run's dataset inputs (runs/log-inputs) in MLflow's DatasetInput shape, in the order logged."""
    out: dict[int, list[dict[str, Any]]] = {}
    for d in DatasetInput.objects.filter(run_id__in=run_ids).order_by("run_id", "pk"):
        dataset = {"name": d.name, "digest": d.digest, "source_type": d.source_type, "source": d.source}
        dataset.update({k: v for k, v in (("schema", d.schema), ("profile", d.profile)) if v is not None})
        out.setdefault(d.run_id, []).append({"tags": [{"key": k, "value": v} for k, v in d.tags], "dataset": dataset})
    return out


def _text(value: Any) -> str:
    return value if isinstance(value, str) else str(value)


def runs_search(*, user: AnyUser, experiment_ids: Sequence[Any], filter_string: str, max_results: int,
                offset: int, run_view_type: Any = None) -> tuple[list[Run], int | None]:
    """A page of the experiments' runs, newest first; deleted ones (runs/delete) only where
    ``run_view_type`` is DELETED_ONLY or ALL, as in MLflow."""
    if filter_string.strip():
        raise invalid("filter", "run filters are not supported here; search without one and filter the result")
    view = VIEW_TYPES.get(str(run_view_type if run_view_type not in (None, "") else "ACTIVE_ONLY").upper())
    if view is None:
        raise invalid("run_view_type", f"{str(run_view_type)[:40]!r} is not one of ACTIVE_ONLY, DELETED_ONLY, ALL")
    projects = [experiment_get(user=user, experiment_id=e) for e in experiment_ids]
    limit = min(max(1, max_results), SEARCH_PAGE_MAX)
    found = _with_stage(run_list(user=user).filter(project__in=projects))
    if view != "ALL":
        found = found.filter(_is_deleted() if view == "DELETED_ONLY" else ~_is_deleted())
    runs = list(found.select_related("submitted_by").order_by("-created_at", "-id")[offset:offset + limit + 1])
    more = len(runs) > limit
    return runs[:limit], offset + limit if more else None


def metric_history(*, run: Run, key: str, offset: int = 0, max_results: int | None = None) -> tuple[list[dict[str, Any]], int | None]:
    """Every value logged for `key`, by step, then timestamp, with the values a step holds besides
    its point (SupersededPoint): (points, next offset or None)."""
    limit = min(max_results or HISTORY_PAGE_MAX, HISTORY_PAGE_MAX)
    columns = ("step", "value", "flag", "wall_time")
    points_qs = MetricPoint.objects.filter(run_id=run.pk, key=key).values_list(*columns)
    if SupersededPoint.objects.filter(run_id=run.pk, key=key).exists():
        extra = SupersededPoint.objects.filter(run_id=run.pk, key=key).values_list(*columns)
        points_qs = points_qs.union(extra, all=True).order_by("step", "wall_time", "flag", "value")
    else:
        points_qs = points_qs.order_by("step")
    rows = list(points_qs[offset:offset + limit + 1])
    more = len(rows) > limit
    points = [{"key": key, "value": metric_value(value, flag), "timestamp": int(round(wall * 1000)), "step": step}
              for step, value, flag, wall in rows[:limit]]
    return points, offset + limit if more else None
