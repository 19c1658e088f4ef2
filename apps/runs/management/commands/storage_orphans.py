"""Objects in the store under the checkpoint and artifact prefixes that no row references.

    manage.py storage_orphans [--delete] [--older-than HOURS]

Lists each orphan (key, size, age) and the totals; deletes them only with --delete (the hourly
beat task runs the same sweep with --delete). The grace is TRAINYARD_ORPHAN_GRACE_S unless
--older-than names another, and never less than the time an upload may still be confirmed.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from apps.runs.services.storage_orphans import orphan_grace_s, storage_orphans_sweep


def _human(size: int) -> str:
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{size} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{size} B"


def _age(seconds: float) -> str:
    hours = seconds / 3600
    return f"{hours:.1f} h" if hours < 48 else f"{hours / 24:.1f} d"


class Command(BaseCommand):
    help = "List (or with --delete, delete) stored checkpoint and artifact objects that no row references."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--delete", action="store_true", help="Delete the orphans (default: only list them).")
        parser.add_argument("--older-than", type=float, default=None, metavar="HOURS",
                            help="Grace period in hours (default: TRAINYARD_ORPHAN_GRACE_S).")

    def handle(self, *args: Any, **options: Any) -> None:
        hours = options["older_than"]
        if hours is not None and not hours >= 0:
            raise CommandError("--older-than must be a number of hours >= 0")
        older_than = timedelta(hours=hours) if hours is not None else None
        if older_than is not None and orphan_grace_s(older_than) > older_than.total_seconds():
            self.stderr.write(f"note: --older-than raised to {orphan_grace_s(older_than) / 3600:g} h, the longest an "
                              "upload may still be confirmed (twice TRAINYARD_STORAGE_URL_TTL_S)")
        sweep = storage_orphans_sweep(delete=options["delete"], older_than=older_than, actor_label="manage.py storage_orphans")
        for orphan in sweep.orphans:
            self.stdout.write(f"{orphan.key}\t{orphan.size}\t{_age(orphan.age_s)}")
        verb = "deleted" if sweep.deleted else "found (dry run; --delete removes them)"
        self.stdout.write(f"{sweep.count} orphaned objects, {sweep.bytes} bytes ({_human(sweep.bytes)}) {verb}; "
                          f"grace {sweep.grace_s / 3600:g} h")
