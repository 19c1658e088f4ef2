"""Issue 29 on the run page in Chromium: a run caught while it starts (the step it waits for,
then its first metric, the attempts axis moving and the Lineage card filling without a
reload); smoothing, log scale and one zoom for all metric charts, kept in the URL; the log
searched on the server and downloaded. Django's live_server (no Celery, Redis or agent: the
agent's reports are made through the services its protocol calls); screenshots go to
test-artifacts/."""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings
from django.test import Client
from django.utils import timezone

from apps.runs.models import Assignment, Attempt, LogChunk, Run, RunStatus
from apps.runs.services.assignments import assignment_claim
from apps.runs.services.lifecycle import assignment_started
from apps.runs.services.reports import EnergyReading, attempt_energy_record, attempt_progress_record
from apps.tracking.services import metric_points_store
from tests.fixtures.browser import VIEWPORT, page_in_new_context, screenshot
from tests.tracking.conftest import make_node, make_run

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _placed(cast: Any, **fields: Any) -> tuple[Run, Attempt, Assignment]:
    run = make_run(cast.digits, status=RunStatus.SCHEDULED, name="starting-run", total_steps=300, **fields)
    node, _ = make_node()
    attempt = Attempt.objects.create(run=run, number=1)
    return run, attempt, Assignment.objects.create(attempt=attempt, node=node, devices=[0])


def _attempt_bar_ms(page: Any) -> float:
    """How long the attempts chart draws the running attempt (its bar ends at now; the axis
    spans at least a minute, and moves with the bar past that)."""
    return float(page.evaluate("() => document.getElementById('attempts-chart').data[0].x[0]"))


def test_a_starting_run_says_which_step_it_waits_for(cast: Any, live_server: Any, as_alice: Any) -> None:
    page = as_alice
    run, attempt, assignment = _placed(cast)
    assert assignment_claim(assignment=assignment, hostname=assignment.node.hostname)
    assignment_started(attempt_id=attempt.pk, node_id=assignment.node_id, node_rank=0)
    page.goto(f"{live_server.url}/runs/{run.pk}/")
    text = page.locator("#starting-text")
    page.wait_for_function("() => /^Starting: process started \\d+ s ago, waiting for the first metric\\.$/"
                           ".test(document.getElementById('starting-text').textContent)")
    steps = page.locator("#start-steps li")
    assert steps.count() == 4
    assert [steps.nth(i).get_attribute("class") for i in range(4)] == ["start-step done"] * 3 + ["start-step waiting"]
    assert assignment.node.hostname in steps.nth(0).inner_text()
    # The attempts timeline: the running attempt's bar ends at now, re-drawn on every poll.
    page.wait_for_function("() => document.getElementById('attempts-chart').classList.contains('js-plotly-plot')")
    first_end = _attempt_bar_ms(page)
    ticks = page.eval_on_selector_all("#attempts-chart .xtick text", "els => els.map((e) => e.textContent)")
    # Seconds at the finest, never milliseconds, and no two ticks alike.
    assert ticks and not any("." in t for t in ticks) and len(set(ticks)) == len(ticks), ticks
    screenshot(page, "run-page-starting")
    page.wait_for_timeout(4500)
    assert _attempt_bar_ms(page) > first_end + 2000

    # The job's first report: the steps are done, the page says how long start-up took, and
    # the lineage it reported fills its card without a reload.
    attempt.refresh_from_db()
    attempt_progress_record(attempt=attempt, steps_done=5, lineage={"git_commit": "feedc0de"})
    metric_points_store(run_id=run.pk, attempt=1, rows=[("loss", 5, 2.0, 0, timezone.now().timestamp())])
    page.wait_for_function("() => document.getElementById('starting-text').textContent.startsWith('Attempt 1 started: first metric')")
    assert not (page.get_attribute("#run-starting", "class") or "").count("is-starting")
    assert steps.nth(3).get_attribute("class") == "start-step done"
    assert text.inner_text().endswith("after the process started.")
    page.wait_for_function("() => document.getElementById('lineage').textContent.includes('feedc0de')", timeout=30_000)
    assert page.evaluate("() => performance.getEntriesByType('navigation').length") == 1


