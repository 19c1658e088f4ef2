"""HTML pages: the runs list, the run page and the comparison view.

Pages render the frame and what does not change; the live parts (charts, logs, checkpoints)
are drawn by static/tracking/*.js from the scoped tracking API.
"""

from __future__ import annotations

import csv
import json
import re
from datetime import datetime
from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db.models import F, OuterRef, Prefetch, Q, QuerySet, Subquery
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.template.defaultfilters import floatformat
from django.utils import timezone
from django.utils.html import format_html_join
from django.utils.timesince import timesince

from apps.billing.costmodel import money
from apps.core.conditional import revalidated
from apps.core.text import is_id, plural
from apps.core.users import signed_in_user
from apps.jobtemplates.models import JobTemplate, TemplateKind
from apps.runs.detail_selectors import run_energy
from apps.runs.drafts import annotate_draft_take
from apps.runs.models import Assignment, Attempt, Run, RunStatus
from apps.runs.panels import run_panels
from apps.runs.selectors import run_list
from apps.tenants.models import Project
from apps.tenants.selectors import project_list
from apps.tracking import environment_selectors, selectors, startup_selectors
from apps.tracking.compare_selectors import (
    compare_costs,
    compare_default_metric,
    compare_metric_choices,
    compare_only_differences_default,
    saved_comparison_list,
)
from apps.tracking.display import (
    deleted_checkpoints_text,
    energy_text,
    eta_text,
    keep_best_text,
    metric_text,
    retention_text,
    run_color,
    run_label,
    size_text,
    steps_text,
    value_text,
)
from apps.tracking.energy_selectors import run_energy_figures, runs_energy
from apps.tracking.history import run_history
from apps.tracking.models import MetricSummary, SavedComparison
from apps.tracking.overview import ACTIVE, runs_overview
from apps.tracking.sweeps import metric_lower_is_better

TAG_FILTERS = ("owner", "task", "dataset", "candidate")
PAGE_SIZE = 50
LIST_COLUMNS = 9  # the list's columns besides the chosen metrics: tick, run, status, ... created
SORTS = {"created": "created_at", "name": "name", "status": "status", "id": "id"}
# The columns the list page shows (templates/tracking/runs_list.html).
LIST_FIELDS = ("id", "name", "status", "status_reason", "tracked_only", "family", "tags", "steps_done", "total_steps", "created_at",
               "project__slug", "project__team__slug", "template__slug", "template__version")


def _metric_annotation(key: str, field: str = "last_value") -> Subquery:
    return Subquery(MetricSummary.objects.filter(run=OuterRef("pk"), key=key).values(field)[:1])


def _best_field(key: str) -> str:
    """The summary field that holds a metric's best value: min for a loss, max for the rest."""
    return "min" if metric_lower_is_better(key) else "max"


METRIC_FILTER_RE = re.compile(r"^\s*([A-Za-z0-9_./-]{1,250})\s*(>=|<=|>|<|=)\s*(-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*$")
METRIC_FILTER_OPS = {">=": "gte", "<=": "lte", ">": "gt", "<": "lt", "=": "exact"}


def metric_filters(text: str) -> tuple[list[tuple[str, str, float]], str]:
    """The runs list's metric filter ("val_accuracy >= 0.9, loss < 0.5": on each run's last
    value): (key, lookup, value) conditions, and what was wrong with it ("" when nothing)."""
    out: list[tuple[str, str, float]] = []
    for part in [p for p in text.split(",") if p.strip()][:5]:
        m = METRIC_FILTER_RE.match(part)
        if not m:
            return [], f"metric filter: {part.strip()[:80]!r} is not KEY OP NUMBER (ops: >=, <=, >, <, =), e.g. val_accuracy >= 0.9"
        out.append((m.group(1), METRIC_FILTER_OPS[m.group(2)], float(m.group(3))))
    return out, ""


