"""With an S3 store, the MLflow artifact proxy's download is a 302 to a presigned store URL: the
real MLflow client follows it, drops its Authorization header on the way (the store is another
host and port), and gets the bytes. In process: Django's live_server and moto's S3 server."""

from __future__ import annotations

import hashlib
import io
from pathlib import Path
from typing import Any

import pytest

from apps.accounts.services import api_token_create
from apps.artifacts.services import artifact_store
from apps.runs.models import Run
from tests.mlflow.test_api import Mlflow
from tests.mlflow.test_client import run_client
from tests.storage.conftest import s3_server, s3_settings  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.process, pytest.mark.slow, pytest.mark.timeout(1800)]


def test_s3_download_redirects_and_the_client_follows_without_its_token(
        transactional_db: Any, cast: Any, s3_settings: Any, live_server: Any, mlflow_python: str, tmp_path: Path) -> None:  # noqa: F811
    created = Mlflow(cast.alice).post("runs/create", {"experiment_id": str(cast.digits.pk), "run_name": "s3"})
    assert created.status_code == 200, created.content
    run = Run.objects.get(pk=created.json()["run"]["info"]["run_id"])
    data = b"label,predicted,count\n" + bytes(range(256)) * 64
    artifact_store(run=run, name="plots/confusion.csv", fileobj=io.BytesIO(data))
    token = api_token_create(user=cast.alice, name="mlflow-s3")[1]

    uri = f"mlflow-artifacts:/{run.project_id}/{run.pk}/artifacts/plots/confusion.csv"
    got = run_client(mlflow_python, "fetch", {"artifact_uri": uri}, uri=live_server.url + "/mlflow", token=token,
                     cwd=tmp_path)
    assert got["sha256"] == hashlib.sha256(data).hexdigest()
    assert len(got["hops"]) == 1, got
    hop: dict[str, Any] = got["hops"][0]
    assert hop["status"] == 302 and hop["from"].startswith(live_server.url + "/mlflow/")
    assert hop["to"].startswith(s3_settings.endpoint + "/") and hop["authorization"] is False, hop

    # Another team's token gets a 404 before any URL is made; the local folder still streams (test_api).
    bob = Mlflow(cast.bob)
    path = f"/mlflow/api/2.0/mlflow-artifacts/artifacts/{run.project_id}/{run.pk}/artifacts/plots/confusion.csv"
    refused = bob.client.get(path, headers=bob.headers)
    assert refused.status_code == 404 and refused.json()["error_code"] == "RESOURCE_DOES_NOT_EXIST"
    redirect = Mlflow(cast.alice).client.get(path, headers={"Authorization": f"Bearer {token}"})
    assert redirect.status_code == 302 and "no-store" in redirect["Cache-Control"]


def test_a_store_at_the_portals_own_origin_streams(cast: Any, s3_settings: Any, settings: Any) -> None:  # noqa: F811
    """The client would send its token along to a store URL of the request's own origin: no redirect then."""
    settings.ALLOWED_HOSTS = ["*"]
    alice = Mlflow(cast.alice)
    created = alice.post("runs/create", {"experiment_id": str(cast.digits.pk), "run_name": "s3"}).json()["run"]["info"]
    run = Run.objects.get(pk=created["run_id"])
    artifact_store(run=run, name="notes.txt", fileobj=io.BytesIO(b"same origin"))
    path = f"/mlflow/api/2.0/mlflow-artifacts/artifacts/{run.project_id}/{run.pk}/artifacts/notes.txt"
    host = s3_settings.endpoint.split("://", 1)[1]
    got = alice.client.get(path, headers=alice.headers, HTTP_HOST=host)
    assert got.status_code == 200 and b"".join(got.streaming_content) == b"same origin"
    assert alice.client.get(path, headers=alice.headers).status_code == 302