def _charted(cast: Any) -> Run:
    run = make_run(cast.digits, status=RunStatus.SUCCEEDED, name="charts-run", total_steps=400, steps_done=400)
    node, _ = make_node()
    end = timezone.now() - timedelta(minutes=5)
    start = end - timedelta(minutes=20)
    attempt = Attempt.objects.create(run=run, number=1, status="succeeded", started_at=start, ended_at=end)
    Attempt.objects.filter(pk=attempt.pk).update(created_at=start - timedelta(seconds=4))
    Assignment.objects.create(attempt=attempt, node=node, devices=[0], state="exited", claimed_at=start - timedelta(seconds=3),
                              started_at=start)
    t0 = start.timestamp()
    rows = []
    for step in range(400):
        noise = math.sin(step * 1.7) * 0.35
        rows.append(("loss", step, 5.0 * math.exp(-step / 60) * (1 + noise) + 0.01, 0, t0 + step * 3))
        rows.append(("val_accuracy", step, min(0.99, 1 - math.exp(-step / 80) + noise * 0.05), 0, t0 + step * 3))
    metric_points_store(run_id=run.pk, attempt=1, rows=rows)
    attempt_energy_record(attempt=attempt, node_id=node.pk, readings=[
        EnergyReading(device_index=0, at=start + timedelta(minutes=i), energy_j=36_000.0 * i * 10, power_w=600.0,
                      utilization=90.0, estimated=False) for i in range(21)])
    return run


def test_charts_smooth_use_a_log_scale_and_zoom_together(cast: Any, live_server: Any, as_alice: Any) -> None:
    page = as_alice
    run = _charted(cast)
    page.goto(f"{live_server.url}/runs/{run.pk}/")
    page.wait_for_function("() => document.querySelectorAll('#metric-charts .js-plotly-plot').length === 2")
    page.evaluate("() => { const s = document.getElementById('smoothing'); s.value = '0.8'; s.dispatchEvent(new Event('input')); }")
    page.check("#log-y")
    page.wait_for_function("() => { const d = document.querySelector('.metric-chart[data-key=\"loss\"]');"
                           " return d._fullLayout.yaxis.type === 'log' && d.data.some((t) => t.name.includes('smoothed')); }")
    assert "smooth=0.8" in page.url and "logy=1" in page.url
    assert page.inner_text("#smoothing-value") == "0.80"
    # The raw line stays, faint, under the smoothed one.
    opacities = page.evaluate("() => document.querySelector('.metric-chart[data-key=\"loss\"]').data.map((t) => [t.name, t.opacity])")
    assert ["loss (raw)", 0.3] in opacities and any(name.startswith("loss (smoothed") for name, _ in opacities)
    # The energy charts' labels fit: Plotly widened the margins where a label needed it.
    page.wait_for_function("() => document.getElementById('energy-chart').classList.contains('js-plotly-plot')")
    # Utilization is a percentage as agents send it, drawn as such (90 %, as the table says).
    assert page.evaluate("() => document.getElementById('util-chart').data[0].y[0]") == 90.0
    assert page.inner_text("#energy-devices tbody tr td:nth-child(4)") == "90%"
    screenshot(page, "run-page-charts")

    # A zoom on one chart applies to the other, and the URL keeps it.
    page.evaluate("() => Plotly.relayout(document.querySelector('.metric-chart[data-key=\"loss\"]'), {'xaxis.range': [100, 200]})")
    page.wait_for_function("() => { const r = document.querySelector('.metric-chart[data-key=\"val_accuracy\"]')._fullLayout.xaxis.range;"
                           " return Math.round(r[0]) === 100 && Math.round(r[1]) === 200; }")
    assert "xmin=100&xmax=200" in page.url
    assert page.is_visible("#reset-zoom")
    # Reloaded from that URL: the same view.
    page.goto(page.url)
    page.wait_for_function("() => document.querySelectorAll('#metric-charts .js-plotly-plot').length === 2")
    assert page.is_checked("#log-y") and page.input_value("#smoothing") == "0.8"
    page.wait_for_function("() => { const r = document.querySelector('.metric-chart[data-key=\"loss\"]')._fullLayout.xaxis.range;"
                           " return Math.round(r[0]) === 100 && Math.round(r[1]) === 200; }")
    page.click("#reset-zoom")
    page.wait_for_function("() => document.querySelector('.metric-chart[data-key=\"val_accuracy\"]')._fullLayout.xaxis.range[1] > 390")
    assert "xmin=" not in page.url


