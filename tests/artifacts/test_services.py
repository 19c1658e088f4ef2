"""artifact_store's rules: names, the size limit, sha256 and size, content types, replacement."""

from __future__ import annotations

import hashlib
import io

import pytest
from django.test import override_settings

from apps.artifacts.models import Artifact
from apps.artifacts.selectors import artifact_list, artifact_open
from apps.artifacts.services import artifact_store
from apps.audit.models import AuditEvent
from apps.core.errors import FieldError, Forbidden

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(("name", "rule"), [
    ("", "non-empty"),
    ("/etc/passwd", "no leading /"),
    ("../up.txt", "'..'"),
    ("plots/../../x", "'..'"),
    ("a\x00b", "control characters"),
    ("a\nb", "control characters"),
    ("x" * 501, "at most 500 characters"),
    ("plots//loss.png", "empty or '.'"),
    ("plots/", "empty or '.'"),
    ("./loss.png", "empty or '.'"),
    ("plots\\loss.png", "not \\"),
])
def test_bad_names_are_refused_naming_the_rule(alice_run, name, rule):
    with pytest.raises(FieldError) as err:
        artifact_store(run=alice_run, name=name, fileobj=io.BytesIO(b"x"))
    assert "name" in err.value.fields
    assert rule in err.value.fields["name"][0]
    assert not Artifact.objects.exists()


def test_store_computes_size_sha_and_type_and_reads_back(alice_run, media):
    data = b"step,loss\n1,0.5\n2,0.25\n"
    art = artifact_store(run=alice_run, name="tables/loss.csv", fileobj=io.BytesIO(data))
    assert (art.size, art.sha256, art.content_type) == (len(data), hashlib.sha256(data).hexdigest(), "text/csv")
    assert art.storage_key.startswith(f"artifacts/{alice_run.pk}/") and art.storage_key.endswith("/tables/loss.csv")
    with artifact_open(artifact=art) as fh:
        assert fh.read() == data
    assert artifact_store(run=alice_run, name="plots/a.png", fileobj=io.BytesIO(b"\x89PNG")).content_type == "image/png"
    assert artifact_store(run=alice_run, name="blob", fileobj=io.BytesIO(b"1")).content_type == "application/octet-stream"
    assert artifact_store(run=alice_run, name="m.bin", fileobj=io.BytesIO(b"1"), content_type="application/x-thing").content_type \
        == "application/x-thing"
    with pytest.raises(FieldError) as err:
        artifact_store(run=alice_run, name="m.bin", fileobj=io.BytesIO(b"1"), content_type="not a type\n")
    assert "content_type" in err.value.fields
    assert [a.name for a in artifact_list(run=alice_run)] == ["blob", "m.bin", "plots/a.png", "tables/loss.csv"]
    assert [a.name for a in artifact_list(run=alice_run, prefix="plots/")] == ["plots/a.png"]


def test_same_name_replaces_file_and_metadata(alice_run, media, django_capture_on_commit_callbacks):
    first = artifact_store(run=alice_run, name="model.txt", fileobj=io.BytesIO(b"one"))
    old_path = media / first.storage_key
    assert old_path.exists()
    with django_capture_on_commit_callbacks(execute=True):
        second = artifact_store(run=alice_run, name="model.txt", fileobj=io.BytesIO(b"second version"))
    assert second.pk == first.pk
    assert Artifact.objects.filter(run=alice_run).count() == 1
    second.refresh_from_db()
    assert (second.size, second.sha256) == (14, hashlib.sha256(b"second version").hexdigest())
    with artifact_open(artifact=second) as fh:
        assert fh.read() == b"second version"
    assert not old_path.exists()  # the replaced bytes are gone from the store
    assert list(AuditEvent.objects.filter(object_type="artifacts.artifact").values_list("action", flat=True).order_by("id")) \
        == ["artifact.stored", "artifact.replaced"]


def test_size_limit_names_the_limit_and_keeps_nothing(alice_run, media):
    with override_settings(TRAINYARD_ARTIFACT_MAX_BYTES=10):
        with pytest.raises(FieldError) as err:
            artifact_store(run=alice_run, name="big.bin", fileobj=io.BytesIO(b"x" * 11))
        assert "at most 10 bytes" in err.value.fields["file"][0]
        assert artifact_store(run=alice_run, name="ok.bin", fileobj=io.BytesIO(b"x" * 10)).size == 10
    assert [a.name for a in Artifact.objects.all()] == ["ok.bin"]
    stored = [p for p in (media / "artifacts").rglob("*") if p.is_file()]
    assert [p.name for p in stored] == ["ok.bin"]


def test_a_name_and_a_folder_of_that_name_can_both_exist(alice_run, media):
    artifact_store(run=alice_run, name="out", fileobj=io.BytesIO(b"file"))
    artifact_store(run=alice_run, name="out/inner.txt", fileobj=io.BytesIO(b"inside"))
    assert [a.name for a in artifact_list(run=alice_run)] == ["out", "out/inner.txt"]


def test_only_engineers_of_the_team_may_store(cast, alice_run):
    with pytest.raises(Forbidden):
        artifact_store(run=alice_run, name="x.txt", fileobj=io.BytesIO(b"x"), actor=cast.bob)
    with pytest.raises(Forbidden):
        artifact_store(run=alice_run, name="x.txt", fileobj=io.BytesIO(b"x"), actor=cast.victor)
    assert artifact_store(run=alice_run, name="x.txt", fileobj=io.BytesIO(b"x"), actor=cast.alice).created_by == cast.alice