def runs_filtered(*, user: Any, params: Any) -> tuple[QuerySet[Run], list[str], str]:
    """Runs visible to the user, filtered and sorted by the list page's query parameters."""
    qs = run_list(user=user)
    if is_id(params.get("project", "")):
        qs = qs.filter(project_id=int(params["project"]))
    if params.get("template"):
        qs = qs.filter(template__slug=params["template"])
    if params.get("status"):
        qs = qs.filter(status=params["status"])
    if params.get("family"):
        qs = qs.filter(Q(family=params["family"]) | Q(tags__family=params["family"]))
    for tag in TAG_FILTERS:
        if params.get(tag):
            qs = qs.filter(**{f"tags__{tag}": params[tag]})
    text = params.get("q", "").strip()
    if text:
        cond = Q(name__icontains=text) | Q(family__icontains=text) | Q(template__slug__icontains=text)
        if is_id(text):
            cond |= Q(pk=int(text))
        qs = qs.filter(cond)
    sort = params.get("sort", "-created")
    desc = sort.startswith("-")
    field = sort.lstrip("-")
    metric_cols = [c.strip() for c in params.get("cols", "").split(",") if c.strip()][:5]
    conditions, _problem = metric_filters(params.get("mf", ""))
    for i, (key, lookup, value) in enumerate(conditions):
        qs = qs.annotate(**{f"filter_metric_{i}": _metric_annotation(key)}).filter(**{f"filter_metric_{i}__{lookup}": value})
        if key not in metric_cols:
            metric_cols.append(key)
    if field.startswith(("metric:", "best:")) and len(field.split(":", 1)[1]) > 0:
        kind, key = field.split(":", 1)
        metric_cols = [key, *[c for c in metric_cols if c != key]]
        qs = qs.annotate(sort_metric=_metric_annotation(key, "last_value" if kind == "metric" else _best_field(key)))
        order = F("sort_metric").desc(nulls_last=True) if desc else F("sort_metric").asc(nulls_last=True)
        qs = qs.order_by(order, "-id")
    else:
        column = SORTS.get(field, "created_at")
        qs = qs.order_by(f"-{column}" if desc else column, "-id")
    return qs, metric_cols, sort


def _list_row(run: Run, metric_values: list[Any], now: datetime) -> dict[str, Any]:
    """One row of the runs list as display strings: the template then only reads dict keys,
    where a model attribute costs Django's resolver a failed item lookup first (the 50 rows
    were most of the page's time under load)."""
    pct = None if run.progress is None else round(run.progress * 100)
    return {
        "pk": run.pk, "name": run.name, "label": run_label(pk=run.pk, name=run.name), "status": run.status,
        "status_reason": run.status_reason, "tracked_only": run.tracked_only,
        "project": run.project.full_slug, "template": run.template.slug,
        "version": run.template.version, "family": run.family,
        "tags": [f"{k}={v}" for k, v in (run.tags or {}).items()],
        "pct": pct, "steps": f"{run.steps_done} / {run.total_steps}",
        "metrics": [{"last": _metric_text(None if v is None else v["last"]), "best": None if v is None else _metric_text(v["best"])}
                    for v in metric_values],
        "created": run.created_at.isoformat(), "ago": timesince(run.created_at, now),
    }


def _without(query: Any, name: str) -> str:
    rest = query.copy()
    rest.pop(name, None)
    return str(rest.urlencode())


def _metric_text(value: Any) -> str:
    if value is None:
        return "–"
    return floatformat(value, -4) if isinstance(value, int | float) else str(value)


def _metric_cell(summary: dict[str, Any] | None, key: str) -> dict[str, Any] | None:
    """A metric column's cell: the run's last value and its best (min of a loss, max of the rest)."""
    if summary is None:
        return None
    return {"last": summary.get("last"), "best": summary.get(_best_field(key))}


def _column_sort(key: str, sort: str) -> str:
    """Where a metric column's heading links: best first, then the other way on a second click."""
    best_first = f"{'' if metric_lower_is_better(key) else '-'}best:{key}"
    return (best_first[1:] if best_first.startswith("-") else f"-{best_first}") if sort == best_first else best_first


