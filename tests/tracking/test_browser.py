"""Acceptance 4: the run page's chart follows a running run without reload, and the comparison
view shows curves, highlights differing parameters and draws parallel coordinates. Real
Chromium against a live gunicorn stack; screenshots go to test-artifacts/."""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.live import LiveStack

pytestmark = [pytest.mark.browser, pytest.mark.live]

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--no-first-run"]


@pytest.fixture
def page(chromium: Any) -> Iterator[Any]:
    """One Playwright per test session (tests/fixtures/browser.py): a second sync_playwright()
    inside it fails, so this takes a context from the shared browser."""
    context = chromium.new_context(viewport={"width": 1360, "height": 1000})
    try:
        yield context.new_page()
    finally:
        context.close()


def post_metrics(url: str, secret: str, attempt_id: int, points: list[list[Any]]) -> dict[str, Any]:
    body = json.dumps({"attempt_id": attempt_id, "attempt": 1, "points": points}).encode()
    req = urllib.request.Request(f"{url}/api/v1/agent/metrics/", data=body, method="POST",
                                 headers={"Content-Type": "application/json", "Authorization": f"Node {secret}"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return dict(json.loads(resp.read()))


def setup_live(live_stack: Any) -> dict[str, Any]:
    out = live_stack.manage("shell", "-c", (ROOT / "tests" / "tracking" / "live_setup.py").read_text())
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def login(page: Any, url: str) -> None:
    page.goto(f"{url}/login/")
    page.fill("#id_username", "alice")
    page.fill("#id_password", "trainyard-demo")
    page.click("form button[type=submit], form input[type=submit]")
    page.wait_for_url(lambda u: "/login/" not in u)


def chart_points(page: Any, key: str) -> int:
    return int(page.evaluate(
        """key => { const d = document.querySelector(`.metric-chart[data-key="${key}"]`);
                   return d && d.data ? d.data[d.data.length - 1].x.length : 0; }""", key))


def test_run_chart_updates_live_and_compare_view(live_stack: LiveStack, page: Any) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    ids = setup_live(live_stack)
    first = [["loss", s, 2.0 / (s + 1), 1_700_000_000.0 + s] for s in range(50)]
    assert post_metrics(live_stack.url, ids["secret"], ids["attempt"], first) == {"accepted": 50}
    login(page, live_stack.url)

    page.goto(f"{live_stack.url}/runs/{ids['run']}/")
    page.wait_for_function("() => { const d = document.querySelector('.metric-chart[data-key=\"loss\"]'); return d && d.data; }")
    assert chart_points(page, "loss") == 50
    page.evaluate("window.__sameDocument = true")  # survives only if the page is not reloaded
    more = [["loss", s, 2.0 / (s + 1), 1_700_000_000.0 + s] for s in range(50, 150)]
    more += [["accuracy", s, s / 150, 1_700_000_000.0 + s] for s in range(0, 150, 10)]
    post_metrics(live_stack.url, ids["secret"], ids["attempt"], more)
    page.wait_for_function("() => { const d = document.querySelector('.metric-chart[data-key=\"loss\"]');"
                           " return d && d.data[d.data.length - 1].x.length >= 150; }", timeout=10_000)
    page.wait_for_selector('.metric-chart[data-key="accuracy"] .main-svg', timeout=10_000)
    assert page.evaluate("window.__sameDocument") is True
    assert chart_points(page, "loss") == 150 and chart_points(page, "accuracy") == 15
    # Checkpoints arrive, and retention deletes the older one: the card follows in place.
    assert page.inner_text("#checkpoint-rows") == "None yet."
    live_stack.manage("shell", "-c", (
        "from django.utils import timezone; from apps.runs.models import Attempt, Checkpoint\n"
        f"a = Attempt.objects.get(pk={ids['attempt']})\n"
        "for step in (50, 100):\n"
        "    Checkpoint.objects.create(run_id=a.run_id, attempt=a, step=step, file_name=f'{step}.pt', size=2048, sha256=f'{step:064x}',"
        " deleted_at=timezone.now() if step == 50 else None)\n"))
    page.wait_for_selector("#deleted-checkpoints", timeout=10_000)
    assert page.eval_on_selector_all("#checkpoint-rows tr", "rs => rs.map(r => r.dataset.step)") == ["100"]
    assert page.inner_text("#deleted-checkpoints summary") == "1 deleted by retention (step 50)"
    page.click("#deleted-checkpoints summary")
    page.wait_for_selector('#deleted-checkpoint-rows tr[data-step="50"]')
    assert page.evaluate("window.__sameDocument") is True
    assert page.inner_text("#run-status") == "running"
    assert page.inner_text("#run-cost-label") == "Cost so far"
    page.screenshot(path=str(ARTIFACTS / "tracking-run-page.png"), full_page=True)
    page.goto(f"{live_stack.url}/runs/{ids['compare'][0]}/")  # a finished run: its cost is final
    page.wait_for_function("() => document.getElementById('run-cost').textContent.trim() !== ''")
    assert page.inner_text("#run-status") == "succeeded" and page.inner_text("#run-cost-label") == "Cost"

    runs = ",".join(str(i) for i in ids["compare"])
    page.goto(f"{live_stack.url}/compare/?runs={runs}")
    page.wait_for_function("() => { const d = document.getElementById('parcoords');"
                           " return d && d.data && d.data[0].type === 'parcoords'; }")
    curves = page.evaluate("""() => [...document.querySelectorAll('.compare-chart')].map(d => [d.dataset.key,
                                 d.data.filter(t => t.fill !== 'tonexty' && t.showlegend !== false).length])""")
    assert dict(curves) == {"loss": 3, "val_accuracy": 3}
    # Three runs: only the differing rows at first (issue 29); unticked, the same ones too.
    assert page.is_checked("#only-diff") and page.locator("#diff-table tr.same").count() == 0
    page.uncheck("#only-diff")
    differs = page.eval_on_selector_all("#diff-table tr.differs", "rows => rows.map(r => r.dataset.name)")
    same = page.eval_on_selector_all("#diff-table tr.same", "rows => rows.map(r => r.dataset.name)")
    assert "lr" in differs and "optimizer" in differs and "batch_size" in same
    assert "diff=0" in page.url
    dims = page.evaluate("() => document.getElementById('parcoords').data[0].dimensions.map(d => d.label)")
    assert "lr" in dims and any(d.endswith("(final)") for d in dims)
    # Controls write their state into the URL, so it can be shared as is.
    page.fill("#smoothing", "0.6")
    page.dispatch_event("#smoothing", "input")
    assert "smooth=0.6" in page.url
    page.screenshot(path=str(ARTIFACTS / "tracking-compare.png"), full_page=True)

    # Metric columns (issue 29): last · best of chosen keys, a heading sorts, a condition filters.
    page.goto(f"{live_stack.url}/runs/?family=browser-sweep")
    page.fill("#f-cols", "val_accuracy, loss")
    page.fill("#f-mf", "val_accuracy >= 0.5")
    page.click("#run-filters button[type=submit]")
    page.wait_for_selector('th.metric-col[data-key="loss"]')
    page.click('th.metric-col[data-key="val_accuracy"] a')
    page.wait_for_selector('th.metric-col[data-key="val_accuracy"][aria-sort="descending"]')
    shown = page.eval_on_selector_all("#run-rows tr[data-run]", "rs => rs.map(r => +r.dataset.run)")
    assert shown and set(shown) < set(ids["compare"]), shown  # lr=0.02 ends below 0.5
    assert " · " in page.inner_text("#run-rows td.metric-cell")
    page.screenshot(path=str(ARTIFACTS / "runs-table-metric-columns.png"), full_page=True)

    page.goto(f"{live_stack.url}/runs/?family=browser-sweep&sort=-metric:val_accuracy")
    for pk in ids["compare"][:2]:
        page.check(f'input[name="runs"][value="{pk}"]')
    page.screenshot(path=str(ARTIFACTS / "tracking-runs-list.png"), full_page=True)
    page.click("#compare-selected")
    page.wait_for_url(lambda u: "/compare/" in u)
    assert f"runs={ids['compare'][0]}%2C{ids['compare'][1]}" in page.url or f"runs={ids['compare'][0]},{ids['compare'][1]}" in page.url


# A time as the run page's script writes every one of them, in the viewer's zone (Chromium here
# runs in en-US): "Nov 24, 2026, 11:20:09 PM".
LOCAL_TIME = r"^[A-Z][a-z]{2} \d{1,2}, \d{4}, \d{1,2}:\d{2}:\d{2} [AP]M$"


def test_run_page_words_what_it_knows(live_stack: LiveStack, page: Any) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    out = live_stack.manage("shell", "-c", (ROOT / "tests" / "tracking" / "run_page_setup.py").read_text())
    ids = json.loads(out.stdout.strip().splitlines()[-1])
    login(page, live_stack.url)

    def visit(run_id: int) -> None:
        page.goto(f"{live_stack.url}/runs/{run_id}/")
        page.wait_for_load_state("networkidle")  # a finished run's page reads its APIs once

    # Written like the demo history: the recorded total, and why nothing is charted.
    visit(ids["history"])
    assert page.inner_text("#run-energy") == "147 Wh (0.1466 kWh)"
    note = page.inner_text("#energy-note")
    assert "147 Wh (0.1466 kWh) is recorded, but no per-device samples exist" in note and "No energy" not in note
    assert page.is_hidden("#util-chart") and page.is_hidden("#energy-chart")
    assert page.inner_text("#progress-steps") == "–" and page.inner_text("#progress-eta") == "done"
    times = page.eval_on_selector_all("#run-page time", "ts => ts.map(t => t.textContent)")
    assert len(times) >= 3 and all(re.match(LOCAL_TIME, t) for t in times), times

    # A CPU run: no watts or utilization to draw, and joules on both the header and the axis.
    visit(ids["cpu"])
    page.wait_for_function("() => document.getElementById('energy-chart').data")
    assert page.inner_text("#util-chart .empty-note") == "Utilization and power are not reported for this run's devices."
    assert page.inner_text("#run-energy") == "477 J, estimated"
    title = page.evaluate("() => document.getElementById('energy-chart').layout.title.text")
    ticks = page.eval_on_selector_all("#energy-chart .ytick text", "ts => ts.map(t => t.textContent)")
    assert title == "Cumulative energy (J)" and "400" in ticks and not any("μ" in t or "m" in t for t in ticks), ticks
    page.screenshot(path=str(ARTIFACTS / "tracking-run-cpu.png"), full_page=True)

    visit(ids["cancelled"])
    assert page.inner_text("#run-status") == "cancelled" and page.inner_text("#progress-eta") == "–"
    assert page.inner_text("#progress-steps") == "200 of 1000" and page.inner_text("#run-cost").startswith("$")

    # A sweep leads to its trials and their comparison.
    visit(ids["sweep"])
    links = page.eval_on_selector_all("#trial-rows a", "as => as.map(a => a.getAttribute('href'))")
    assert {f"/runs/{t}/" for t in ids["trials"]} == set(links)
    assert page.get_attribute("#compare-trials", "href") == f"/compare/?runs={ids['trials'][0]},{ids['trials'][1]}"
    assert "its trials are the runs listed above" in page.inner_text("#attempts-note")
    page.screenshot(path=str(ARTIFACTS / "tracking-run-sweep.png"), full_page=True)
    page.click("#compare-trials")
    page.wait_for_url(lambda u: "/compare/" in u)


def test_run_page_folds_the_checkpoints_retention_deleted(live_stack: LiveStack, page: Any) -> None:
    """300 of 303 checkpoints deleted by retention: the 3 kept are rows, the rest one line that
    unfolds into theirs. Listed whole they made the demo runs' pages about 16,000 px tall."""
    ARTIFACTS.mkdir(exist_ok=True)
    out = live_stack.manage("shell", "-c", (ROOT / "tests" / "tracking" / "run_page_setup.py").read_text())
    ids = json.loads(out.stdout.strip().splitlines()[-1])
    login(page, live_stack.url)
    page.goto(f"{live_stack.url}/runs/{ids['checkpoints']}/")
    page.wait_for_load_state("networkidle")
    kept = page.eval_on_selector_all("#checkpoint-rows tr", "rs => rs.map(r => r.dataset.step)")
    assert kept == ["3010", "3020", "3030"]
    assert page.inner_text("#deleted-checkpoints summary") == "300 deleted by retention (steps 10–3000)"
    height = page.evaluate("document.documentElement.scrollHeight")
    assert height < 3500, f"the page is {height}px tall"
    page.screenshot(path=str(ARTIFACTS / "tracking-run-checkpoints.png"), full_page=True)

    page.click("#deleted-checkpoints summary")
    page.wait_for_function("() => document.querySelectorAll('#deleted-checkpoint-rows tr[data-step]').length === 300")
    assert page.evaluate("document.getElementById('deleted-checkpoints').open")
    first = page.eval_on_selector("#deleted-checkpoint-rows tr", "r => [...r.cells].map(c => c.textContent)")
    assert first == ["10", "1", "1.0 MB", f"{10:064x}"[:16] + "…", "loss=0.1", "removed"]
    assert page.evaluate("document.documentElement.scrollHeight") > height + 5000
    page.click("#deleted-checkpoints summary")  # folds away again
    assert page.evaluate("document.documentElement.scrollHeight") == height


def test_parallel_coordinates_start_on_the_metric_most_runs_logged(live_stack: LiveStack, page: Any) -> None:
    """Only the first run logged "acc": starting on it (the alphabetically first) drew one line
    of three. The chart starts on "loss", which all three logged, and says whose line is missing
    when a metric some runs lack is picked."""
    ARTIFACTS.mkdir(exist_ok=True)
    out = live_stack.manage("shell", "-c", (ROOT / "tests" / "tracking" / "run_page_setup.py").read_text())
    a, b, c = json.loads(out.stdout.strip().splitlines()[-1])["partial"]
    login(page, live_stack.url)
    page.goto(f"{live_stack.url}/compare/?runs={a},{b},{c}")
    page.wait_for_function("() => { const d = document.getElementById('parcoords');"
                           " return d && d.data && d.data[0].type === 'parcoords'; }")
    options = page.eval_on_selector_all("#pc-metric option", "os => os.map(o => [o.value, o.textContent, o.selected])")
    assert options == [["loss", "loss", True], ["acc", "acc (1 of 3 runs)", False]]
    final = page.evaluate("() => { const d = document.getElementById('parcoords').data[0].dimensions.at(-1);"
                          " return [d.label, d.values.filter(Number.isFinite).length]; }")
    assert final == ["loss (final)", 3], "a value on the metric's axis for each run: three lines"
    assert page.is_hidden("#parcoords-note")

    page.select_option("#pc-metric", "acc")
    assert "metric=acc" in page.url
    note = page.inner_text("#parcoords-note")
    assert note == f"No line for #{b} page partial 1, #{c} page partial 2: they logged no acc."
    page.screenshot(path=str(ARTIFACTS / "tracking-compare-partial.png"), full_page=True)


def setup_list(live_stack: Any) -> dict[str, Any]:
    out = live_stack.manage("shell", "-c", (ROOT / "tests" / "tracking" / "list_setup.py").read_text())
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def row_statuses(page: Any) -> dict[int, str]:
    rows = page.eval_on_selector_all("#run-rows tr[data-run]", "rs => rs.map(r => [r.dataset.run, r.dataset.status])")
    return {int(pk): status for pk, status in rows}


UPDATED = r"^updated \d{2}:\d{2}:\d{2}$"


def test_runs_list_follows_its_runs_in_place(live_stack: LiveStack, page: Any) -> None:
    """The audit's runs list showed a run "running" at 10% long after it had succeeded: now the
    rows follow the runs without a reload, keeping the filter, a ticked run and the scroll."""
    ids = setup_list(live_stack)
    running, queued = ids["running"], ids["queued"]
    token = live_stack.token("alice")
    login(page, live_stack.url)
    page.set_viewport_size({"width": 1360, "height": 420})  # short, so the page scrolls
    page.goto(f"{live_stack.url}/runs/?family={ids['family']}")
    assert row_statuses(page) == {running: "running", queued: "queued"}
    assert re.match(UPDATED, page.inner_text("#runs-updated"))
    first_stamp = page.get_attribute("#runs-updated", "data-updated-at")
    page.check(f'input[name="runs"][value="{running}"]')
    assert page.inner_text("#selected-count") == "1 selected (pick at least 2)"
    page.evaluate("window.scrollTo(0, 120)")
    scrolled = page.evaluate("window.scrollY")
    assert scrolled > 0
    page.evaluate("window.__sameDocument = true")

    # The runs move on in the database, and a run is submitted elsewhere in the same family (it
    # stays queued: no worker runs in this stack), and one in another family, which the filter hides.
    live_stack.query("UPDATE runs_run SET status = 'succeeded', steps_done = 100 WHERE id = ?", (running,))
    live_stack.query("UPDATE runs_run SET status = 'running' WHERE id = ?", (queued,))
    tags = {"task": "digits", "dataset": "sklearn-digits", "candidate": "baseline", "family": ids["family"]}
    body: dict[str, Any] = {"project": "vision/digits", "template": "digits-classifier", "params": {}, "tags": tags}
    new = live_stack.api("POST", "/api/v1/runs/", body, token=token, expect=201)["id"]
    elsewhere = {**body, "tags": {**tags, "family": "elsewhere"}}
    other = live_stack.api("POST", "/api/v1/runs/", elsewhere, token=token, expect=201)["id"]

    page.wait_for_function(
        """([done, fresh]) => { const r = document.querySelector(`#run-rows tr[data-run="${done}"]`);
                                return r && r.dataset.status === 'succeeded'
                                  && document.querySelector(`#run-rows tr[data-run="${fresh}"]`); }""",
        arg=[running, new], timeout=20_000)
    statuses = row_statuses(page)
    assert statuses[running] == "succeeded" and statuses[queued] == "running" and statuses[new] == "queued" and other not in statuses
    assert page.evaluate("window.__sameDocument") is True, "the list must refresh in place, not reload the page"
    assert page.is_checked(f'input[name="runs"][value="{running}"]'), "a ticked run stays ticked"
    assert not page.is_checked(f'input[name="runs"][value="{queued}"]')
    assert page.evaluate("window.scrollY") == scrolled
    assert page.inner_text("#runs-found") == "3 found"
    assert re.match(UPDATED, page.inner_text("#runs-updated"))
    assert page.get_attribute("#runs-updated", "data-updated-at") != first_stamp
    # The finished run's progress bar is full now (it read 10% before).
    assert "width: 100%" in (page.get_attribute(f'#run-rows tr[data-run="{running}"] .progress span', "style") or "")
    # And the ticks still go to the comparison.
    page.check(f'input[name="runs"][value="{new}"]')
    page.screenshot(path=str(ARTIFACTS / "tracking-runs-list-live.png"), full_page=True)
    page.click("#compare-selected")
    page.wait_for_url(lambda u: "/compare/" in u)
    assert re.search(rf"runs=({running}(%2C|,){new}|{new}(%2C|,){running})", page.url), page.url


def test_compare_page_draws_every_run_in_one_colour(live_stack: LiveStack, page: Any) -> None:
    """A metric logged once is drawn; the wide summary scrolls in its box with names on one
    line; the parallel coordinates use the runs' colours; an unnamed run is "#41" as elsewhere."""
    ids = setup_list(live_stack)
    named, unnamed = ids["compare"]
    login(page, live_stack.url)
    page.goto(f"{live_stack.url}/compare/?runs={named},{unnamed}")
    page.wait_for_function("() => { const d = document.getElementById('parcoords');"
                           " return d && d.data && d.data[0].type === 'parcoords'; }")

    legend = page.eval_on_selector_all("#legend > span", "ss => ss.map(s => [s.querySelector('a').textContent,"
                                                          " s.querySelector('.swatch').getAttribute('style')])")
    labels = [label for label, _ in legend]
    assert labels == [f"#{named} a run with a rather long descriptive name", f"#{unnamed}"]
    colors = [re.search(r"#[0-9a-f]{6}", style).group(0) for _, style in legend]  # type: ignore[union-attr]
    assert len(set(colors)) == 2

    # Every chart draws each run in its legend colour; a series of one point shows as a marker.
    charts = page.evaluate("""() => [...document.querySelectorAll('.compare-chart')].map(d => [d.dataset.key,
        d.data.filter(t => t.showlegend !== false).map(t => [t.name, t.line.color, t.mode, t.y.filter(y => y !== null).length])])""")
    by_key = dict(charts)
    for key, traces in by_key.items():
        assert [t[0] for t in traces] == labels and [t[1] for t in traces] == colors, key
    assert [(t[2], t[3]) for t in by_key["val_accuracy"]] == [("lines+markers", 1)] * 2
    assert all(t[2] == "lines" for t in by_key["loss"])

    # The parallel coordinates: each run's line in the same colour as everywhere else.
    line_colors = page.evaluate("""() => { const l = document.getElementById('parcoords').data[0].line;
        return l.color.map(v => { const at = (v - l.cmin) / (l.cmax - l.cmin);
                                  return l.colorscale.find(([p]) => p > at)[1]; }); }""")
    assert line_colors == colors
    assert not page.evaluate("() => document.getElementById('parcoords').data[0].line.showscale")

    # The summary: 23 columns scroll inside the box; names stay on one line; the run column stays.
    box = page.locator("#summary-table").locator("xpath=..")
    assert box.evaluate("b => b.scrollWidth > b.clientWidth + 100 && getComputedStyle(b).overflowX === 'auto'")
    heights = page.eval_on_selector_all("#summary-table tbody td:first-child", "tds => tds.map(td => td.getBoundingClientRect().height)")
    line = page.evaluate("() => parseFloat(getComputedStyle(document.querySelector('#summary-table td')).lineHeight)")
    assert all(h < 2 * line + 16 for h in heights), (heights, line)
    assert page.eval_on_selector_all("#summary-table tbody td:first-child a", "as => as.map(a => a.textContent)") == labels
    before = page.evaluate("() => document.querySelector('#summary-table tbody td:first-child').getBoundingClientRect().left")
    box.evaluate("b => { b.scrollLeft = 400; }")
    after = page.evaluate("() => document.querySelector('#summary-table tbody td:first-child').getBoundingClientRect().left")
    assert after == before, "the run column stays in view while the metrics scroll"
    page.screenshot(path=str(ARTIFACTS / "tracking-compare-colours.png"), full_page=True)
