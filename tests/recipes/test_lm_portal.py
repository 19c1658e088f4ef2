"""lm_pretrain's efficiency figures on the run page and through the API (issue 31): they are
ordinary logged metrics and reported lineage, plus the portal's energy per 1,000 tokens."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from apps.runs.models import Attempt
from apps.tracking.energy_selectors import run_energy_figures
from apps.tracking.services import metric_points_store
from tests.pages import page_html
from tests.tracking.test_energy import T, make_gang

LM_PARAMS = {"preset": "tiny", "batch_size": 16, "steps": 100}


def _log_lm_run(run: Any) -> None:
    # What recipes.lm_loop logs at steps 99 and 100 of a tiny run (16 sequences x 64 tokens a step).
    rows = []
    for step in (99, 100):
        values = {"loss": 2.5, "throughput": 300.0, "tokens_per_s": 19200.0, "model_tflops": 0.015,
                  "peak_memory_mb": 360.0, "tokens": float(step * 16 * 64)}
        rows += [(key, step, value, 0, T + step) for key, value in values.items()]
    metric_points_store(run_id=run.pk, attempt=2, rows=rows)


def test_tokens_per_s_mfu_label_memory_and_energy_per_1k_tokens_show(cast: Any) -> None:
    torch = pytest.importorskip("torch")
    from recipes import common, lm_loop

    run = make_gang(cast.digits, name="lm", params=LM_PARAMS)
    _log_lm_run(run)
    cpu = torch.device("cpu")
    _, peak_label = lm_loop.device_peak(cpu, common.choose_precision(cpu, False, "bfloat16"))
    Attempt.objects.filter(run=run, number=2).update(lineage={"recipe": "lm_pretrain", "mfu_peak": peak_label,
                                                                  "peak_memory_source": lm_loop.memory_label(cpu)})

    figures = run_energy_figures(run=run)
    assert figures.tokens == 100 * 16 * 64
    assert figures.wh_per_1k_tokens == pytest.approx(14_000 / 3600 / 102.4)

    html = page_html(cast.alice, f"/runs/{run.pk}/")
    text = " ".join(re.sub(r"<[^>]+>", " ", html).split())
    assert "Per 1k tokens 0.0380 Wh 102400 tokens: the job's tokens metric" in text
    assert "unknown peak (CPU): MFU not computed" in text and "ru_maxrss" in text

    client = Client()
    client.force_login(cast.alice)
    keys = client.get(f"/api/v1/runs/{run.pk}/metrics/keys/").content.decode()
    for key in ("tokens_per_s", "model_tflops", "peak_memory_mb", "tokens", "throughput"):
        assert f'"{key}"' in keys, keys
    other = make_gang(cast.digits, name="other")
    compared = client.get(f"/api/v1/compare/?runs={run.pk},{other.pk}").json()["runs"]
    energy = {r["id"]: r["energy"] for r in compared}[run.pk]
    assert energy["wh_per_1k_tokens"] == pytest.approx(14_000 / 3600 / 102.4)
    assert energy["j_per_1k_tokens"] == pytest.approx(14_000 / 102.4)
    html = page_html(cast.alice, f"/compare/?runs={run.pk},{other.pk}")
    table = html[html.index('id="energy-table"'):html.index("</table>", html.index('id="energy-table"'))]
    assert "Wh / 1k tokens" in table and re.search(rf'<tr data-run="{run.pk}">.*?<td class="num">0.0380</td></tr>', table, re.S)
    csv_text = client.get(f"/compare/export.csv?runs={run.pk},{other.pk}").content.decode()
    assert "energy:wh_per_1k_tokens" in csv_text.splitlines()[0]
    assert client.get(f"/api/v1/runs/{run.pk}/environment/").json()["reported"]["mfu_peak"] == peak_label
    page_html(cast.bob, f"/runs/{run.pk}/", status=404)


def test_the_lm_pretrain_form_shows_presets_with_parameter_counts_and_memory(cast: Any) -> None:
    from tests.runs.factories import local_pool

    local_pool("2.0")
    _ship("lm-pretrain", "image-classifier")
    html = page_html(cast.alice, "/runs/new/?template=lm-pretrain")
    text = " ".join(re.sub(r"<[^>]+>", " ", html).split())
    assert '<option value="124m">' in html and 'name="p_preset"' in html
    for line in ("tiny: 2 layers x 64 wide, 4 heads, context 64 = 0.12M parameters, about 11 MiB to train",
                 "124m: 12 layers x 768 wide, 12 heads, context 1024 = 86M parameters, about 17.3 GiB to train"):
        assert line in text, text
    html = page_html(cast.alice, "/runs/new/?template=image-classifier")
    assert 'name="p_width"' in html and 'name="p_train_samples"' in html


def _ship(*slugs: str) -> None:
    from apps.jobtemplates.recipes import SHIPPED, shipped_template_fields
    from apps.jobtemplates.services import template_create

    for slug, module, kind, title, description, overrides in SHIPPED:
        if slug in slugs:
            fields = shipped_template_fields(slug, module, kind, title, description, overrides)
            assert fields is not None
            template_create(slug=slug, publish=True, **fields)


def test_a_sweep_over_lm_pretrain_width_and_lr_makes_children_the_recipe_accepts(cast: Any) -> None:
    from apps.runs.models import Run
    from recipes.lm_presets import resolve_config
    from recipes.lm_pretrain import PARAM_SCHEMA
    from recipes.schema import resolve_params
    from tests.runs.factories import body, local_pool

    local_pool("2.0")
    _ship("lm-pretrain", "sweep")
    sweep = {"template": "lm-pretrain", "strategy": "grid", "space": {"width": [32, 64], "lr": [0.001, 0.003]},
             "params": {"preset": "tiny", "steps": 20}, "max_runs": 4}
    response = cast.client(cast.alice).post("/api/v1/runs/", body(cast, template="sweep", params=sweep), format="json")
    assert response.status_code == 201, response.json()
    children = list(Run.objects.get(pk=response.json()["id"]).children.order_by("pk"))
    assert {(c.params["width"], c.params["lr"]) for c in children} == {(32, 0.001), (32, 0.003), (64, 0.001), (64, 0.003)}
    for child in children:
        assert child.template.slug == "lm-pretrain" and child.total_steps == 20
        config = resolve_config(resolve_params(PARAM_SCHEMA, child.params))
        assert (config.d_model, config.n_layer, config.context) == (child.params["width"], 2, 64)
    bad = {**sweep, "space": {"width": [32, 99999]}}
    refused = cast.client(cast.alice).post("/api/v1/runs/", body(cast, template="sweep", params=bad), format="json")
    assert refused.status_code == 400 and "width" in str(refused.json())
