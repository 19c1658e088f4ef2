"""MLflow's tracking REST endpoints (``/api/2.0/mlflow/...``) as its official client calls them.

Authentication is the user's Trainyard API token, sent by the client as ``Authorization: Bearer
<MLFLOW_TRACKING_TOKEN>`` (``Token <key>`` works too); sessions are not accepted, so no CSRF.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from django.contrib.auth.models import User
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from apps.accounts.services import api_token_user
from apps.core.errors import ServiceError
from apps.mlflow_api import selectors, services
from apps.mlflow_api.errors import MlflowError, from_service_error, invalid

Handler = Callable[[User, dict[str, Any]], dict[str, Any]]
_KEYWORDS = (b"bearer", b"token")


def request_user(request: HttpRequest) -> User:
    header = request.headers.get("Authorization", "").encode("latin-1", "replace").split()
    if len(header) != 2 or header[0].lower() not in _KEYWORDS:
        raise MlflowError("UNAUTHENTICATED", "Send your Trainyard API token: set MLFLOW_TRACKING_TOKEN "
                          "(the client sends 'Authorization: Bearer <token>').")
    user = api_token_user(key=header[1].decode("latin-1"))
    if user is None:
        raise MlflowError("UNAUTHENTICATED", "Invalid or revoked token.")
    return user


def _data(request: HttpRequest) -> dict[str, Any]:
    if request.method == "GET":
        return {k: (v if len(v) > 1 else v[0]) for k, v in request.GET.lists()}
    if not request.body:
        return {}
    try:
        data = json.loads(request.body)
    except (ValueError, UnicodeDecodeError):
        raise MlflowError("MALFORMED_REQUEST", "The body is not valid JSON.") from None
    if not isinstance(data, dict):
        raise MlflowError("MALFORMED_REQUEST", "The body must be a JSON object.")
    return data


def _run_id(data: dict[str, Any]) -> Any:
    return data.get("run_id") or data.get("run_uuid")


def _offset(token: Any) -> int:
    text = str(token or "0")
    if not text.isdigit():
        raise invalid("page_token", "not a token this server gave")
    return int(text)


def _max_results(data: dict[str, Any], default: int) -> int:
    value = data.get("max_results")
    if value in (None, ""):
        return default
    try:
        return int(value)
    except (TypeError, ValueError):
        raise invalid("max_results", "must be an integer") from None


# --- experiments -----------------------------------------------------------------------------

def experiment_get_by_name(user: User, data: dict[str, Any]) -> dict[str, Any]:
    return {"experiment": selectors.experiment_dict(selectors.experiment_by_name(user=user, name=data.get("experiment_name")))}


def experiment_get(user: User, data: dict[str, Any]) -> dict[str, Any]:
    return {"experiment": selectors.experiment_dict(selectors.experiment_get(user=user, experiment_id=data.get("experiment_id")))}


def experiment_create(user: User, data: dict[str, Any]) -> dict[str, Any]:
    return {"experiment_id": str(services.experiment_create(user=user, name=data.get("name")).pk)}


def experiments_search(user: User, data: dict[str, Any]) -> dict[str, Any]:
    projects = selectors.experiments_search(user=user, filter_string=str(data.get("filter") or ""))
    return {"experiments": [selectors.experiment_dict(p) for p in projects]}


# --- runs ------------------------------------------------------------------------------------

def run_create(user: User, data: dict[str, Any]) -> dict[str, Any]:
    project = selectors.experiment_get(user=user, experiment_id=data.get("experiment_id"))
    tags = services.batch_parse(tags=data.get("tags") or []).tags
    run = services.tracked_run_create(user=user, project=project, start_time=data.get("start_time"),
                                      run_name=data.get("run_name"), tags=tags)
    return {"run": selectors.runs_dicts([run])[0]}


def run_get(user: User, data: dict[str, Any]) -> dict[str, Any]:
    return {"run": selectors.runs_dicts([selectors.run_get(user=user, run_id=_run_id(data))])[0]}


def run_update(user: User, data: dict[str, Any]) -> dict[str, Any]:
    run = selectors.run_get(user=user, run_id=_run_id(data))
    run = services.tracked_run_update(user=user, run=run, status=data.get("status"), end_time=data.get("end_time"),
                                      run_name=data.get("run_name"))
    return {"run_info": selectors.run_info_dict(run)}


def run_delete(user: User, data: dict[str, Any]) -> dict[str, Any]:
    services.tracked_run_delete(user=user, run=selectors.run_get(user=user, run_id=_run_id(data)))
    return {}


def run_restore(user: User, data: dict[str, Any]) -> dict[str, Any]:
    services.tracked_run_restore(user=user, run=selectors.run_get(user=user, run_id=_run_id(data)))
    return {}


def _log(user: User, data: dict[str, Any], batch: services.Batch) -> dict[str, Any]:
    run = selectors.run_get(user=user, run_id=_run_id(data))
    services.run_log(user=user, run=run, batch=batch)
    return {}


def run_log_param(user: User, data: dict[str, Any]) -> dict[str, Any]:
    return _log(user, data, services.batch_parse(params=[{"key": data.get("key"), "value": data.get("value")}]))


def run_set_tag(user: User, data: dict[str, Any]) -> dict[str, Any]:
    return _log(user, data, services.batch_parse(tags=[{"key": data.get("key"), "value": data.get("value")}]))


def run_log_metric(user: User, data: dict[str, Any]) -> dict[str, Any]:
    metric = {k: data.get(k) for k in ("key", "value", "timestamp", "step")}
    return _log(user, data, services.batch_parse(metrics=[metric]))


def run_log_batch(user: User, data: dict[str, Any]) -> dict[str, Any]:
    return _log(user, data, services.batch_parse(metrics=data.get("metrics") or [], params=data.get("params") or [],
                                                 tags=data.get("tags") or []))


def run_log_inputs(user: User, data: dict[str, Any]) -> dict[str, Any]:
    """MLflow's runs/log-inputs (``mlflow.log_input``): dataset inputs. ``models`` (LoggedModelInput)
    are not kept: this server holds no logged models (logged-models/search is empty), so no id a
    client sends can name one."""
    run = selectors.run_get(user=user, run_id=_run_id(data))
    services.run_log_inputs(user=user, run=run, datasets=services.inputs_parse(datasets=data.get("datasets")))
    return {}


def runs_search(user: User, data: dict[str, Any]) -> dict[str, Any]:
    ids = data.get("experiment_ids") or []
    runs, more = selectors.runs_search(user=user, experiment_ids=ids if isinstance(ids, list) else [ids],
                                       filter_string=str(data.get("filter") or ""), max_results=_max_results(data, 1000),
                                       offset=_offset(data.get("page_token")), run_view_type=data.get("run_view_type"))
    out: dict[str, Any] = {"runs": selectors.runs_dicts(runs)}
    if more is not None:
        out["next_page_token"] = str(more)
    return out


def metric_history(user: User, data: dict[str, Any]) -> dict[str, Any]:
    run = selectors.run_get(user=user, run_id=_run_id(data))
    key = data.get("metric_key")
    if not isinstance(key, str) or not key:
        raise invalid("metric_key", "required")
    points, more = selectors.metric_history(run=run, key=key, offset=_offset(data.get("page_token")),
                                            max_results=_max_results(data, 0) or None)
    out: dict[str, Any] = {"metrics": points}
    if more is not None:
        out["next_page_token"] = str(more)
    return out


def logged_models_search(user: User, data: dict[str, Any]) -> dict[str, Any]:
    """No logged models here (the registry is apps.registry); the client asks while listing a run's artifacts."""
    ids = data.get("experiment_ids") or []
    for experiment_id in ids if isinstance(ids, list) else [ids]:
        selectors.experiment_get(user=user, experiment_id=experiment_id)
    return {"models": []}


