"""The artifacts card on the run page, and the table previews' limits."""

from __future__ import annotations

import io
import json

import pytest

from apps.artifacts.previews import CELL_CHARS, PREVIEW_BYTES, PREVIEW_ROWS, csv_table, json_table
from apps.artifacts.services import artifact_store

pytestmark = pytest.mark.django_db


def test_card_shows_images_tables_and_downloads(cast, alice_run, client):
    for name, data in [("plots/loss.png", b"\x89PNG\r\n\x1a\n"), ("metrics.csv", b"step,loss\n1,0.5\n2,0.25\n"),
                       ("summary.json", json.dumps({"accuracy": 0.93, "classes": 10}).encode()),
                       ("rows.json", json.dumps([{"a": i, "b": "<b>x</b>"} for i in range(60)]).encode()),
                       ("model/weights.bin", b"\x00" * 2048)]:
        artifact_store(run=alice_run, name=name, fileobj=io.BytesIO(data))
    client.force_login(cast.alice)
    page = client.get(f"/runs/{alice_run.pk}/").content.decode()
    assert 'id="run-artifacts"' in page
    assert f'<img src="/api/v1/runs/{alice_run.pk}/artifacts/plots/loss.png" alt="plots/loss.png"' in page
    assert "<th scope=\"col\">step</th><th scope=\"col\">loss</th>" in page and "<td>0.25</td>" in page
    assert "<td>accuracy</td><td>0.93</td>" in page
    assert "&lt;b&gt;x&lt;/b&gt;" in page and "<b>x</b>" not in page  # cells are escaped
    assert "The first 50 rows" in page
    assert f'href="/api/v1/runs/{alice_run.pk}/artifacts/model/weights.bin" download>model/weights.bin</a>' in page
    assert "2.0\xa0KB" in page


def test_no_card_without_artifacts_and_none_for_other_tenants(cast, alice_run, client):
    client.force_login(cast.alice)
    assert 'id="run-artifacts"' not in client.get(f"/runs/{alice_run.pk}/").content.decode()
    artifact_store(run=alice_run, name="a.txt", fileobj=io.BytesIO(b"x"))
    client.force_login(cast.bob)
    assert client.get(f"/runs/{alice_run.pk}/").status_code == 404


def test_csv_preview_limits():
    rows = "\n".join(f"{i},{'y' * 500}" for i in range(200))
    table = csv_table(("n,text\n" + rows + "\n").encode(), truncated=False)
    assert table.columns == ["n", "text"] and len(table.rows) == PREVIEW_ROWS and table.more_rows
    assert len(table.rows[0][1]) == CELL_CHARS
    wide = csv_table((",".join(f"c{i}" for i in range(100)) + "\n").encode(), truncated=False)
    assert len(wide.columns) == 30 and wide.more_columns
    cut = csv_table(b"a;b\n1;2\n3;4\n5;", truncated=True)  # a head: the cut last line is dropped
    assert cut.columns == ["a", "b"] and cut.rows == [["1", "2"], ["3", "4"]] and cut.more_rows
    assert csv_table(b"", truncated=False).problem == "empty"


def test_json_preview_shapes_and_limits():
    assert json_table(b'{"x": [1, 2], "y": [3]}', truncated=False).rows == [["1", "3"], ["2", ""]]
    assert json_table(b'[1, "two", null]', truncated=False).rows == [["1"], ["two"], [""]]
    assert json_table(b'"just text"', truncated=False).rows == [["just text"]]
    assert "not valid JSON" in json_table(b"{oops", truncated=False).problem
    assert "too large" in json_table(b"[" * 10, truncated=True).problem
    assert "deeper" in json_table(b"[" * 100_000 + b"]" * 100_000, truncated=False).problem
    assert PREVIEW_BYTES == 256 * 1024


def test_admin_lists_artifacts_read_only(cast, alice_run, client):
    artifact_store(run=alice_run, name="a.txt", fileobj=io.BytesIO(b"x"))
    client.force_login(cast.admin)
    listing = client.get("/admin/artifacts/artifact/")
    assert listing.status_code == 200 and "a.txt" in listing.content.decode()
    assert client.get("/admin/artifacts/artifact/add/").status_code == 403
