"""The runs list keeps itself current from a fragment of its rows (cheap to ask for again: it has
an ETag), the home card waits for a first run, and the comparison gives each run one label and
one colour. Django's test client reads what the pages' scripts (static/tracking/runs_list.js,
overview.js, compare.js) are served; tests/tracking/test_browser.py checks what they do with it."""

from __future__ import annotations

import json
import re
from typing import Any

from django.test import Client

from apps.runs.models import RunStatus
from apps.tracking.display import RUN_COLORS, run_color, run_label
from apps.tracking.services import metric_points_store
from tests.tracking.conftest import make_run


def _client(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _rows(html: str) -> dict[int, str]:
    """The list's rows by run id: their status."""
    return {int(pk): status for pk, status in re.findall(r'<tr data-run="(\d+)" data-status="(\w+)"', html)}


# --- 1. the runs list refreshes from a fragment of itself ------------------------------------------

def test_the_fragment_is_the_rows_count_and_pager_with_the_pages_filters(cast: Any) -> None:
    running = make_run(cast.digits, name="busy", status=RunStatus.RUNNING, total_steps=100, steps_done=10, family="fam")
    queued = make_run(cast.digits, name="waits", status=RunStatus.QUEUED, family="fam")
    make_run(cast.digits, name="other-family", status=RunStatus.RUNNING, family="else")
    make_run(cast.tinylm, name="bobs", status=RunStatus.RUNNING, family="fam")
    client = _client(cast.alice)

    page = client.get("/runs/?family=fam").content.decode()
    assert _rows(page) == {running.pk: "running", queued.pk: "queued"}
    for part in ('id="runs-found"', '<tbody id="run-rows" data-active="2">', 'id="runs-pager"', 'id="runs-updated"'):
        assert part in page, part

    fragment = client.get("/runs/?family=fam&partial=1")
    html = fragment.content.decode()
    assert fragment.status_code == 200 and _rows(html) == {running.pk: "running", queued.pk: "queued"}
    assert '<tbody id="run-rows" data-active="2">' in html and "2 found" in html and 'id="runs-pager"' in html
    # Only the parts to swap in: no page around them, no filter form, no CSRF token.
    assert "<form" not in html and "<html" not in html and "csrfmiddlewaretoken" not in html
    assert 'width: 10%' in html  # the running run's progress

    # The runs move on; the next fetch of the fragment says so (the page itself is not reloaded).
    running.status, running.steps_done = RunStatus.SUCCEEDED, 100
    running.save()
    queued.status = RunStatus.RUNNING
    queued.save()
    html = client.get("/runs/?family=fam&partial=1").content.decode()
    assert _rows(html) == {running.pk: "succeeded", queued.pk: "running"}
    assert 'data-active="1"' in html

    # Filters, sort and page are the page's own: a status filter drops the run that finished.
    html = client.get("/runs/?family=fam&status=running&partial=1").content.decode()
    assert _rows(html) == {queued.pk: "running"} and "1 found" in html
    # The pager's links lead to pages, not to fragments.
    assert "partial" not in client.get("/runs/?family=fam&partial=1").content.decode().split('id="runs-pager"')[1]


def test_an_unchanged_fragment_costs_a_304(cast: Any) -> None:
    run = make_run(cast.digits, name="busy", status=RunStatus.RUNNING)
    client = _client(cast.alice)
    first = client.get("/runs/?partial=1")
    etag = first["ETag"]
    assert etag and "no-cache" in first["Cache-Control"] and "private" in first["Cache-Control"]
    again = client.get("/runs/?partial=1", HTTP_IF_NONE_MATCH=etag)
    assert again.status_code == 304 and again.content == b""
    run.status = RunStatus.SUCCEEDED
    run.save()
    changed = client.get("/runs/?partial=1", HTTP_IF_NONE_MATCH=etag)
    assert changed.status_code == 200 and changed["ETag"] != etag
    # The full page carries a CSRF token in its forms: no ETag there, it would never match.
    assert not client.get("/runs/").has_header("ETag")


def test_the_fragment_is_scoped_and_needs_a_login(cast: Any) -> None:
    mine = make_run(cast.digits, name="mine", status=RunStatus.RUNNING)
    theirs = make_run(cast.tinylm, name="theirs", status=RunStatus.RUNNING)
    assert _rows(_client(cast.bob).get("/runs/?partial=1").content.decode()) == {theirs.pk: "running"}
    assert mine.pk not in _rows(_client(cast.outsider).get("/runs/?partial=1").content.decode())
    assert Client().get("/runs/?partial=1").status_code == 302


def test_the_empty_row_spans_the_metric_columns(cast: Any) -> None:
    html = _client(cast.alice).get("/runs/?q=nothing-like-this&cols=loss,acc&partial=1").content.decode()
    assert '<td colspan="11" class="muted">No runs match.</td>' in html


def test_home_card_waits_hidden_for_a_first_run(cast: Any) -> None:
    client = _client(cast.alice)
    home = client.get("/projects/").content.decode()
    card = re.search(r'<section class="card runs-panel" id="runs-panel"[^>]*>', home)
    assert card and 'data-src="/runs/overview/"' in card.group(0) and " hidden" in card.group(0)
    assert "Your runs" not in home and "tracking/overview.js" in home
    assert client.get("/runs/overview/").status_code == 204
    make_run(cast.digits, name="first-one", status=RunStatus.QUEUED, submitted_by=cast.alice)
    card_html = client.get("/runs/overview/").content.decode()
    assert "Your runs" in card_html and "first-one" in card_html


def test_the_card_fragment_costs_a_304_when_unchanged(cast: Any) -> None:
    make_run(cast.digits, name="alices-run", status=RunStatus.SUCCEEDED, submitted_by=cast.alice)
    client = _client(cast.alice)
    etag = client.get("/runs/overview/")["ETag"]
    assert client.get("/runs/overview/", HTTP_IF_NONE_MATCH=etag).status_code == 304


# --- 2. the comparison: one label and one colour per run --------------------------------------------

def _compare_runs(html: str) -> list[dict[str, Any]]:
    match = re.search(r'<script id="compare-runs" type="application/json">(.*?)</script>', html, re.S)
    assert match, "the page carries its runs' labels and colours"
    return list(json.loads(match.group(1)))


def test_compare_page_gives_each_run_one_colour_and_the_label_other_pages_use(cast: Any) -> None:
    named = make_run(cast.digits, name="digits-a", status=RunStatus.SUCCEEDED)
    unnamed = make_run(cast.digits, name="", status=RunStatus.SUCCEEDED)
    more = [make_run(cast.digits, name=f"r{i}", status=RunStatus.SUCCEEDED) for i in range(10)]
    ids = [named.pk, unnamed.pk, *(r.pk for r in more)]
    client = _client(cast.alice)
    html = client.get(f"/compare/?runs={','.join(map(str, ids))}").content.decode()
    looks = _compare_runs(html)
    assert [r["id"] for r in looks] == ids
    assert looks[0]["label"] == f"#{named.pk} digits-a" and looks[1]["label"] == f"#{unnamed.pk}"
    colors = [r["color"] for r in looks]
    assert colors[:10] == list(RUN_COLORS) and len(set(colors)) == len(ids)
    assert all(re.fullmatch(r"#[0-9a-f]{6}", c) for c in colors)  # common.js's rgba() reads #rrggbb

    # The runs list names the unnamed run the same way, and the API says it too.
    listing = client.get("/runs/").content.decode()
    assert f'<a href="/runs/{unnamed.pk}/">#{unnamed.pk}</a>' in listing
    api = cast.client(cast.alice).get(f"/api/v1/compare/?runs={named.pk},{unnamed.pk}").json()
    assert [r["label"] for r in api["runs"]] == [f"#{named.pk} digits-a", f"#{unnamed.pk}"]
    assert "run " not in json.dumps([r["label"] for r in api["runs"]])


def test_every_run_of_a_full_comparison_has_a_colour_of_its_own() -> None:
    colors = [run_color(i) for i in range(50)]
    assert len(set(colors)) == 50
    assert run_label(pk=41, name="") == "#41" and run_label(pk=41, name="digits-a") == "#41 digits-a"


def test_compare_data_keeps_a_metric_logged_once(cast: Any) -> None:
    """A val_accuracy logged once is one point in the series the page draws (compare.js marks
    short series, tests/tracking/test_browser.py checks it is drawn)."""
    runs = [make_run(cast.digits, name=f"r{i}", status=RunStatus.SUCCEEDED) for i in range(2)]
    for run in runs:
        metric_points_store(run_id=run.pk, attempt=1, rows=[("loss", s, 1.0 / (s + 1), 0, 1_700_000_000.0 + s) for s in range(50)]
                            + [("val_accuracy", 49, 0.9, 0, 1_700_000_049.0)])
    data = cast.client(cast.alice).get(f"/api/v1/compare/?runs={runs[0].pk},{runs[1].pk}").json()
    assert [len(s["x"]) for s in data["series"]["val_accuracy"]] == [1, 1]


# --- 3. the parallel coordinates start on the metric most of the runs logged -----------------------

def _log(run: Any, keys: list[str]) -> None:
    metric_points_store(run_id=run.pk, attempt=1, rows=[(key, 10, 0.5, 0, 1_700_000_010.0) for key in keys])


def _compare_metrics(html: str) -> list[dict[str, Any]]:
    match = re.search(r'<script id="compare-metrics" type="application/json">(.*?)</script>', html, re.S)
    assert match, "the page carries its metrics in the order the parallel coordinates offer them"
    return list(json.loads(match.group(1)))


def test_compare_page_orders_metrics_by_how_many_runs_logged_them(cast: Any) -> None:
    """compare.js offers the metrics in this order and starts on the first: the alphabetically
    first ("acc", logged by one run) left the other runs without a line."""
    a, b, c = (make_run(cast.digits, name=f"r{i}", status=RunStatus.SUCCEEDED) for i in range(3))
    _log(a, ["acc", "loss", "beta"])
    _log(b, ["loss", "zeta"])
    _log(c, ["loss", "zeta"])
    silent = make_run(cast.digits, name="silent", status=RunStatus.SUCCEEDED)  # logged nothing
    html = _client(cast.alice).get(f"/compare/?runs={a.pk},{b.pk},{c.pk},{silent.pk}").content.decode()
    assert _compare_metrics(html) == [
        {"key": "loss", "runs": [a.pk, b.pk, c.pk], "differs": False},  # every run's last value is 0.5
        {"key": "zeta", "runs": [b.pk, c.pk], "differs": False},
        {"key": "acc", "runs": [a.pk], "differs": False},  # ties by name
        {"key": "beta", "runs": [a.pk], "differs": False},
    ]
    assert 'id="parcoords-note"' in html  # where the script says whose line is missing and why
    # The runs' order is the comparison's, not the ids': the same metrics, each run list reordered.
    again = _compare_metrics(_client(cast.alice).get(f"/compare/?runs={c.pk},{silent.pk},{a.pk},{b.pk}").content.decode())
    assert [m["key"] for m in again] == ["loss", "zeta", "acc", "beta"] and again[0]["runs"] == [c.pk, a.pk, b.pk]


def test_a_comparison_past_the_key_limit_keeps_the_metrics_most_runs_logged(cast: Any) -> None:
    """Past 20 keys the comparison keeps those logged by the most runs, not the alphabetically
    first: here the only metric two of the runs have sorts last."""
    many, few, other = (make_run(cast.digits, name=f"r{i}", status=RunStatus.SUCCEEDED) for i in range(3))
    _log(many, [f"a{i:02d}" for i in range(21)] + ["zz"])
    _log(few, ["zz"])
    _log(other, ["zz"])
    data = cast.client(cast.alice).get(f"/api/v1/compare/?runs={many.pk},{few.pk},{other.pk}").json()
    assert data["keys"] == [f"a{i:02d}" for i in range(19)] + ["zz"]
    assert len(data["available_keys"]) == 22 and "zz" in data["runs"][1]["summaries"]
    html = _client(cast.alice).get(f"/compare/?runs={many.pk},{few.pk},{other.pk}").content.decode()
    assert [m["key"] for m in _compare_metrics(html)][:20] == ["zz", *(f"a{i:02d}" for i in range(19))]