def _sort_choices(metric_keys: list[str]) -> list[tuple[str, str]]:
    out = [("-created", "newest first"), ("created", "oldest first"), ("name", "name"), ("status", "status")]
    for key in metric_keys:
        out += [(f"-metric:{key}", f"{key} (high first)"), (f"metric:{key}", f"{key} (low first)"),
                (f"{'' if metric_lower_is_better(key) else '-'}best:{key}", f"{key}, best first")]
    return out


def _list_page(request: HttpRequest) -> dict[str, Any]:
    """The rows of the runs list's page that the request asks for, and how to page on."""
    qs, metric_cols, sort = runs_filtered(user=request.user, params=request.GET)
    # Only what a row shows: the runs' and templates' other JSON fields (params, schemas) cost
    # more to decode than the rest of the page, and the pool is not shown.
    qs = qs.select_related(None).select_related("project__team", "template").only(*LIST_FIELDS)
    page = Paginator(qs, PAGE_SIZE).get_page(request.GET.get("page"))
    runs = list(page.object_list)
    # The API's ?metrics= reads the same summaries (apps.tracking.api.run_metrics).
    summaries = selectors.metrics_summary(run_ids=[r.pk for r in runs], keys=metric_cols) if metric_cols else {}
    now = timezone.now()
    rows = [_list_row(r, [_metric_cell(summaries[r.pk][k], k) for k in metric_cols], now) for r in runs]
    query = request.GET.copy()
    query.pop("page", None)
    query.pop("partial", None)
    return {"page": page, "rows": rows, "metric_cols": metric_cols, "sort": sort, "query": query.urlencode(),
            "metric_filter_problem": metric_filters(request.GET.get("mf", ""))[1],
            "metric_heads": [{"key": k, "best": _best_field(k), "sort": _column_sort(k, sort),
                              "order": ("descending" if sort.startswith("-") else "ascending")
                              if sort.lstrip("-") in (f"best:{k}", f"metric:{k}") else ""} for k in metric_cols],
            "sort_query": _without(query, "sort"),
            "columns": len(metric_cols) + LIST_COLUMNS, "active": sum(r["status"] in ACTIVE for r in rows)}


@login_required
def runs_list_page(request: HttpRequest) -> HttpResponse:
    listing = _list_page(request)
    if request.GET.get("partial") == "1":
        # What static/tracking/runs_list.js swaps in while runs on the page are active: the rows,
        # the count and the pager, without the filter form's choices (the sort choices' metric
        # keys of 2,000 runs were most of the page's cost).
        return revalidated(request, render(request, "tracking/_runs_rows_partial.html", listing))
    # The metric keys of up to 2,000 visible runs, for the sort choices: their ids go in as a
    # subquery (building the runs, or even shipping 2,000 ids as parameters, cost most of the page).
    visible = run_list(user=request.user).order_by().values("pk")[:2000]
    return render(request, "tracking/runs_list.html", {
        **listing,
        "projects": project_list(user=request.user), "templates": sorted(set(JobTemplate.objects.values_list("slug", flat=True))),
        "statuses": RunStatus.choices, "params": request.GET,
        "tag_filters": [(tag, request.GET.get(tag, "")) for tag in TAG_FILTERS],
        "sort_choices": _sort_choices(selectors.metric_keys_for_runs(run_ids=visible)[:100]),
    })


