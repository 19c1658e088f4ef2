"""The comparison page in Chromium: it opens on a metric that differs with only the differing
rows shown, its summary scrolls sideways to the last column, cost and energy show per run, and
a saved view reopens at its link with its settings, for a teammate too and for no other team."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.fixtures.browser import login, screenshot

pytestmark = [pytest.mark.browser, pytest.mark.live]

# Run inside the live stack (manage.py shell -c): four finished runs of 45 parameters of which
# only lr differs; every run logs "epoch" = 5 (flat, and first by coverage and name) and twelve
# metrics that differ, so the summary is wider than the screen. A viewer "vera" in vision.
SETUP = r'''
import json
from datetime import timedelta
from django.contrib.auth import get_user_model
from django.utils import timezone
from apps.jobtemplates.models import JobTemplate
from apps.nodes.models import Node, NodePool
from apps.runs.models import Assignment, Attempt, Run, RunStatus
from apps.tenants.models import Project, Role
from apps.tenants.services import membership_set
from apps.tracking.services import metric_points_store

project = Project.objects.get(team__slug="vision", slug="digits")
template = JobTemplate.objects.exclude(kind="sweep").order_by("slug", "-version").first()
pool = NodePool.objects.order_by("id").first()
node = Node.objects.create(pool=pool, hostname="cmp-node", agent_uid="cmp-node")
end = timezone.now() - timedelta(hours=1)
ids = []
for i, lr in enumerate((0.1, 0.03, 0.01, 0.003)):
    params = {f"p{k:02d}": k for k in range(44)}
    params["lr"] = lr
    run = Run.objects.create(project=project, template=template, pool=pool, entrypoint="python -c pass", name=f"cmp lr {lr}",
                             status=RunStatus.SUCCEEDED, started_at=end - timedelta(minutes=30), finished_at=end, params=params,
                             total_steps=100, steps_done=100, energy_j=3600.0 * (i + 1))
    attempt = Attempt.objects.create(run=run, number=1, status="succeeded", started_at=end - timedelta(minutes=10 * (i + 1)),
                                     ended_at=end, energy_j=3600.0 * (i + 1))
    Assignment.objects.create(attempt=attempt, node=node, devices=[0], state="exited", started_at=attempt.started_at)
    rows = [("epoch", s, 5.0, 0, 1_700_000_000.0 + s) for s in range(0, 100, 10)]
    for k in range(12):
        rows += [(f"metric_{k:02d}_long_name", s, (k + 1) * lr * (1 + s / 100), 0, 1_700_000_000.0 + s) for s in range(0, 100, 10)]
    rows += [("val_loss", s, lr * 10 + 1 / (s + 1), 0, 1_700_000_000.0 + s) for s in range(0, 100, 10)]
    metric_points_store(run_id=run.pk, attempt=1, rows=rows)
    ids.append(run.pk)
vera = get_user_model().objects.create_user("vera", "vera@example.com", "vera-viewer-123456")
membership_set(team=project.team, user=vera, role=Role.VIEWER)
print(json.dumps({"runs": ids}))
'''


def test_compare_defaults_and_a_saved_view(live_stack: Any, browser_page: Any) -> None:
    page = browser_page
    out = live_stack.manage("shell", "-c", SETUP)
    ids = json.loads(out.stdout.strip().splitlines()[-1])["runs"]
    runs = ",".join(map(str, ids))
    login(page, live_stack, "alice")
    page.goto(f"{live_stack.url}/compare/?runs={runs}")
    page.wait_for_function("() => { const d = document.getElementById('parcoords');"
                           " return d && d.data && d.data[0].type === 'parcoords'; }", timeout=30_000)

    # A metric that differs (not the flat "epoch"), and only the differing rows of 45 parameters.
    assert page.input_value("#pc-metric") == "metric_00_long_name"
    assert "epoch (same for all)" in page.inner_text("#pc-metric")
    axis = page.evaluate("() => document.getElementById('parcoords').data[0].dimensions.at(-1)")
    assert axis["label"] == "metric_00_long_name (final)" and len(set(axis["values"])) == 4
    assert page.is_checked("#only-diff")
    names = page.eval_on_selector_all("#diff-table tbody tr", "rs => rs.map(r => r.dataset.name)")
    assert "lr" in names and "p00" not in names and len(names) < 10, names
    # The summary is wider than its card and scrolls to its last column; the run column stays.
    box = page.evaluate("""() => { const t = document.getElementById('summary-table'); const w = t.parentElement;
        w.scrollLeft = w.scrollWidth; const last = t.tHead.rows[0].cells; const cell = last[last.length - 1].getBoundingClientRect();
        const wr = w.getBoundingClientRect(); const first = t.tBodies[0].rows[0].cells[0].getBoundingClientRect();
        return {wide: w.scrollWidth > w.clientWidth + 100, lastIn: cell.right <= wr.right + 1 && cell.left >= wr.left,
                firstIn: first.left >= wr.left - 1 && first.left <= wr.left + 20,
                pageWide: document.documentElement.scrollWidth > window.innerWidth}; }""")
    assert box == {"wide": True, "lastIn": True, "firstIn": True, "pageWide": False}, box
    page.evaluate("() => { document.getElementById('summary-table').parentElement.scrollLeft = 0; }")
    # Cost and energy per run, with energy per step.
    cells = page.eval_on_selector_all("#energy-table tbody tr", "rs => rs.map(r => [...r.cells].map(c => c.textContent.trim()))")
    costs = [float(c[1].lstrip("$")) for c in cells]
    assert all(c[1].startswith("$") for c in cells) and 0 < costs[0] < costs[1] < costs[2] < costs[3], cells
    assert all(c[2] not in ("", "–") and c[3] not in ("", "–") for c in cells), cells
    screenshot(page, "compare-defaults")

    # Change the view, save it, and open its link afresh: the settings come back.
    page.uncheck("#only-diff")
    page.select_option("#pc-metric", "val_loss")
    page.fill("#view-name", "lr sweep, all rows")
    page.click("#save-view button[type=submit]")
    link = page.wait_for_selector("#saved-view-link", timeout=15_000)
    url = link.get_attribute("href")
    assert url.startswith("/compare/v/") and page.locator("#saved-views li", has_text="lr sweep, all rows").count() == 1
    page.fill("#view-name", "lr sweep, all rows")
    page.click("#save-view button[type=submit]")
    page.wait_for_function("() => document.getElementById('save-view-result').textContent.startsWith('Not saved')")
    assert "already has a comparison named" in page.inner_text("#save-view-result")

    page.goto(live_stack.url + url)
    page.wait_for_function("() => { const d = document.getElementById('parcoords'); return d && d.data; }", timeout=30_000)
    assert page.input_value("#pc-metric") == "val_loss" and not page.is_checked("#only-diff")
    assert page.locator("#diff-table tbody tr").count() > 40
    assert "lr sweep, all rows" in page.inner_text("h1")
    screenshot(page, "compare-saved-view")

    # A teammate (a viewer) opens it; another team gets a 404.
    view_id = int(url.rstrip("/").rsplit("/", 1)[1])
    vera = live_stack.browser("vera", "vera-viewer-123456")
    assert vera.open(live_stack.url + url, timeout=30).status == 200
    status, _ = live_stack.request("GET", f"/api/v1/compare/views/{view_id}/", token=live_stack.token("bob"))
    assert status == 404
