"""The artifacts API: upload, list, download roundtrip; tenancy; bad input."""

from __future__ import annotations

import hashlib
import io

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import override_settings

from apps.artifacts.models import Artifact
from apps.artifacts.services import artifact_store

pytestmark = pytest.mark.django_db

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 32


def upload(client, run_id, data, filename="f.bin", **fields):
    part = SimpleUploadedFile(filename, data, "application/octet-stream")
    return client.post(f"/api/v1/runs/{run_id}/artifacts/", {"file": part, **fields}, format="multipart")


def body_of(response):
    return b"".join(response.streaming_content)


def test_upload_list_download_roundtrip(cast, alice_run):
    alice = cast.client(cast.alice)
    data = b"step,loss\n1,0.5\n"
    created = upload(alice, alice_run.pk, data, "loss.csv", name="tables/loss.csv")
    assert created.status_code == 201, created.json()
    assert created.json()["sha256"] == hashlib.sha256(data).hexdigest()
    assert upload(alice, alice_run.pk, PNG, "loss.png", name="plots/loss.png").status_code == 201
    assert upload(alice, alice_run.pk, b"weights", "model.pt").status_code == 201  # name defaults to the file's

    listing = alice.get(f"/api/v1/runs/{alice_run.pk}/artifacts/").json()
    assert [(a["name"], a["size"], a["content_type"]) for a in listing["results"]] == [
        ("model.pt", 7, "application/octet-stream"), ("plots/loss.png", len(PNG), "image/png"), ("tables/loss.csv", len(data), "text/csv")]
    csv_row = listing["results"][2]
    assert csv_row["url"].endswith(f"/api/v1/runs/{alice_run.pk}/artifacts/tables/loss.csv")
    assert [a["name"] for a in alice.get(f"/api/v1/runs/{alice_run.pk}/artifacts/?prefix=plots/").json()["results"]] == ["plots/loss.png"]

    got = alice.get(csv_row["url"])
    assert got.status_code == 200
    assert got["Content-Type"].startswith("text/csv")
    assert got["Content-Disposition"].startswith("attachment")
    assert hashlib.sha256(body_of(got)).hexdigest() == csv_row["sha256"]

    image = alice.get(f"/api/v1/runs/{alice_run.pk}/artifacts/plots/loss.png", HTTP_ACCEPT="image/avif,image/webp,*/*")
    assert image.status_code == 200 and image["Content-Type"] == "image/png"
    assert image["Content-Disposition"].startswith("inline")
    assert "sandbox" in image["Content-Security-Policy"]
    assert body_of(image) == PNG
    strict = alice.get(f"/api/v1/runs/{alice_run.pk}/artifacts/plots/loss.png", HTTP_ACCEPT="image/png")
    assert strict.status_code == 200

    assert alice.get(f"/api/v1/runs/{alice_run.pk}/artifacts/nope.txt").status_code == 404


def test_same_name_upload_replaces(cast, alice_run):
    alice = cast.client(cast.alice)
    upload(alice, alice_run.pk, b"v1", "m.txt")
    second = upload(alice, alice_run.pk, b"version 2", "m.txt")
    assert second.status_code == 201
    assert Artifact.objects.filter(run=alice_run).count() == 1
    assert body_of(alice.get(f"/api/v1/runs/{alice_run.pk}/artifacts/m.txt")) == b"version 2"
    assert alice.get(f"/api/v1/runs/{alice_run.pk}/artifacts/").json()["results"][0]["sha256"] == hashlib.sha256(b"version 2").hexdigest()


def test_tenancy_matrix(cast, alice_run, bob_run):
    artifact_store(run=alice_run, name="secret.txt", fileobj=io.BytesIO(b"alice's"))
    base = f"/api/v1/runs/{alice_run.pk}/artifacts/"
    bob, outsider, victor = cast.client(cast.bob), cast.client(cast.outsider), cast.client(cast.victor)
    for other in (bob, outsider):
        assert other.get(base).status_code == 404
        assert other.get(base + "secret.txt").status_code == 404
        assert upload(other, alice_run.pk, b"x", "x.txt").status_code == 404
    assert cast.client(None).get(base).status_code in (401, 403)
    # A viewer of the team reads but may not upload.
    assert victor.get(base).json()["count"] == 1
    assert body_of(victor.get(base + "secret.txt")) == b"alice's"
    assert upload(victor, alice_run.pk, b"x", "x.txt").status_code == 403
    # bob's own run is his.
    assert upload(bob, bob_run.pk, b"mine", "mine.txt").status_code == 201
    assert cast.client(cast.alice).get(f"/api/v1/runs/{bob_run.pk}/artifacts/").status_code == 404
    assert list(Artifact.objects.values_list("name", flat=True).order_by("name")) == ["mine.txt", "secret.txt"]


def test_bad_input_is_a_400_naming_field_and_limit(cast, alice_run):
    alice = cast.client(cast.alice)
    bad = upload(alice, alice_run.pk, b"x", "x.txt", name="../escape.txt")
    assert bad.status_code == 400
    assert "'..'" in bad.json()["error"]["fields"]["name"][0]
    missing = alice.post(f"/api/v1/runs/{alice_run.pk}/artifacts/", {"name": "a.txt"}, format="multipart")
    assert missing.status_code == 400 and "file" in missing.json()["error"]["fields"]
    with override_settings(TRAINYARD_ARTIFACT_MAX_BYTES=100):
        big = upload(alice, alice_run.pk, b"x" * 101, "big.bin")
    assert big.status_code == 400
    assert "at most 100 bytes" in big.json()["error"]["fields"]["file"][0]
    assert not Artifact.objects.exists()


def test_openapi_documents_artifacts(cast):
    schema = cast.client(cast.alice).get("/api/schema/?format=json").json()
    assert "/api/v1/runs/{id}/artifacts/" in schema["paths"] or "/api/v1/runs/{pk}/artifacts/" in schema["paths"]