@login_required
def run_detail_page(request: HttpRequest, pk: int) -> HttpResponse:
    # The attempts (with their assignments and nodes) are read once, for the timeline, the cost
    # and the lineage alike. No more joins on the run: each one added about 0.5 ms of PostgreSQL
    # planning to every view of the page, more than the separate primary-key read of an init
    # checkpoint, code snapshot or submitter costs the runs that have one.
    with_nodes = Prefetch("assignments", queryset=Assignment.objects.select_related("node"))
    attempts_read = Prefetch("attempts", queryset=Attempt.objects.order_by("number").prefetch_related(with_nodes))
    visible = run_list(user=request.user)
    if request.GET.get("partial") == "checkpoints":
        return _checkpoints_fragment(request, get_object_or_404(visible, pk=pk))
    run = get_object_or_404(visible.prefetch_related(attempts_read), pk=pk)
    history = list(run.attempts.all())
    attempt_rows = selectors.attempt_rows(run=run, attempts=history)
    events, older_events = run_history(run=run, attempts=history)
    lineage = selectors.run_lineage(run=run, attempt=history[-1] if history else None)
    sweep = selectors.sweep_trials(parent=run, runs=visible) if run.template.kind == TemplateKind.SWEEP else None
    records = selectors.run_records(run=run)
    environments = environment_selectors.run_environments(run=run) if records.environments else []
    energy = None if sweep is not None else run_energy_figures(run=run, sampled=records.energy_samples)
    return render(request, "tracking/run_detail.html", {
        "annotate_draft": annotate_draft_take(request, run_id=run.pk),
        "energy": energy, "energy_text": energy.as_dict() if energy is not None else None,
        "environments": environments, "package_sets": _package_sets(environments),
        "run": run, "progress": selectors.run_progress(run=run), "events": events, "older_events": older_events,
        "lineage": lineage, "reported": _value_rows(lineage["reported"]), "params": _value_rows(run.params),
        "attempt_rows": attempt_rows, "sweep": sweep, "summary": _run_summary(run, sweep),
        "checkpoints": None if sweep is not None else _checkpoint_card(run, recorded=records.checkpoints),
        "log_notes": selectors.log_notes(run=run) if sweep is None and records.log_notes else [],
        "run_panels": run_panels(request, run),
        "starting": startup_selectors.run_starting(run=run, attempt=history[-1]) if history and sweep is None else None,
        "page_data": {"run": run.pk, "finished": run.is_finished, "sweep": sweep is not None,
                      "attempts": selectors.attempt_timeline(run=run, rows=attempt_rows),
                      # What the Lineage and Environment cards hold: run.js reads them again when it grows.
                      "lineage_seen": f"{len(lineage['reported'])}|{len(environments)}"},
    })


