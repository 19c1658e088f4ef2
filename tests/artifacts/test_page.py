"""The artifacts card on the run page, and the table previews' limits."""

from __future__ import annotations

import io
import json

import pytest
from django.template import Context, Template

from apps.artifacts.previews import CELL_CHARS, PREVIEW_BYTES, PREVIEW_ROWS, csv_table, json_table
from apps.artifacts.selectors import artifact_list, artifact_preview
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


# The card's table as the template drew it cell by cell before the view joined the rows.
CELL_BY_CELL = Template(
    '<thead><tr>{% for c in table.columns %}<th scope="col">{{ c }}</th>{% endfor %}</tr></thead>\n'
    '      <tbody>{% for r in table.rows %}<tr>{% for cell in r %}<td>{{ cell }}</td>{% endfor %}</tr>'
    '{% empty %}<tr><td colspan="{{ table.columns|length }}" class="muted">No rows.</td></tr>{% endfor %}</tbody>')


def test_csv_preview_markup_stays_text_and_the_table_is_as_before(cast, alice_run, client):
    data = (b'name,note,"a ""quoted"" & head"\n'
            b'alpha,<script>alert(1)</script>,1\n'
            b"beta,<img src=x onerror=alert(2)>,'2'\n"
            b"gamma\n"  # a short row: padded with empty cells
            b"delta,&amp; &lt;b&gt;,3,extra\n")
    artifact_store(run=alice_run, name="evil.csv", fileobj=io.BytesIO(data))
    artifact_store(run=alice_run, name="header-only.csv", fileobj=io.BytesIO(b"x,<y>\n"))
    client.force_login(cast.alice)
    page = client.get(f"/runs/{alice_run.pk}/").content.decode()
    assert "<script>alert(1)</script>" not in page and "<img src=x" not in page
    assert "<td>&lt;script&gt;alert(1)&lt;/script&gt;</td>" in page
    assert "<td>&amp;amp; &amp;lt;b&amp;gt;</td>" in page  # escaped once more, shown as typed
    assert '<th scope="col">a &quot;quoted&quot; &amp; head</th>' in page
    for artifact in artifact_list(run=alice_run):
        table = artifact_preview(artifact=artifact)
        assert CELL_BY_CELL.render(Context({"table": table})) in page, artifact.name
    evil = artifact_preview(artifact=artifact_list(run=alice_run).get(name="evil.csv"))
    assert evil.columns == ["name", "note", 'a "quoted" & head', ""]  # the widest row's width
    assert [r[0] for r in evil.rows] == ["alpha", "beta", "gamma", "delta"] and all(len(r) == 4 for r in evil.rows)
    assert evil.rows[2] == ["gamma", "", "", ""] and evil.rows[3][3] == "extra"
    card = page.split('id="run-artifacts"', 1)[1].split("</section>", 1)[0]
    assert card.count("<tr><td>") == 4 and card.count("<td>") == 16 and card.count('<th scope="col">') == 6
    assert '<tr><td colspan="2" class="muted">No rows.</td></tr>' in page


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
