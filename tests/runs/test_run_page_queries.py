"""The run page with every card present (environment, lineage, checkpoints, artifacts, model
versions, log notes, energy, history) reads the same number of queries whatever the amount of
data behind it: more attempts' records, checkpoints, artifacts, energy samples, log lines and
metric points add rows, never a query per row. Query counts only, never timings (the page's
time is measured by hand and by bench/load.py)."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from apps.artifacts.models import Artifact
from apps.registry.models import ModelVersion
from apps.runs.models import Checkpoint, EnergySample, Run
from tests.runs.run_page_world import full_run

pytestmark = pytest.mark.django_db

# Session and user (2), the run with its attempts and assignments (3), what it has on record (1),
# history, environments (2), energy (3), checkpoints card (2), log notes, artifacts card,
# register card (6), start-up, navigation and the page's role checks (5): 26, with room for one more.
MAX_QUERIES = 27
CARDS = ('id="lineage"', 'id="environment-rows"', 'class="package-set"', 'id="checkpoint-rows"', 'id="deleted-checkpoints"',
         'id="run-artifacts"', 'class="artifact-table"', 'id="register-model-version"', 'id="reg-source"', 'id="log-notes"',
         'id="energy-devices"', 'id="history-rows"', 'id="attempt-rows"')


def _page(client: Client, run: Run) -> tuple[int, str]:
    client.get(f"/runs/{run.pk}/")  # previews cached, templates compiled: the count of a repeated view
    with CaptureQueriesContext(connection) as ctx:
        response = client.get(f"/runs/{run.pk}/")
    assert response.status_code == 200
    return len(ctx.captured_queries), response.content.decode()


def test_run_page_queries_do_not_grow_with_its_data(cast: Any, settings: Any, tmp_path: Any) -> None:
    settings.MEDIA_ROOT = tmp_path / "media"
    client = Client()
    client.force_login(cast.alice)
    small = full_run(cast, scale=1)
    few, page = _page(client, small)
    for card in CARDS:
        assert card in page, f"{card} missing from the run page"
    assert 'id="energy-devices"' in page and "world-0" in page and "world-1" in page
    assert "pkg-0299==1.299.0" in page and "shard-19" in page

    big = full_run(cast, scale=3, attempts=3)
    assert Checkpoint.objects.filter(run=big).count() > 3 * Checkpoint.objects.filter(run=small).count() - 3
    assert Artifact.objects.filter(run=big).count() == 3 * Artifact.objects.filter(run=small).count()
    assert ModelVersion.objects.filter(source_run=big).count() == 3
    assert EnergySample.objects.filter(attempt__run=big).count() > 4 * EnergySample.objects.filter(attempt__run=small).count()
    many, page = _page(client, big)
    for card in CARDS:
        assert card in page, f"{card} missing from the run page"
    assert many == few, f"{few} queries for the small run, {many} for the big one (a query per row?)"
    assert few <= MAX_QUERIES, f"the run page made {few} queries (at most {MAX_QUERIES})"


def test_device_energy_figures_are_the_samples(cast: Any, settings: Any, tmp_path: Any) -> None:
    """The per-device figures the database sums up: each attempt's last cumulative reading added
    over attempts, the mean and the latest utilization and power."""
    from apps.tracking.energy_selectors import run_energy_figures

    settings.MEDIA_ROOT = tmp_path / "media"
    run = full_run(cast, scale=1)
    sample = EnergySample.objects.filter(attempt__run=run, node__hostname="world-0").order_by("-at", "-id").first()
    assert sample is not None
    EnergySample.objects.filter(pk=sample.pk).update(utilization=0.5, power_w=100.0)
    figures = run_energy_figures(run=run)
    device = next(d for d in figures.devices if d.node == "world-0")
    samples = list(EnergySample.objects.filter(attempt__run=run, node__hostname="world-0"))
    assert device.energy_j == pytest.approx(sum(max(s.energy_j for s in samples if s.attempt_id == a)
                                                for a in {s.attempt_id for s in samples}))
    assert device.mean_utilization == pytest.approx(sum(s.utilization or 0 for s in samples) / len(samples))
    assert device.mean_power_w == pytest.approx(sum(s.power_w or 0 for s in samples) / len(samples))
    assert (device.last_utilization, device.last_power_w) == (0.5, 100.0)


# The same page of a run with nothing on record yet (most running runs, and all of bench/load.py's):
# one query says so, and the cards that would list records read nothing more.
MAX_QUERIES_BARE = 15


def test_a_run_with_nothing_on_record_reads_no_card_tables(cast: Any) -> None:
    from django.utils import timezone

    from apps.jobtemplates.models import JobTemplate
    from apps.runs.models import Attempt
    from tests.runs.factories import local_pool

    template = JobTemplate.objects.create(slug="bare", version=1, title="Bare", kind="train", entrypoint="true")
    now = timezone.now()
    run = Run.objects.create(project=cast.digits, template=template, pool=local_pool(), entrypoint="true", status="running",
                             started_at=now, name="bare")
    Attempt.objects.create(run=run, number=1, status="running", started_at=now)
    client = Client()
    client.force_login(cast.alice)
    count, page = _page(client, run)
    assert 'id="environment-none"' in page and 'id="checkpoints"' in page and 'id="energy-panel"' in page
    assert 'id="run-artifacts"' not in page and 'id="register-model-version"' not in page
    assert count <= MAX_QUERIES_BARE, f"the page of a run with nothing on record made {count} queries (at most {MAX_QUERIES_BARE})"
