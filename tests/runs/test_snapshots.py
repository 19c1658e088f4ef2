from __future__ import annotations

import hashlib
import io
import tarfile

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import override_settings

from apps.nodes.auth import hash_secret
from apps.nodes.models import Node
from apps.runs.models import Assignment, Attempt, CodeSnapshot, Run
from apps.runs.services.snapshots import snapshot_unpack_safely
from tests.runs.factories import body, local_pool, make_custom_template


def tarball(members: list[tuple[str, str, bytes]]) -> bytes:
    """members: (name, kind, data) with kind file, dir, symlink, hardlink, device."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, kind, data in members:
            info = tarfile.TarInfo(name)
            if kind == "file":
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
                continue
            info.type = {"dir": tarfile.DIRTYPE, "symlink": tarfile.SYMTYPE, "hardlink": tarfile.LNKTYPE, "device": tarfile.CHRTYPE}[kind]
            if kind in ("symlink", "hardlink"):
                info.linkname = data.decode()
            tar.addfile(info)
    return buf.getvalue()


GOOD = [("code", "dir", b""), ("code/train.py", "file", b"print('hello from custom code')\n")]


@pytest.fixture
def media(tmp_path, settings):
    settings.MEDIA_ROOT = tmp_path / "media"
    return settings.MEDIA_ROOT


def upload(cast, user, data: bytes, **extra):
    form = {"project": str(cast.digits.pk), "file": SimpleUploadedFile("code.tar.gz", data, "application/gzip"), **extra}
    return cast.client(user).post("/api/v1/code-snapshots/", form, format="multipart")


def test_upload_is_content_addressed(cast, media):
    data = tarball(GOOD)
    first = upload(cast, cast.alice, data, git_commit="abc1234")
    assert first.status_code == 201, first.json()
    assert first.json()["sha256"] == hashlib.sha256(data).hexdigest() and first.json()["git_commit"] == "abc1234"
    again = upload(cast, cast.alice, data)
    assert again.json()["id"] == first.json()["id"] and CodeSnapshot.objects.count() == 1
    snapshot = CodeSnapshot.objects.get()
    assert (media / snapshot.stored_path).read_bytes() == data and snapshot.stored_path.startswith("snapshots/")
    assert cast.client(cast.bob).get(f"/api/v1/code-snapshots/{snapshot.pk}/").status_code == 404


@pytest.mark.parametrize(("members", "text"), [
    ([("../evil.py", "file", b"x")], "'..' path component"),
    ([("code/../../evil.py", "file", b"x")], "'..' path component"),
    ([("/etc/cron.d/evil", "file", b"x")], "absolute path"),
    ([*GOOD, ("code/link", "symlink", b"/etc/passwd")], "symbolic link"),
    ([*GOOD, ("code/hard", "hardlink", b"code/train.py")], "hard link"),
    ([*GOOD, ("code/dev", "device", b"")], "device"),
])
def test_unsafe_snapshots_refused(cast, media, members, text):
    response = upload(cast, cast.alice, tarball(members))
    assert response.status_code == 400
    error = response.json()["error"]
    assert text in error["fields"]["file"][0] and "refused" in error["fields"]["file"][0]
    assert CodeSnapshot.objects.count() == 0
    assert not list((media / "snapshots").rglob("*.tar.gz"))


def test_size_limits(cast, media):
    with override_settings(TRAINYARD_MAX_SNAPSHOT_BYTES=100):
        response = upload(cast, cast.alice, tarball([("big.bin", "file", bytes(range(256)) * 64)]))
    assert response.status_code == 400 and "must be at most 100 bytes" in response.json()["error"]["fields"]["file"][0]
    with override_settings(TRAINYARD_MAX_SNAPSHOT_UNPACKED_BYTES=1000):
        response = upload(cast, cast.alice, tarball([("zeros.bin", "file", bytes(100_000))]))
    assert "unpacked size exceeds the limit of 1000 bytes" in response.json()["error"]["fields"]["file"][0]
    assert upload(cast, cast.alice, b"not a tarball").status_code == 400
    assert upload(cast, cast.victor, tarball(GOOD)).status_code == 403
    assert upload(cast, cast.bob, tarball(GOOD)).json()["error"]["fields"]["project"][0].startswith(f"no such project '{cast.digits.pk}'")


def test_unpack_safely_and_custom_submit(cast, media, tmp_path):
    local_pool()
    make_custom_template()
    sha = upload(cast, cast.alice, tarball(GOOD), git_commit="deadbeef").json()["sha256"]
    snapshot = CodeSnapshot.objects.get(sha256=sha)
    dest = tmp_path / "unpacked"
    summary = snapshot_unpack_safely(snapshot=snapshot, dest=dest)
    assert summary.files == 1 and (dest / "code" / "train.py").read_text().startswith("print")
    client = cast.client(cast.alice)
    missing = client.post("/api/v1/runs/", body(cast, template="custom", params={"command": "python code/train.py"}), format="json")
    assert "code_snapshot" in missing.json()["error"]["fields"]
    response = client.post("/api/v1/runs/", body(cast, template="custom", params={"command": "python code/train.py"},
                                                 code_snapshot=sha), format="json")
    assert response.status_code == 201, response.json()
    run = Run.objects.get(pk=response.json()["id"])
    assert run.entrypoint == "python code/train.py" and run.code_snapshot == snapshot
    assert response.json()["lineage"]["code_snapshot"] == {"sha256": sha, "git_commit": "deadbeef"}
    other = client.post("/api/v1/runs/", body(cast, template="custom", params={"command": "x"}, code_snapshot="f" * 64), format="json")
    assert other.json()["error"]["fields"]["code_snapshot"] == ["no such snapshot in this project"]
    # Tampered bytes on disk are refused at unpack time.
    (media / snapshot.stored_path).write_bytes(tarball([("x.py", "file", b"evil")]))
    with pytest.raises(Exception, match="does not match"):
        snapshot_unpack_safely(snapshot=snapshot, dest=tmp_path / "again")


def test_agent_downloads_only_snapshots_of_its_runs(cast, media):
    local_pool()
    make_custom_template()
    sha = upload(cast, cast.alice, tarball(GOOD)).json()["sha256"]
    run_id = cast.client(cast.alice).post("/api/v1/runs/", body(cast, template="custom", params={"command": "python code/train.py"},
                                                                   code_snapshot=sha), format="json").json()["id"]
    mine = Node.objects.create(pool=local_pool(), hostname="n1", agent_uid="u1", credential_hash=hash_secret("tyn_mine"))
    Node.objects.create(pool=local_pool(), hostname="n2", agent_uid="u2", credential_hash=hash_secret("tyn_other"))
    attempt = Attempt.objects.create(run_id=run_id, number=1)
    Assignment.objects.create(attempt=attempt, node=mine)
    from rest_framework.test import APIClient

    client = APIClient()
    response = client.get(f"/api/v1/agent/snapshots/{sha}/", HTTP_AUTHORIZATION="Node tyn_mine")
    assert response.status_code == 200 and hashlib.sha256(b"".join(response.streaming_content)).hexdigest() == sha
    assert client.get(f"/api/v1/agent/snapshots/{sha}/", HTTP_AUTHORIZATION="Node tyn_other").status_code == 404
    assert client.get(f"/api/v1/agent/snapshots/{sha}/").status_code in (401, 403)
    user = cast.client(cast.alice)
    assert user.get(f"/api/v1/agent/snapshots/{sha}/").status_code in (401, 403)
