"""MLflow's artifact proxy (``/api/2.0/mlflow-artifacts/artifacts/<experiment>/<run>/artifacts/<name>``)
over apps.artifacts: PUT stores a file, GET with a path downloads it, GET with ``?path=`` lists a folder.

A DRF view declaring no parsers, so the JSON-limits middleware leaves an uploaded ``.json`` file
of any size to the artifact store's own limit.

With an S3 store a download is a 302 to a short-lived presigned store URL (as apps.artifacts'
API does), so no web worker carries the bytes. The MLflow client follows it (requests; on by
default, MLFLOW_ALLOW_HTTP_REDIRECTS) and drops its ``Authorization: Bearer <token>`` on the
way, since the store is another host or port (requests' should_strip_auth);
tests/mlflow/test_artifact_redirect.py checks both with the real client. Where the store URL
has the request's own origin (a store proxied under the portal's host), the header would travel
with it, leaking the token to the store (and S3 refuses two auth mechanisms): that streams.
A client run with MLFLOW_ALLOW_HTTP_REDIRECTS=false does not follow it and would save the empty
302 body as the file (MLflow raises only for 4xx/5xx): keep redirects on with an S3 store.
"""

from __future__ import annotations

from typing import IO, Any, cast
from urllib.parse import urlsplit

from django.http import FileResponse, HttpResponse, JsonResponse
from django.http.response import HttpResponseBase
from rest_framework.request import Request
from rest_framework.views import APIView

from apps.artifacts.selectors import artifact_download_url, artifact_get, artifact_list, artifact_open
from apps.artifacts.services import artifact_store
from apps.core.errors import ServiceError
from apps.core.storage_views import store_redirect
from apps.mlflow_api import selectors
from apps.mlflow_api.errors import MlflowError, does_not_exist, from_service_error, invalid
from apps.mlflow_api.services import require_writer
from apps.mlflow_api.views import request_user
from apps.runs.models import Run


def _locate(user: Any, path: str) -> tuple[Run | None, str]:
    """(run, name inside its artifacts) for `<experiment>/<run>/artifacts[/<name>]`; run None at the experiment's level."""
    parts = [p for p in path.strip("/").split("/") if p]
    if not parts:
        raise invalid("path", "give <experiment_id>/<run_id>/artifacts/<name>")
    project = selectors.experiment_get(user=user, experiment_id=parts[0])
    if len(parts) == 1:
        return None, ""
    run = selectors.run_get(user=user, run_id=parts[1])
    if run.project_id != project.pk or (len(parts) > 2 and parts[2] != "artifacts"):
        raise does_not_exist(f"No artifact path {path[:200]!r}")
    if any(p in (".", "..") for p in parts):
        raise invalid("path", "must not contain . or .. segments")
    return run, "/".join(parts[3:])


def _listing(run: Run, folder: str) -> dict[str, Any]:
    prefix = f"{folder}/" if folder else ""
    entries: dict[str, dict[str, Any]] = {}
    for artifact in artifact_list(run=run, prefix=prefix):
        rest = artifact.name[len(prefix):]
        head, sep, _ = rest.partition("/")
        if sep:
            entries.setdefault(head, {"path": head, "is_dir": True})
        else:
            entries[head] = {"path": head, "is_dir": False, "file_size": artifact.size}
    return {"files": [entries[k] for k in sorted(entries)]} if entries else {}


def _same_origin(request: Request, url: str) -> bool:
    """Whether ``url`` has the request's scheme, host and port: the client would send it the token."""
    target = urlsplit(url)
    here = urlsplit(request._request.build_absolute_uri("/"))
    default = {"http": 80, "https": 443}
    return (target.scheme, target.hostname, target.port or default.get(target.scheme)) == (
        here.scheme, here.hostname, here.port or default.get(here.scheme))


class ArtifactsView(APIView):
    # MLflow's protocol, not Trainyard's API: documented by MLflow, kept out of /api/schema/.
    schema = None
    authentication_classes: list[Any] = []
    permission_classes: list[Any] = []
    parser_classes: list[Any] = []
    throttle_classes: list[Any] = []

    def get(self, request: Request, path: str = "") -> HttpResponseBase:
        try:
            user = request_user(request._request)
            listing = not path
            run, name = _locate(user, path or str(request.query_params.get("path") or ""))
            if run is None:
                return JsonResponse({})
            if listing:
                return JsonResponse(_listing(run, name))
            artifact = artifact_get(run=run, name=name)
            url = artifact_download_url(artifact=artifact)
            if url is not None and not _same_origin(request, url):
                return store_redirect(url)
            response = FileResponse(artifact_open(artifact=artifact), content_type=artifact.content_type or "application/octet-stream")
            response["Content-Length"] = str(artifact.size)
            return response
        except MlflowError as err:
            return err.response()
        except ServiceError as exc:
            return from_service_error(exc).response()

    def put(self, request: Request, path: str = "") -> HttpResponse:
        try:
            user = request_user(request._request)
            run, name = _locate(user, path)
            if run is None or not name:
                raise invalid("path", "give <experiment_id>/<run_id>/artifacts/<name>")
            require_writer(user=user, run=run)
            # The request streams its body (read(n)): the store hashes it as it goes, never held whole.
            artifact_store(run=run, name=name, fileobj=cast(IO[bytes], request._request),
                           content_type=request.content_type or "", actor=user)
            return JsonResponse({})
        except MlflowError as err:
            return err.response()
        except ServiceError as exc:
            return from_service_error(exc).response()
