"""The models and the migrations agree: a model change without its migration fails here, and
the live stacks (which run `migrate`) prove the migrations apply on SQLite and PostgreSQL."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command


@pytest.mark.django_db
def test_no_model_change_lacks_a_migration() -> None:
    out = io.StringIO()
    try:
        call_command("makemigrations", "--check", "--dry-run", stdout=out, stderr=out)
    except SystemExit as exc:  # --check exits non-zero when a migration would be written
        pytest.fail(f"models changed without a migration:\n{out.getvalue()}\n(exit {exc.code})")
