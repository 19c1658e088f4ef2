"""A registry other apps add their demo data to (see seed_demo)."""

from __future__ import annotations

from typing import Any, Protocol


class DemoSeeder(Protocol):
    def __call__(self, *, users: dict[str, Any], teams: dict[str, Any], stdout: Any) -> None: ...


DEMO_SEEDERS: list[DemoSeeder] = []


class HistorySeeder(Protocol):
    def __call__(self, *, users: dict[str, Any], stdout: Any) -> Any: ...


# Past activity for `seed_demo --history` (make run): finished runs and their spend.
DEMO_HISTORY_SEEDERS: list[HistorySeeder] = []