def _package_sets(environments: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each distinct package list once (attempts on one image share it), for the rows to link to."""
    sets: dict[str, dict[str, Any]] = {}
    for e in environments:
        if e["packages_sha256"] not in sets:
            # The list's items are joined here, not by the template: a loop of a few hundred
            # packages per set was most of the page's rendering.
            sets[e["packages_sha256"]] = {"sha256": e["packages_sha256"], "packages": e["packages"], "used_by": [],
                                          "items_html": format_html_join("", "<li>{}</li>", ((p,) for p in e["packages"]))}
        sets[e["packages_sha256"]]["used_by"].append(f"attempt {e['attempt']} rank {e['node_rank']}")
    return list(sets.values())


def _checkpoints_fragment(request: HttpRequest, run: Run) -> HttpResponse:
    """The run page's Checkpoints card alone (?partial=checkpoints): static/tracking/run.js reads
    it again while the run is active, and with the deleted ones' rows (&deleted=1) while someone
    has them unfolded. It carries no CSRF token, so an unchanged card costs a 304."""
    card = _checkpoint_card(run, with_deleted=request.GET.get("deleted") == "1")
    return revalidated(request, render(request, "tracking/_checkpoints.html", {"run": run, "checkpoints": card}))


def _checkpoint_card(run: Run, *, with_deleted: bool = False, recorded: bool = True) -> dict[str, Any]:
    overview = selectors.checkpoint_overview(run=run, with_deleted=with_deleted, recorded=recorded)
    deleted = overview["deleted"]
    retention = overview["retention"]
    kept = [_checkpoint_row(c) for c in overview["kept"]]
    for row, c in zip(kept, overview["kept"], strict=True):
        if c["id"] == overview["best_id"]:
            row["best"] = f"kept as best: {keep_best_text(retention['keep_best'])}"
    return {"kept": kept, "retention_text": retention_text(**retention),
            "deleted": deleted["count"] if deleted else 0,
            "deleted_text": deleted_checkpoints_text(**deleted) if deleted else "",
            "deleted_rows": None if overview["deleted_rows"] is None else [_checkpoint_row(c) for c in overview["deleted_rows"]]}


def _checkpoint_row(c: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint as the card shows it, in the words the charts' pages use (common.js); its
    metrics by name, as PostgreSQL's jsonb keeps no order of its own."""
    state = "" if c["download_url"] else "removed" if c["deleted"] else "not uploaded"
    return {"step": c["step"], "attempt": c["attempt"], "size": size_text(c["size"]), "sha256": c["sha256"],
            "sha_short": c["sha256"][:16] + "…", "metrics": "  ".join(f"{k}={metric_text(v)}" for k, v in sorted(c["metrics"].items())),
            "download_url": c["download_url"], "state": state}


def _value_rows(data: Any) -> list[tuple[str, str]]:
    """A dict's items as the page lists them: values as JSON writes them, not Python's repr."""
    return [(str(k), value_text(v)) for k, v in data.items()] if isinstance(data, dict) else []


def _run_summary(run: Run, sweep: dict[str, Any] | None) -> dict[str, str]:
    """The figures of the Progress and Run cards as first shown (static/tracking/run.js keeps
    the live ones current with the same wording). A sweep parent runs no process: its figures
    are its trials'."""
    if sweep is not None:
        shape = "–"
        if sweep["count"]:
            shape = f"{plural(sweep['nodes'], 'node')} × {plural(sweep['devices_per_node'], 'device')} for each trial"
        return {"steps": f"{sweep['finished']} of {sweep['count']} finished", "eta": eta_text(status=run.status),
                "cost": money(sweep["cost"]), "energy": energy_text(sweep["energy_j"]), "resources": shape}
    return {"steps": steps_text(steps_done=run.steps_done, total_steps=run.total_steps), "eta": eta_text(status=run.status),
            "cost": money(selectors.run_cost(run=run)), "energy": energy_text(run_energy(run=run)["joules"]),
            "resources": f"{plural(run.nodes, 'node')} × {plural(run.devices_per_node, 'device')}{_per_device_words(run)}"}


def _per_device_words(run: Run) -> str:
    """", with 6 GiB of memory and 2 CPU cores per device" for what the run asked besides devices."""
    asked = [f"{run.memory_bytes_per_device / 2**30:g} GiB of memory"] if run.memory_bytes_per_device else []
    if run.cpus_per_device:
        asked.append(f"{run.cpus_per_device:g} CPU core" + ("" if run.cpus_per_device == 1 else "s"))
    return f", with {' and '.join(asked)} per device" if asked else ""


def _compare_ids(request: HttpRequest) -> list[int] | None:
    raw = ",".join(request.GET.getlist("runs"))
    try:
        return list(dict.fromkeys(int(p) for p in raw.split(",") if p.strip()))
    except ValueError:
        return None


@login_required
def compare_page(request: HttpRequest) -> HttpResponse:
    view_ref = request.GET.get("view", "")
    if view_ref:
        # ?view=<id> is the same page as /compare/v/<id>/: a saved comparison's runs and settings.
        if not is_id(view_ref):
            raise Http404("No such saved comparison.")
        return saved_compare_page(request, int(view_ref))
    ids = _compare_ids(request)
    if len(request.GET.getlist("runs")) > 1 and ids is not None:
        # Checkbox forms send runs=1&runs=2: fold them into one shareable parameter.
        query = request.GET.copy()
        query.setlist("runs", [",".join(map(str, ids))])
        return redirect(f"{request.path}?{query.urlencode()}")
    return _compare_render(request, ids)


@login_required
def saved_compare_page(request: HttpRequest, pk: int) -> HttpResponse:
    """A saved comparison, at a link anyone in its team can open (another team's is a 404)."""
    saved = get_object_or_404(saved_comparison_list(user=request.user), pk=pk)
    return _compare_render(request, list(saved.run_ids), saved=saved)


def _compare_render(request: HttpRequest, ids: list[int] | None, *, saved: SavedComparison | None = None) -> HttpResponse:
    problem = None
    if ids is None:
        problem = "runs must be comma-separated run ids."
    elif not selectors.COMPARE_MIN_RUNS <= len(ids) <= selectors.COMPARE_MAX_RUNS:
        problem = f"Pick {selectors.COMPARE_MIN_RUNS} to {selectors.COMPARE_MAX_RUNS} runs to compare (got {len(ids)})."
    else:
        runs = {r.pk: r for r in run_list(user=request.user).filter(pk__in=ids).select_related("pool")}
        names = {pk: r.name for pk, r in runs.items()}
        missing = [i for i in ids if i not in names]
        if missing:
            # Say which: one mistyped id used to turn the whole comparison into a bare 404. Not
            # there and another team's read the same, so nothing about other teams leaks.
            problem = (f"No run {', '.join(map(str, missing))} that you can see: it may not exist, or belong to another team."
                       + (" Compare the others below." if len(names) >= selectors.COMPARE_MIN_RUNS else ""))
            context = {"problem": problem, "ids": ids, "runs_param": ",".join(str(i) for i in ids if i in names)}
            return render(request, "tracking/compare.html", context, status=404)
        environment = environment_selectors.environment_compare(run_ids=ids)
        looks = _compare_looks(ids, names)
        energy = _compare_energy(looks, [runs[i] for i in ids])
        choices = compare_metric_choices(run_ids=ids)
        return render(request, "tracking/compare.html", {"problem": None, "ids": ids, "runs_param": ",".join(map(str, ids)),
                                                         "compare_runs": looks,
                                                         "compare_energy": energy,
                                                         "compare_energy_samples": any(e["wh_per_1k_samples"] is not None for e in energy),
                                                         "compare_energy_tokens": any(e["wh_per_1k_tokens"] is not None for e in energy),
                                                         "compare_metrics": choices,
                                                         "compare_defaults": _compare_defaults(ids, choices, saved),
                                                         "saved": saved,
                                                         "saved_views": _saved_views(request, ids),
                                                         "environment": environment,
                                                         "environment_differs": [f for f in environment["fields"] if f["differs"]],
                                                         "environment_same": [f["label"] for f in environment["fields"]
                                                                              if not f["differs"]]})
    return render(request, "tracking/compare.html", {"problem": problem, "ids": ids or [], "runs_param": ",".join(map(str, ids or []))})


def _compare_defaults(ids: list[int], choices: list[dict[str, Any]], saved: SavedComparison | None) -> dict[str, Any]:
    """What the page opens on where its URL says nothing: a saved comparison's settings, else a
    metric that differs between the runs and "only differences" above two runs."""
    out: dict[str, Any] = {"metric": compare_default_metric(choices=choices), "keys": [], "x": "step",
                           "only_differences": compare_only_differences_default(count=len(ids)), "saved": None}
    if saved is not None:
        keys = [m["key"] for m in choices]
        out.update({"keys": saved.keys, "x": saved.x_axis, "saved": {"id": saved.pk, "name": saved.name, "url": f"/compare/v/{saved.pk}/"}})
        if saved.metric in keys:
            out["metric"] = saved.metric
        if saved.only_differences is not None:
            out["only_differences"] = saved.only_differences
    return out


def _saved_views(request: HttpRequest, ids: list[int]) -> list[dict[str, Any]]:
    """The saved comparisons of the projects these runs are in, newest first."""
    projects = run_list(user=request.user).filter(pk__in=ids).values("project_id")
    qs = saved_comparison_list(user=request.user).filter(project_id__in=projects).order_by("-created_at", "-pk")[:50]
    return [{"id": s.pk, "name": s.name, "url": f"/compare/v/{s.pk}/", "project": s.project.full_slug, "runs": len(s.run_ids),
             "by": s.created_by.get_username() if s.created_by else "", "mine": s.created_by_id == request.user.pk} for s in qs]


def _compare_looks(ids: list[int], names: dict[int, str]) -> list[dict[str, Any]]:
    """How the comparison shows each run: one label, and one colour on every chart and table of
    the page (static/tracking/compare.js reads these rather than counting colours of its own)."""
    return [{"id": pk, "label": run_label(pk=pk, name=names[pk]), "color": run_color(i)} for i, pk in enumerate(ids)]


def _compare_energy(looks: list[dict[str, Any]], runs: list[Run]) -> list[dict[str, Any]]:
    """Each compared run's cost and energy figures, in the comparison's order and colours."""
    figures = runs_energy(runs=runs)
    costs = compare_costs(runs=runs)
    return [{**look, **figures[look["id"]].as_dict(), "cost": money(costs[look["id"]])} for look in looks]


@login_required
def compare_csv(request: HttpRequest) -> HttpResponse:
    ids = _compare_ids(request)
    if not ids or not selectors.COMPARE_MIN_RUNS <= len(ids) <= selectors.COMPARE_MAX_RUNS:
        return HttpResponse(f"runs: give {selectors.COMPARE_MIN_RUNS} to {selectors.COMPARE_MAX_RUNS} run ids", status=400)
    found = {r.pk: r for r in run_list(user=request.user).filter(pk__in=ids)}
    if len(found) != len(ids):
        raise Http404("No such runs.")
    data = selectors.run_compare(runs=[found[i] for i in ids], keys=None, q=selectors.SeriesQuery(max_points=1))
    response = HttpResponse(content_type="text/csv")
    response["Content-Disposition"] = 'attachment; filename="compare.csv"'
    writer = csv.writer(response)
    params = [row["name"] for row in data["params"]]
    stats = ("last", "min", "max", "count")
    energy_columns = ("energy_wh", "wh_per_step", "wh_per_1k_samples", "estimated", "wh_per_1k_tokens")
    writer.writerow(["run", "name", "status", "template", *[f"param:{p}" for p in params],
                     *[f"{k}:{s}" for k in data["keys"] for s in stats], *[f"energy:{c}" for c in energy_columns]])
    for i, r in enumerate(data["runs"]):
        row = [r["id"], r["name"], r["status"], f'{r["template"]} v{r["template_version"]}']
        row += [json.dumps(p["values"][i]) if isinstance(p["values"][i], (dict, list)) else p["values"][i] for p in data["params"]]
        for k in data["keys"]:
            summary = r["summaries"].get(k, {})
            row += [summary.get(s, "") for s in stats]
        energy = r["energy"]
        row += ["" if energy[c] is None or (c == "energy_wh" and not energy["measured"]) else energy[c] for c in energy_columns]
        writer.writerow(row)
    return response


def _runs_panel(runs: QuerySet[Run], *, title: str, all_url: str, src: str, empty: str = "") -> dict[str, Any]:
    return {"template": "tracking/_runs_panel.html",
            "data": {"title": title, "all_url": all_url, "src": src, "empty": empty, **runs_overview(runs=runs)}}


def project_runs_panel(request: HttpRequest, project: Project) -> dict[str, Any] | None:
    """The runs card on the project page (registered first in PROJECT_PANELS)."""
    return _runs_panel(run_list(user=request.user).filter(project=project), title="Runs", all_url=f"/runs/?project={project.pk}",
                       src=f"/runs/overview/?project={project.pk}", empty="No runs in this project yet.")


def home_runs_panel(request: HttpRequest) -> dict[str, Any] | None:
    """Your runs, on the home page (registered in HOME_PANELS). Someone in a team who never
    submitted one gets the card hidden and empty, for static/tracking/overview.js to fill when
    their first run arrives; someone in no team (finance) nothing."""
    runs = run_list(user=request.user).filter(submitted_by=signed_in_user(request))
    if not runs.exists():
        if not project_list(user=request.user).exists():
            return None
        return {"template": "tracking/_runs_panel.html", "data": {"src": "/runs/overview/", "waiting_for_first": True}}
    return _runs_panel(runs, title="Your runs", all_url="/runs/", src="/runs/overview/")


@login_required
def runs_overview_fragment(request: HttpRequest) -> HttpResponse:
    """The runs card alone, which the home and project pages fetch to keep it current."""
    project_id = request.GET.get("project", "")
    if project_id:
        if not is_id(project_id):
            raise Http404("No such project.")
        panel = project_runs_panel(request, get_object_or_404(project_list(user=request.user), pk=int(project_id)))
    else:
        panel = home_runs_panel(request)
    if panel is None or panel["data"].get("waiting_for_first"):
        return HttpResponse(status=204)
    return revalidated(request, render(request, panel["template"], {"data": panel["data"], "fragment": True}))
