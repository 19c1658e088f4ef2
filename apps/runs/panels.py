"""Cards other apps add to the run page (artifacts, model versions) without the page's app
importing them: each registers a callable (request, run) -> {"template", "data"} or None in its
AppConfig.ready, and the page renders them in registration order."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.http import HttpRequest

from apps.runs.models import Run

RUN_PANELS: list[Callable[[HttpRequest, Run], dict[str, Any] | None]] = []


def run_panels(request: HttpRequest, run: Run) -> list[dict[str, Any]]:
    return [panel for panel in (make(request, run) for make in RUN_PANELS) if panel]
