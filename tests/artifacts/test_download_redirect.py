"""Artifact downloads with an S3-compatible store are a 302 to a short-lived store URL (moto's
server over real HTTP), made only after the run is scoped to the user; the local folder still
streams through the web."""

from __future__ import annotations

import io
import urllib.request
from typing import Any
from urllib.parse import unquote

import pytest

from apps.artifacts.services import artifact_store
from apps.core.storage import S3Store
from tests.storage.conftest import s3_server, s3_settings  # noqa: F401  (fixtures)

pytestmark = pytest.mark.django_db

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 32


def fetch(url: str) -> tuple[int, bytes, Any]:
    with urllib.request.urlopen(url, timeout=60) as resp:
        return resp.status, resp.read(), resp.headers


def test_s3_download_is_a_redirect_to_the_store(cast: Any, alice_run: Any, s3_settings: Any) -> None:  # noqa: F811
    data = b"step,loss\n1,0.5\n" * 1000
    artifact_store(run=alice_run, name="tables/über loss.csv", fileobj=io.BytesIO(data))
    artifact_store(run=alice_run, name="plots/loss.png", fileobj=io.BytesIO(PNG))
    alice = cast.client(cast.alice)

    got = alice.get(f"/api/v1/runs/{alice_run.pk}/artifacts/tables/über loss.csv")
    assert got.status_code == 302, got.content[:300]
    assert got["Location"].startswith(s3_settings.endpoint + "/") and "X-Amz-Expires=300" in got["Location"]
    assert "no-store" in got["Cache-Control"]
    status, body, headers = fetch(got["Location"])
    assert status == 200 and body == data
    assert headers["Content-Type"].startswith("text/csv")
    disposition = headers["Content-Disposition"]
    assert disposition.startswith("attachment;") and 'filename="_ber loss.csv"' in disposition
    assert unquote(disposition.split("filename*=UTF-8''", 1)[1]) == "über loss.csv"

    image = alice.get(f"/api/v1/runs/{alice_run.pk}/artifacts/plots/loss.png", HTTP_ACCEPT="image/png")
    assert image.status_code == 302
    status, body, headers = fetch(image["Location"])
    assert (status, body, headers["Content-Type"]) == (200, PNG, "image/png")
    assert headers["Content-Disposition"].startswith('inline; filename="loss.png"')


def test_s3_other_team_gets_404_and_no_url(cast: Any, alice_run: Any, s3_settings: Any,  # noqa: F811
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    artifact_store(run=alice_run, name="secret.txt", fileobj=io.BytesIO(b"alice's"))
    signed: list[str] = []
    original = S3Store.presigned_get

    def spy(self: S3Store, key: str, **kwargs: Any) -> str:
        signed.append(key)
        return original(self, key, **kwargs)

    monkeypatch.setattr(S3Store, "presigned_get", spy)
    url = f"/api/v1/runs/{alice_run.pk}/artifacts/secret.txt"
    for other in (cast.bob, cast.outsider):
        refused = cast.client(other).get(url)
        assert refused.status_code == 404 and "Location" not in refused
        assert s3_settings.endpoint not in refused.content.decode()
    assert signed == []
    assert cast.client(cast.alice).get(url).status_code == 302 and len(signed) == 1


def test_local_store_still_streams_through_the_web(cast: Any, alice_run: Any) -> None:
    artifact_store(run=alice_run, name="model.pt", fileobj=io.BytesIO(b"weights"))
    got = cast.client(cast.alice).get(f"/api/v1/runs/{alice_run.pk}/artifacts/model.pt")
    assert got.status_code == 200 and b"".join(got.streaming_content) == b"weights"
    assert got["Content-Disposition"] == 'attachment; filename="model.pt"'
