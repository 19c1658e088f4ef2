"""Read APIs (metrics, keys, checkpoints, download, logs, energy, compare) and acceptance 3:
another team's run is a 404 on every one of them."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import transaction
from django.test import Client
from django.utils import timezone

from apps.runs.models import Checkpoint, EnergySample, LogChunk, Run
from apps.tracking.services import metric_points_store
from tests.tracking.conftest import make_reporting

T = 1_700_000_000.0


@pytest.fixture
def media(tmp_path: Path, settings: Any) -> Path:
    settings.MEDIA_ROOT = tmp_path
    return tmp_path


def populated(project: Any, media: Path, name: str, params: dict[str, Any]) -> Run:
    rep = make_reporting(project, name=name, params=params, tags={"owner": "alice", "task": "digits"})
    run, attempt = rep.run, rep.attempt
    with transaction.atomic():
        metric_points_store(run_id=run.pk, attempt=1, rows=[(k, s, float(s) * m, 0, T + s) for k, m in (("loss", -1), ("acc", 1))
                                                             for s in range(300)])
    (media / "ckpts").mkdir(exist_ok=True)
    (media / "ckpts" / f"{run.pk}.pt").write_bytes(b"weights" * 10)
    Checkpoint.objects.create(run=run, attempt=attempt, step=100, file_name="ckpt-0000000100.pt", size=70, sha256="c" * 64,
                              stored_path=f"ckpts/{run.pk}.pt")
    for seq in range(5):
        LogChunk.objects.create(run=run, attempt=attempt, seq=seq, text=f"line {seq}\n")
    now = timezone.now()
    for i in range(4):
        EnergySample.objects.create(attempt=attempt, node=rep.node, device_index=0, at=now + timedelta(seconds=i), power_w=100.0,
                                    energy_j=100.0 * (i + 1), utilization=0.5)
    return run


def test_read_endpoints(cast: Any, media: Path) -> None:
    run = populated(cast.digits, media, "a", {"lr": 0.1})
    api = cast.client(cast.alice)
    base = f"/api/v1/runs/{run.pk}"
    series = api.get(f"{base}/metrics/?key=loss,acc&max_points=50").json()["series"]
    assert [s["key"] for s in series] == ["loss", "acc"]
    assert all(len(s["x"]) <= 50 for s in series)
    assert (series[0]["true_min"], series[0]["true_max"]) == (-299.0, 0.0)
    assert api.get(f"{base}/metrics/").status_code == 400
    assert "max_points" in api.get(f"{base}/metrics/?key=loss&max_points=0").json()["error"]["fields"]
    keys = api.get(f"{base}/metrics/keys/").json()
    assert {k["key"]: k["last"] for k in keys["keys"]} == {"acc": 299.0, "loss": -299.0}
    assert keys["run"]["status"] == "running" and keys["run"]["queue"] is None
    # A queued run's keys say where it stands, for the run page's live line.
    at = timezone.now() + timedelta(minutes=5)
    Run.objects.filter(pk=run.pk).update(status="queued", queue_position=2, estimated_start=at,
                                         estimated_start_low=at - timedelta(minutes=1), estimated_start_high=at + timedelta(minutes=3))
    queue = api.get(f"{base}/metrics/keys/").json()["run"]["queue"]
    assert queue["position"] == 2 and queue["pool"] == run.pool.name
    assert queue["estimated_start"] is not None and queue["estimated_start_low"] < queue["estimated_start_high"]
    Run.objects.filter(pk=run.pk).update(status="running")
    ckpts = api.get(f"{base}/checkpoints/").json()["checkpoints"]
    assert ckpts[0]["metrics"] == {"acc": 100.0, "loss": -100.0} and ckpts[0]["sha256"] == "c" * 64
    download = Client()
    download.force_login(cast.alice)
    resp = download.get(ckpts[0]["download_url"])
    assert resp.status_code == 200 and b"".join(resp.streaming_content) == b"weights" * 10  # type: ignore[attr-defined]
    assert resp["Content-Type"] == "application/octet-stream" and "attachment" in resp["Content-Disposition"]
    logs = api.get(f"{base}/logs/?after=0&limit=3").json()
    assert [c["text"] for c in logs["chunks"]] == ["line 0\n", "line 1\n", "line 2\n"] and logs["more"]
    rest = api.get(f"{base}/logs/?after={logs['next']}").json()
    assert [c["text"] for c in rest["chunks"]] == ["line 3\n", "line 4\n"]
    energy = api.get(f"{base}/energy/").json()
    assert energy["total_j"] == 400.0 and energy["cumulative"]["energy_j"][-1] == 400.0


def test_compare(cast: Any, media: Path) -> None:
    runs = [populated(cast.digits, media, f"r{i}", {"lr": 0.1 * (i + 1), "batch": 32}) for i in range(3)]
    api = cast.client(cast.alice)
    data = api.get(f"/api/v1/compare/?runs={','.join(str(r.pk) for r in runs)}&keys=loss").json()
    assert [r["id"] for r in data["runs"]] == [r.pk for r in runs]
    params = {row["name"]: row for row in data["params"]}
    assert params["lr"]["differs"] and not params["batch"]["differs"]
    assert len(data["series"]["loss"]) == 3 and all(s["true_min"] == -299.0 for s in data["series"]["loss"])
    assert data["runs"][0]["summaries"]["loss"]["last"] == -299.0
    one = api.get(f"/api/v1/compare/?runs={runs[0].pk}")
    assert one.status_code == 400 and "compare takes 2 to 50" in one.json()["error"]["message"]
    many = api.get("/api/v1/compare/?runs=" + ",".join(str(i) for i in range(1, 52)))
    assert many.status_code == 400 and "51 runs" in many.json()["error"]["message"]
    assert api.get("/api/v1/compare/?runs=1,x").status_code == 400
    page = Client()
    page.force_login(cast.alice)
    csv = page.get(f"/compare/export.csv?runs={runs[0].pk},{runs[1].pk}")
    assert csv.status_code == 200 and b"param:lr" in csv.content
    # A mistyped id says which one, keeps the others to compare, and is still a 404.
    typo = page.get(f"/compare/?runs={runs[0].pk},{runs[1].pk},987654")
    html = typo.content.decode()
    assert typo.status_code == 404 and "No run 987654 that you can see" in html and "Compare the others below." in html
    assert f'value="{runs[0].pk},{runs[1].pk}"' in html


def test_other_teams_run_is_404_everywhere(cast: Any, media: Path) -> None:
    mine = populated(cast.digits, media, "mine", {})
    theirs = populated(cast.tinylm, media, "theirs", {})
    ckpt = Checkpoint.objects.get(run=theirs)
    api = cast.client(cast.alice)
    base = f"/api/v1/runs/{theirs.pk}"
    for url in (f"{base}/metrics/?key=loss", f"{base}/metrics/keys/", f"{base}/checkpoints/", f"{base}/logs/", f"{base}/energy/",
                f"{base}/checkpoints/{ckpt.pk}/download/", f"/api/v1/compare/?runs={mine.pk},{theirs.pk}",
                f"/api/v1/runs/{mine.pk}/checkpoints/{ckpt.pk}/download/"):
        resp = api.get(url)
        assert resp.status_code == 404, (url, resp.status_code)
        assert resp.json()["error"]["code"] == "not_found"
    page = Client()
    page.force_login(cast.alice)
    for url in (f"/runs/{theirs.pk}/", f"/compare/?runs={mine.pk},{theirs.pk}", f"/compare/export.csv?runs={mine.pk},{theirs.pk}"):
        assert page.get(url).status_code == 404, url
    # The outsider sees nothing at all, even of alice's run.
    assert cast.client(cast.outsider).get(f"/api/v1/runs/{mine.pk}/metrics/keys/").status_code == 404
    assert cast.client(None).get(f"/api/v1/runs/{mine.pk}/metrics/keys/").status_code in (401, 403)


def test_pages_render(cast: Any, media: Path) -> None:
    runs = [populated(cast.digits, media, f"r{i}", {"lr": i}) for i in range(2)]
    page = Client()
    page.force_login(cast.alice)
    listing = page.get("/runs/?sort=-metric:acc&owner=alice&q=r")
    assert listing.status_code == 200 and b"Compare selected" in listing.content
    html = listing.content.decode()
    for run in runs:  # each row: name, project, tags and the sorted-by metric's last value
        row = html[html.index(f'name="runs" value="{run.pk}"'):]
        row = row[:row.index("</tr>")]
        assert f"#{run.pk} {run.name}" in row and cast.digits.full_slug in row
        assert "owner=alice" in row and ">299<" in row and " ago</td>" in row
    assert page.get(f"/runs/?project={cast.digits.pk}&status=running&template=track-train&task=digits").status_code == 200
    detail = page.get(f"/runs/{runs[0].pk}/")
    assert detail.status_code == 200 and b"run-page" in detail.content
    redirect = page.get(f"/compare/?runs={runs[0].pk}&runs={runs[1].pk}")
    assert redirect.status_code == 302 and f"runs={runs[0].pk}%2C{runs[1].pk}" in redirect["Location"]
    assert page.get(f"/compare/?runs={runs[0].pk},{runs[1].pk}").status_code == 200
