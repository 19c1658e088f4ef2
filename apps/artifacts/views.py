"""The artifacts card on the run page (registered in apps.runs.panels.RUN_PANELS): images inline,
CSV and JSON as tables, everything else as download links."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from apps.artifacts.previews import Table
from apps.artifacts.selectors import artifact_kind, artifact_list, artifact_preview
from apps.runs.models import Run

PANEL_MAX_ARTIFACTS = 200
PANEL_MAX_IMAGES = 24
PANEL_MAX_TABLES = 6


def run_artifacts_panel(request: HttpRequest, run: Run) -> dict[str, Any] | None:
    """None while the run has no artifacts. The page's caller already scoped the run to the user."""
    artifacts = list(artifact_list(run=run)[:PANEL_MAX_ARTIFACTS + 1])
    if not artifacts:
        return None
    images: list[dict[str, Any]] = []
    tables: list[dict[str, Any]] = []
    files: list[dict[str, Any]] = []
    for artifact in artifacts[:PANEL_MAX_ARTIFACTS]:
        row = {"artifact": artifact, "url": reverse("run-artifact-file", kwargs={"pk": run.pk, "name": artifact.name})}
        kind = artifact_kind(artifact=artifact)
        if kind == "image" and len(images) < PANEL_MAX_IMAGES:
            images.append(row)
        elif kind in ("csv", "json") and len(tables) < PANEL_MAX_TABLES:
            table = artifact_preview(artifact=artifact)
            tables.append({**row, "table": table, **_table_html(table)})
        else:
            files.append(row)
    return {"template": "artifacts/_run_panel.html",
            "data": {"run": run, "count": len(artifacts[:PANEL_MAX_ARTIFACTS]), "more": len(artifacts) > PANEL_MAX_ARTIFACTS,
                     "images": images, "tables": tables, "files": files,
                     "api_url": reverse("run-artifacts", kwargs={"pk": run.pk})}}


def _table_html(table: Table) -> dict[str, SafeString]:
    """A preview's header cells and body rows, escaped and joined here rather than by template
    loops: up to PANEL_MAX_TABLES tables of 50 rows by 30 columns, cell by cell, were most of the
    card's rendering. Every cell goes through format_html, so a cell holding markup stays text."""
    head = format_html_join("", '<th scope="col">{}</th>', ((c,) for c in table.columns))
    body = format_html_join("", "<tr>{}</tr>", ((format_html_join("", "<td>{}</td>", ((c,) for c in r)),) for r in table.rows))
    if not table.rows:
        body = format_html('<tr><td colspan="{}" class="muted">No rows.</td></tr>', len(table.columns))
    return {"head_html": head, "body_html": body}