ENDPOINTS: dict[str, tuple[str, Handler]] = {
    "experiments/get-by-name": ("GET", experiment_get_by_name),
    "experiments/get": ("GET", experiment_get),
    "experiments/create": ("POST", experiment_create),
    "experiments/search": ("POST", experiments_search),
    "runs/create": ("POST", run_create),
    "runs/get": ("GET", run_get),
    "runs/update": ("POST", run_update),
    "runs/delete": ("POST", run_delete),
    "runs/restore": ("POST", run_restore),
    "runs/log-parameter": ("POST", run_log_param),
    "runs/log-metric": ("POST", run_log_metric),
    "runs/log-batch": ("POST", run_log_batch),
    "runs/set-tag": ("POST", run_set_tag),
    "runs/log-inputs": ("POST", run_log_inputs),
    "runs/search": ("POST", runs_search),
    "metrics/get-history": ("GET", metric_history),
    "logged-models/search": ("POST", logged_models_search),
}


@csrf_exempt
def tracking_endpoint(request: HttpRequest, endpoint: str) -> HttpResponse:
    try:
        found = ENDPOINTS.get(endpoint.strip("/"))
        if found is None:
            raise MlflowError("ENDPOINT_NOT_FOUND", f"No MLflow endpoint {endpoint[:100]!r} here (Trainyard serves the tracking API).")
        method, handler = found
        if request.method != method:
            return JsonResponse({"error_code": "BAD_REQUEST", "message": f"Use {method} for {endpoint}."}, status=405)
        user = request_user(request)
        return JsonResponse(handler(user, _data(request)))
    except MlflowError as err:
        return err.response()
    except ServiceError as exc:
        return from_service_error(exc).response()


@csrf_exempt
def server_info(request: HttpRequest) -> HttpResponse:
    """What the client asks before artifact transfers: no multipart or presigned transfers here."""
    return JsonResponse({"store_type": "SqlStore", "multipart_uploads_enabled": False, "multipart_downloads_enabled": False})


@csrf_exempt
def not_found(request: HttpRequest, rest: str = "") -> HttpResponse:
    return MlflowError("ENDPOINT_NOT_FOUND", f"No MLflow endpoint {rest[:100]!r} here (Trainyard serves the tracking API).").response()