def test_the_log_is_searched_on_the_server_and_downloaded(cast: Any, live_server: Any, as_alice: Any) -> None:
    page = as_alice
    run = make_run(cast.digits, status=RunStatus.SUCCEEDED, name="log-run")
    attempt = Attempt.objects.create(run=run, number=1, status="succeeded", started_at=timezone.now(), ended_at=timezone.now())
    lines = [f"step {i} loss={1 / (i + 1):.4f}" if i % 50 else f"WARNING: data loader slow at step {i}" for i in range(600)]
    LogChunk.objects.bulk_create([LogChunk(run=run, attempt=attempt, seq=n, text="\n".join(lines[n * 100:(n + 1) * 100]) + "\n")
                                  for n in range(6)])
    page.goto(f"{live_server.url}/runs/{run.pk}/")
    page.wait_for_function("() => document.getElementById('log-tail').textContent.includes('step 599')")
    page.fill("#log-search", "warning: data")
    page.wait_for_function("() => document.getElementById('log-search-status').textContent === '12 matching lines'")
    assert page.is_hidden("#log-tail") and page.is_visible("#log-matches")
    found = page.inner_text("#log-matches").strip().splitlines()
    assert found == [f"WARNING: data loader slow at step {i}" for i in range(0, 600, 50)]
    assert page.locator("#log-matches mark").count() == 12 and page.locator("#log-matches mark").first.inner_text() == "WARNING: data"
    page.locator("#log-search").scroll_into_view_if_needed()
    screenshot(page, "run-page-log-search")

    # A query past the limit (typed past the box's maxlength by a script): the server's 400, in words.
    page.evaluate("() => { const s = document.getElementById('log-search'); s.value = 'x'.repeat(201);"
                  " s.form.requestSubmit(); }")
    page.wait_for_function("() => document.getElementById('log-search-status').textContent.includes('limit is 200')")
    assert page.inner_text("#log-search-status") == "q: 201 characters; the limit is 200"
    page.fill("#log-search", "")
    page.wait_for_function("() => !document.getElementById('log-tail').hidden")

    with page.expect_download() as info:
        page.click("#log-download")
    download = info.value
    assert download.suggested_filename == f"run-{run.pk}-log.txt"
    with open(download.path(), encoding="utf-8") as f:
        assert f.read() == "".join("\n".join(lines[n * 100:(n + 1) * 100]) + "\n" for n in range(6))


def test_on_a_phone_no_toolbar_covers_a_chart_title(cast: Any, live_server: Any, chromium: Any) -> None:
    """At 390 px Plotly's toolbar covered the charts' titles (issue 29): there is none on a phone,
    and every title is whole on the screen; on a desktop the toolbar is still there on hover."""
    run = _charted(cast)
    client = Client()
    client.force_login(cast.alice)
    cookie = client.cookies[settings.SESSION_COOKIE_NAME].value
    with page_in_new_context(chromium, viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True) as page:
        page.context.add_cookies([{"name": settings.SESSION_COOKIE_NAME, "value": cookie, "url": live_server.url}])
        page.goto(f"{live_server.url}/runs/{run.pk}/")
        page.wait_for_function("() => document.querySelectorAll('#metric-charts .js-plotly-plot').length === 2")
        page.locator('.metric-chart[data-key="loss"]').tap()
        assert page.locator(".modebar-btn").count() == 0
        titles = page.evaluate("() => [...document.querySelectorAll('#metric-charts .gtitle')].map((t) => {"
                               " const b = t.getBoundingClientRect(); return [b.left, b.right]; })")
        assert len(titles) == 2 and all(0 <= left and right <= 390 for left, right in titles), titles
        page.locator("#metric-charts").scroll_into_view_if_needed()
        screenshot(page, "phone-run-charts")
    with page_in_new_context(chromium, viewport=VIEWPORT) as page:
        page.context.add_cookies([{"name": settings.SESSION_COOKIE_NAME, "value": cookie, "url": live_server.url}])
        page.goto(f"{live_server.url}/runs/{run.pk}/")
        page.wait_for_function("() => document.querySelectorAll('#metric-charts .js-plotly-plot').length === 2")
        page.hover('.metric-chart[data-key="loss"]')
        assert page.locator('.metric-chart[data-key="loss"] .modebar-btn').count() > 0
