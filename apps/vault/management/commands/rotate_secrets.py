"""Re-encrypt every stored secret with the newest key of TRAINYARD_SECRET_KEYS.

Rotation: put a new key first in TRAINYARD_SECRET_KEYS (keep the old ones after it), restart,
run `manage.py rotate_secrets`, then drop the old keys. Safe to run again: rows already under the
newest key are skipped.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from apps.audit.context import acting_as
from apps.vault.services import secrets_rotate


class Command(BaseCommand):
    help = "Re-encrypt all project secrets with the newest key in TRAINYARD_SECRET_KEYS."

    def handle(self, *args: Any, **options: Any) -> None:
        with acting_as(label="manage.py rotate_secrets"):
            changed = secrets_rotate()
        self.stdout.write(f"re-encrypted {changed} secret(s) with the newest key")
