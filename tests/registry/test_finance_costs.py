"""Finance sees cost per model version on the finance console: the registry's "Model versions"
card, added through billing's FINANCE_PANELS (billing sits below the registry and imports nothing of it)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.test import Client as PageClient

from apps.registry import services
from apps.tenants.models import Role
from apps.tenants.services import membership_set
from tests.fixtures.browser import login, screenshot
from tests.registry.factories import spend, train_run

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.django_db
def test_finance_console_lists_each_model_versions_family_spend(cast: Any) -> None:
    model = services.model_create(project=cast.digits, name="digits-classifier", user=cast.alice, thresholds=[])
    train, (ckpt, _) = train_run(cast.digits, family="digits-mlp")
    sibling, _ = train_run(cast.digits, family="digits-mlp", name="sibling")
    spend(train, "1.25")
    spend(sibling, "0.50")
    services.version_create(model=model, user=cast.alice, checkpoint=ckpt.pk)
    lm = services.model_create(project=cast.tinylm, name="tiny-lm", user=cast.bob, thresholds=[])
    lm_run, (lm_ckpt, _) = train_run(cast.tinylm, family="tiny-lm-pretrain", name="lm")
    spend(lm_run, "4.00")
    services.version_create(model=lm, user=cast.bob, checkpoint=lm_ckpt.pk)

    page = PageClient()
    page.force_login(cast.carol)
    html = page.get("/finance/").content.decode()
    assert "Model versions" in html and 'id="model-versions"' in html
    row = html.split(f'id="model-version-{model.pk}-1"', 1)[1].split("</tr>", 1)[0]
    for cell in ("vision", "vision/digits", "digits-classifier", "v1", "candidate", "digits-mlp", "$1.75"):
        assert cell in row, (cell, row)
    lm_row = html.split(f'id="model-version-{lm.pk}-1"', 1)[1].split("</tr>", 1)[0]
    assert "nlp/tiny-lm" in lm_row and "tiny-lm-pretrain" in lm_row and "$4.00" in lm_row
    # carol is in no team: model pages would be a 404 for her, so the names are not links.
    assert f'href="/models/{model.pk}/"' not in html and page.get(f"/models/{model.pk}/").status_code == 404
    membership_set(team=cast.vision, user=cast.carol, role=Role.VIEWER)
    html = page.get("/finance/").content.decode()
    assert f'href="/models/{model.pk}/"' in html and f'href="/models/{lm.pk}/"' not in html
    # The console itself stays finance's: an engineer is refused before any card is drawn.
    engineer = PageClient()
    engineer.force_login(cast.alice)
    assert engineer.get("/finance/").status_code == 403


@pytest.mark.browser
@pytest.mark.live
def test_finance_console_model_versions_card(live_stack: Any, browser_page: Any) -> None:
    page = browser_page
    out = live_stack.manage("shell", "-c", (ROOT / "tests" / "registry" / "page_setup.py").read_text())
    ids = json.loads(out.stdout.strip().splitlines()[-1])
    login(page, live_stack, "carol")
    page.goto(f"{live_stack.url}/finance/")
    card = page.locator("#model-version-costs")
    card.scroll_into_view_if_needed()
    for number, stage in ((1, "production"), (2, "candidate"), (3, "candidate")):
        row = page.inner_text(f"#model-version-{ids['model']}-{number}")
        assert "vision/digits" in row and "digits-classifier" in row and stage in row and "digits-mlp" in row, row
        assert "$3.40" in row, row
    screenshot(page, "registry-finance-costs")
