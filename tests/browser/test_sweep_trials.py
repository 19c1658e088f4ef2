"""A sweep's page in Chromium: its trials sort by any column, and a parallel-coordinates chart
runs from their parameters to the objective with the best trial's row, badge and line marked."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.fixtures.browser import login, screenshot

pytestmark = [pytest.mark.browser, pytest.mark.live]

# Run inside the live stack (manage.py shell -c): a finished grid sweep over lr and hidden whose
# objective is val_loss, lower better; six trials, the fifth the best; one logged no val_loss.
SETUP = r'''
import json
from datetime import timedelta
from django.utils import timezone
from apps.jobtemplates.models import JobTemplate
from apps.nodes.models import NodePool
from apps.runs.models import Run, RunStatus
from apps.tenants.models import Project
from apps.tracking.services import metric_points_store

project = Project.objects.get(team__slug="vision", slug="digits")
sweep_template = JobTemplate.objects.filter(kind="sweep").order_by("-version").first()
template = JobTemplate.objects.exclude(kind="sweep").order_by("slug", "-version").first()
pool = NodePool.objects.order_by("id").first()
end = timezone.now() - timedelta(hours=1)
space = {"lr": [0.1, 0.01, 0.001], "hidden": [64, 128]}
parent = Run.objects.create(project=project, template=sweep_template, pool=pool, entrypoint="trainyard:sweep-controller",
                            name="lr x hidden", status=RunStatus.SUCCEEDED, nodes=1, devices_per_node=0, total_steps=6, steps_done=6,
                            status_reason="6 of 6 runs succeeded", started_at=end - timedelta(hours=1), finished_at=end,
                            params={"template": template.slug, "strategy": "grid", "space": space, "params": {"steps": 50},
                                    "objective": {"metric": "val_loss", "goal": "min"}})
losses = [0.91, 0.62, 0.40, 0.33, 0.21, None]
trials = []
i = 0
for lr in space["lr"]:
    for hidden in space["hidden"]:
        trial = Run.objects.create(project=project, template=template, pool=pool, entrypoint="python -c pass", parent=parent,
                                   name=f"lr x hidden #{i + 1}", status=RunStatus.SUCCEEDED,
                                   params={"lr": lr, "hidden": hidden, "steps": 50}, started_at=end - timedelta(minutes=30),
                                   finished_at=end)
        if losses[i] is not None:
            metric_points_store(run_id=trial.pk, attempt=1,
                                rows=[("val_loss", s, losses[i] + 1 / (s + 1), 0, 1_700_000_000.0 + s) for s in range(49)]
                                + [("val_loss", 49, losses[i], 0, 1_700_000_049.0)])
        trials.append(trial.pk)
        i += 1
print(json.dumps({"sweep": parent.pk, "trials": trials}))
'''


def test_sweep_trials_table_and_parallel_coordinates(live_stack: Any, browser_page: Any) -> None:
    page = browser_page
    out = live_stack.manage("shell", "-c", SETUP)
    ids = json.loads(out.stdout.strip().splitlines()[-1])
    trials = ids["trials"]
    login(page, live_stack, "alice")
    page.goto(f"{live_stack.url}/runs/{ids['sweep']}/")
    page.wait_for_function("() => { const d = document.getElementById('sweep-parcoords');"
                           " return d && d.data && d.data[0].type === 'parcoords'; }", timeout=30_000)

    # The best trial: its row highlighted with a badge, named by the objective.
    assert page.inner_text("#sweep-objective") == "objective: val_loss, lower is better"
    best = page.eval_on_selector_all("#trial-rows tr.best-trial", "rs => rs.map(r => Number(r.dataset.run))")
    assert best == [trials[4]]
    assert page.locator("#trial-rows tr.best-trial .best-badge").inner_text() == "best"
    # The chart: lr, hidden, then the objective; the best trial's line in its own colour, drawn last.
    chart = page.evaluate("""() => { const t = document.getElementById('sweep-parcoords').data[0];
        return {labels: t.dimensions.map(d => d.label), colors: t.line.color, last: t.dimensions.at(-1).values,
                range: t.dimensions.at(-1).range}; }""")
    assert chart["labels"] == ["hidden", "lr (log)", "val_loss (lower is better)"]
    assert chart["colors"] == [0, 0, 0, 0, 0, 1] and chart["last"][-1] == pytest.approx(0.21)
    assert chart["range"] == [pytest.approx(0.91), pytest.approx(0.21)], "lower is better: the axis runs upwards to the best"
    assert page.is_visible("#sweep-parcoords-note")

    # Sorting: by the objective (no value last), then the other way; by a parameter.
    headers = page.locator("#trial-table thead th button")
    assert headers.count() == 5
    page.click("#trial-table thead th:last-child button")
    order = page.eval_on_selector_all("#trial-rows tr", "rs => rs.map(r => Number(r.dataset.run))")
    assert order == [trials[4], trials[3], trials[2], trials[1], trials[0], trials[5]]
    assert page.get_attribute("#trial-table thead th:last-child", "aria-sort") == "ascending"
    page.click("#trial-table thead th:last-child button")
    order = page.eval_on_selector_all("#trial-rows tr", "rs => rs.map(r => Number(r.dataset.run))")
    assert order[:5] == [trials[0], trials[1], trials[2], trials[3], trials[4]] and order[-1] == trials[5]
    page.click("#trial-table thead th:last-child button")  # back to best first for the picture
    screenshot(page, "sweep-trials")
