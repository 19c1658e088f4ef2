"""The Django admin names every model in plain English (issue 29): it said "Usage entrys" and
"Webhook deliverys", Django's default plural of a name ending in a consonant and "y"."""

from __future__ import annotations

import re
from typing import Any

from django.contrib import admin
from django.test import Client


def test_no_model_in_the_admin_is_pluralised_with_a_consonant_then_ys() -> None:
    wrong = {m._meta.label: str(m._meta.verbose_name_plural) for m in admin.site._registry
             if re.search(r"[^aeiou]ys$", str(m._meta.verbose_name_plural))}
    assert not wrong, wrong


def test_admin_index_reads_usage_entries_and_webhook_deliveries(cast: Any) -> None:
    client = Client()
    client.force_login(cast.admin)
    index = client.get("/admin/").content.decode()
    assert "Usage entries" in index and "Webhook deliveries" in index
    assert not re.search(r"\b\w+[^aeiou]ys\b", index)
