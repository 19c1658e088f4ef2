"""Read-only CLI reports: show, checkpoints, compare, queue, budget, nodes."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any

from trainyard._clibase import (
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    _cell,
    _client,
    _duration,
    _energy,
    _local_time,
    _money,
    _out,
    _pairs,
    _parse_time,
    _scalar,
    _size,
    _table,
    is_sweep,
)
from trainyard.client import Client, NotFoundError, PermissionDenied, is_id


def cmd_compare(args: argparse.Namespace) -> int:
    if len(set(args.runs)) < 2:
        raise CliError("give at least two different runs", EXIT_USAGE)
    client = _client(args)
    url = f"{client.url}/compare/?runs={','.join(str(r) for r in args.runs)}"
    if args.open:
        if args.json:
            _out({"url": url})
        else:
            print(url)
        return EXIT_OK
    data = client.compare(args.runs, keys=args.keys.split(",") if args.keys else None, max_points=1)
    _check_compare_keys(data)
    if args.json:
        _out({k: v for k, v in data.items() if k != "series"} | {"url": url})
        return EXIT_OK
    runs = data["runs"]
    headers = ["", *[f"run {r['id']}" for r in runs]]
    rows: list[list[Any]] = [
        ["name", *[r["name"] for r in runs]],
        ["status", *[r["status"] for r in runs]],
        ["template", *[f"{r['template']}@{r['template_version']}" for r in runs]],
    ]
    for section in ("params", "tags"):
        for row in data.get(section) or []:
            if row.get("differs") or args.all:
                label = f"{'param' if section == 'params' else 'tag'} {row['name']}" + (" *" if row.get("differs") else "")
                # As the values are written in --param (true, [0, 1]); "-" where a run has none.
                rows.append([label, *[None if v is None else _scalar(v) for v in row["values"]]])
    for key in data.get("keys") or []:
        # The API does not say whether higher is better, so both ends are shown.
        for stat in ("last", "min", "max"):
            rows.append([f"{key} ({stat})", *[(r.get("summaries") or {}).get(key, {}).get(stat) for r in runs]])
    _table(headers, rows)
    print(f"\n* differs between runs; all rows with --all. In the browser: {url}", file=sys.stderr)
    return EXIT_OK


def _check_compare_keys(data: Mapping[str, Any]) -> None:
    """A --keys name no run logged is not found, rather than a table of "-"."""
    available = data.get("available_keys")
    if available is None:  # a server from before available_keys
        return
    unknown = [k for k in data.get("keys") or [] if k not in available]
    if unknown:
        runs = ", ".join(str(r["id"]) for r in data.get("runs") or [])
        found = f"their metrics: {', '.join(available)}" if available else "they have logged no metrics"
        raise CliError(f"runs {runs} have no metric {', '.join(repr(k) for k in unknown)} ({found})", EXIT_NOT_FOUND)


DUE_NOW_S = 60.0  # as the queue page (apps.scheduling.selectors)


def _when(at: str | None, now: datetime) -> str:
    """An ISO time in local time with how far off it is, as the queue page shows it."""
    when = _parse_time(at) if at else None
    if when is None:
        return "not estimated"
    ahead = (when - now).total_seconds()
    if ahead > 0:
        return f"{_local_time(at)} (in {_duration(ahead)})"
    # Within a minute it is due now (passes run every 10 s); further back, no pass has looked since.
    return f"{_local_time(at)} (due now)" if ahead > -DUE_NOW_S else f"{_local_time(at)} (was due {_duration(-ahead)} ago)"


def _queue_rows(pool: dict[str, Any], now: datetime) -> list[list[Any]]:
    rows = []
    for e in pool.get("queue") or []:
        run = e.get("run")
        start = e.get("estimated_start") or {}
        rows.append([
            e["position"],
            e["priority"],
            e["team"],
            f"{run['id']} {run['name']}" if run else "(another team's run)",
            e["devices"],
            _duration(e.get("predicted_runtime_s")),
            (e.get("reason") or {}).get("message" if run else "label"),
            _when(start.get("at"), now),
        ])
    return rows


def cmd_queue(args: argparse.Namespace) -> int:
    data: Any = _client(args).queue()
    pools = [p for p in data.get("pools") or [] if not args.pool or p["pool"] == args.pool]
    if args.pool and not pools:
        known = ", ".join(p["pool"] for p in data.get("pools") or []) or "none"
        raise CliError(f"no pool {args.pool!r} (pools: {known})", EXIT_NOT_FOUND)
    if args.json:
        _out(data | {"pools": pools})
        return EXIT_OK
    now = datetime.now(timezone.utc)  # noqa: UP017 (datetime.UTC is 3.11+; the SDK supports 3.10)
    for i, pool in enumerate(pools):
        waiting = pool.get("queued_runs", 0)
        online = "no node taking new runs: nothing here can start" if not pool.get("nodes_ready", 1) else ""
        head = f"pool {pool['pool']}: {waiting} waiting" + (f" ({online})" if online else "")
        print(("\n" if i else "") + head)
        rows = _queue_rows(pool, now)
        if rows:
            _table(["#", "class", "team", "run", "devices", "runtime", "waiting because", "estimated start"], rows, max_width=90)
        accuracy = pool.get("accuracy") or {}
        if accuracy.get("summary"):
            print(accuracy["summary"], file=sys.stderr)
        # The buckets the queue page lists too: long waits and requeues, scored the same way.
        for bucket in ("over_10m", "over_1h", "at_requeue"):
            line = (accuracy.get(bucket) or {}).get("summary")
            if line:
                print(f"  {line}", file=sys.stderr)
    if not pools:
        print("no pools", file=sys.stderr)
    return EXIT_OK


ACTIONS = {"block_new": "block new runs", "stop_running": "block new runs and stop running ones"}


def cmd_budget(args: argparse.Namespace) -> int:
    client = _client(args)
    try:
        data = client.budget(args.project)
    except NotFoundError:
        # The finance role sees every budget but is in no team, so the project lookup fails.
        finance = _finance_budget(client, str(args.project).strip())
        if finance is None:
            raise
        data = finance
    if args.json:
        _out(data)
        return EXIT_OK
    _print_budget(data)
    return EXIT_OK


def _print_budget(data: Mapping[str, Any]) -> None:
    budget = data.get("budget")
    period = data.get("period") or {}
    currency = data.get("currency")
    team_wide = isinstance(budget, dict) and budget.get("scope") == "team"
    slug = str((data.get("project") or {}).get("full_slug") or "")
    lines = [("project", slug), ("period", period.get("label") or period.get("key"))]
    if data.get("source") == "finance":
        lines.append(("source", "the finance API (you are not in the project's team)"))
    if budget:
        team = budget.get("team") or slug.partition("/")[0]
        scope = f"team {team}'s, shared by its projects" if team_wide else "the project's own"
        lines += [
            ("budget", f"{_money(budget.get('amount'), currency)} ({scope})"),
            ("alerts at", ", ".join(f"{t}%" for t in budget.get("thresholds") or []) or "none"),
            ("at 100%", ACTIONS.get(str(budget.get("action")), str(budget.get("action")).replace("_", " "))),
        ]
    else:
        lines.append(("budget", "none set"))
    for key in ("spent", "reserved", "remaining", "forecast"):
        amount = _money(data.get(key), currency)
        # A team's budget counts the whole team's spend, which is what the API answers then.
        lines.append((key, f"{amount} (the whole team)" if amount and team_wide and key in ("spent", "reserved") else amount))
        if key == "remaining" and amount and Decimal(str(data.get("overspent") or 0)) > 0:
            lines[-1] = (key, f"{amount} (overspent by {_money(data.get('overspent'), currency)})")
    if data.get("percent") is not None:
        lines.append(("used", f"{data['percent']:.1f}% of the budget"))
    for alert in data.get("alerts") or []:
        lines.append(("alert", f"{alert.get('threshold')}% crossed at {_local_time(alert.get('at'))}"))
    width = max(len(k) for k, _ in lines)
    for key, value in lines:
        if value is not None:
            print(f"{key.ljust(width)}  {value}")


def _finance_budget(client: Client, ref: str) -> dict[str, Any] | None:
    """The budget of project `ref` (an id or 'team/project') as the finance API lists it, with
    this period's spend; None when that API is refused or knows nothing of the project."""
    project_id = int(ref) if is_id(ref) else None
    try:
        if project_id is not None:
            name = _ledger_name(client, project_id)
            if name is None:
                raise CliError(f"project {project_id} not found: the finance API knows a project's id only once it has spent "
                               "something", EXIT_NOT_FOUND, "give it as team/project, e.g. vision/digits")
            ref = name
        team, _, slug = ref.partition("/")
        if not slug:
            return None  # neither an id nor team/project: the lookup's answer stands
        budgets = client.finance_budgets()
        own = [b for b in budgets if b.get("project") == ref]
        teams = [b for b in budgets if not b.get("project") and b.get("team") == team]
        budget = own[0] if own else teams[0] if teams else None
        if budget is None and project_id is None and _ledger_name(client, ref) is None:
            return None  # no budget names it and it has never spent: nothing says it exists
        scope = "team" if teams and not own else "project"
        spend = client.finance_spend(group_by=scope, **({"team": team} if scope == "team" else {"project": ref}))
    except (PermissionDenied, NotFoundError):
        return None
    rows = spend.get("rows") or []
    spent = Decimal(str(rows[0]["cost"])) if rows else Decimal("0.00")
    data: dict[str, Any] = {
        "source": "finance",
        "project": {"id": project_id, "full_slug": ref},
        "period": {"key": spend.get("period")},
        "budget": None,
        "currency": None,
        "spent": str(spent),
    }
    if budget is None:
        return data  # a project that has spent but has no budget, neither its own nor its team's
    amount = Decimal(str(budget["amount"]))
    if budget.get("spent") is not None:
        spent = Decimal(str(budget["spent"]))
    return data | {
        "budget": {"id": budget.get("id"), "name": ref if own else f"{team} (team)", "scope": scope, "team": team,
                   "amount": budget.get("amount"), "thresholds": budget.get("thresholds"), "action": budget.get("action")},
        "currency": budget.get("currency"),
        # The API's figures (spent and reserved against the amount, never below 0), not amount less spent.
        "spent": str(spent),
        "reserved": budget.get("reserved"),
        "remaining": budget.get("remaining"),
        "overspent": budget.get("overspent"),
        "percent": round(float(spent / amount * 100), 2) if amount else None,
    }


def _ledger_name(client: Client, project: int | str) -> str | None:
    """'team/project' of `project` (an id or team/project) as the finance API's ledger names it;
    None when it has no entry for it. The ledger is the only place that API pairs ids with names."""
    rows = client.finance_spend(group_by="project", period="all", project=project).get("rows") or []
    return str(rows[0]["label"]) if rows and rows[0].get("label") else None


def cmd_nodes(args: argparse.Namespace) -> int:
    data = _client(args).nodes()
    if args.json:
        _out(data)
        return EXIT_OK
    _table(
        ["pool", "kind", "price/dev-h", "devices", "free"],
        [
            [p["name"], p.get("kind"), p.get("price_per_device_hour"), p.get("devices_total"), p.get("devices_free")]
            for p in data.get("pools", [])
        ],
    )
    print()
    _table(
        ["id", "hostname", "pool", "state", "used/total", "heartbeat age", "runs"],
        [
            [
                n["id"],
                n["hostname"],
                n["pool"],
                n["state"],
                f"{n['devices_used']}/{n['devices_total']}",
                "-" if n.get("heartbeat_age_s") is None else f"{_duration(n['heartbeat_age_s'])} ago",
                _node_runs(n.get("runs") or []),
            ]
            for n in data.get("nodes", [])
        ],
    )
    return EXIT_OK


def _node_runs(runs: list[dict[str, Any]]) -> str:
    """Run ids on a node; another team's runs (no id in the API) are counted, not dropped."""
    shown = [str(r["id"]) for r in runs if r.get("id") is not None]
    others = sum(1 for r in runs if r.get("id") is None)
    if others:
        shown.append("(another team's run)" if others == 1 else f"({others} other teams' runs)")
    return ",".join(shown)


def cmd_show(args: argparse.Namespace) -> int:
    run = _client(args).run(args.run)
    if args.json:
        _out(run)
        return EXIT_OK
    est = run.get("estimated_start") or {}
    cost = run.get("cost") or {}
    energy = run.get("energy") or {}
    unit = "runs" if is_sweep(run) else "steps"
    rows = [
        ("id", run["id"]),
        ("name", run.get("name")),
        ("project", run.get("project_slug")),
        ("template", f"{run['template']}@{run.get('template_version')}"),
        ("status", run["status"]),
        ("reason", run.get("status_reason")),
        ("priority", run.get("priority")),
        ("submitted by", run.get("submitted_by")),
        ("family", run.get("family")),
        ("parent", f"run {run['parent']} (a sweep)" if run.get("parent") else None),
        ("children", _children(run.get("children") or [])),
        ("starts from", _start_point(run.get("lineage") or {})),
        ("progress", f"{run.get('steps_done')}/{run.get('total_steps') or '?'} {unit}"),
        ("tags", _pairs(run.get("tags"))),
        ("params", _pairs(run.get("params"))),
        ("resources", _pairs(run.get("resources"))),
        ("estimated start", _local_time(est.get("at"))),
        ("queue position", est.get("queue_position")),
        ("cost", _cost(cost)),
        ("energy", _energy_line(energy)),
        ("created", _local_time(run.get("created_at"))),
        ("started", _local_time(run.get("started_at"))),
        ("finished", _local_time(run.get("finished_at"))),
        ("cancel requested", _local_time(run.get("cancel_requested_at"))),
        ("restarts", f"{run.get('restarts')}/{run.get('max_restarts')}"),
    ]
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        if value not in (None, "", {}, []):
            print(f"{key.ljust(width)}  {_cell(value)}")
    attempts = run.get("attempts") or []
    if attempts:
        print()
        _table(
            ["attempt", "status", "nodes", "started", "ended", "exit", "reason"],
            [
                [
                    a["number"],
                    a["status"],
                    ",".join(a.get("nodes") or []),
                    _local_time(a.get("started_at")),
                    _local_time(a.get("ended_at")),
                    a.get("exit_code"),
                    (a.get("reason") or "").splitlines()[0] if a.get("reason") else "",
                ]
                for a in attempts
            ],
        )
    return EXIT_OK


def _children(ids: list[int], most: int = 10) -> str:
    shown = ", ".join(str(i) for i in ids[:most]) + (", …" if len(ids) > most else "")
    return f"{shown} ({len(ids)} runs)" if ids else ""


def _start_point(lineage: Mapping[str, Any]) -> str | None:
    """Where a fine-tune started: the portal's init checkpoint, else what the job reported."""
    ckpt = lineage.get("init_checkpoint")
    if isinstance(ckpt, dict):
        return f"run {ckpt.get('run')} checkpoint {ckpt.get('id')} (step {ckpt.get('step')})"
    if lineage.get("init_run_id") is not None:
        step = lineage.get("init_checkpoint_step")
        return f"run {lineage['init_run_id']}" + (f" (step {step})" if step is not None else "")
    return None


def _cost(cost: Mapping[str, Any]) -> str | None:
    # The run API gives no currency today; one is shown as soon as it does.
    currency = cost.get("currency")
    amount = _money(cost.get("amount"), currency)
    if amount is None:
        return None
    price = cost.get("price_per_device_hour")
    return f"{amount} ({_money(price, currency)} per device-hour)" if price is not None else amount


def _energy_line(energy: Mapping[str, Any]) -> str | None:
    shown = _energy(energy.get("kwh"))
    return f"{shown} (estimated: no power sensor)" if shown and energy.get("estimated") else shown


def _checkpoint_state(ckpt: Mapping[str, Any]) -> str:
    if ckpt.get("deleted"):
        return "deleted by retention"
    return "kept" if ckpt.get("available") else "not uploaded"


def cmd_checkpoints(args: argparse.Namespace) -> int:
    ckpts = _client(args).checkpoints(args.run)
    if args.json:
        _out(ckpts)
        return EXIT_OK
    if not ckpts:
        print(f"run {args.run} has no checkpoints yet", file=sys.stderr)
        return EXIT_OK
    _table(
        ["id", "step", "attempt", "file", "size", "state", "download", "created"],
        [
            [k["id"], k["step"], k.get("attempt"), k.get("file_name"), _size(k.get("size")), _checkpoint_state(k),
             bool(k.get("available")), _local_time(k.get("created_at"))]
            for k in ckpts
        ],
    )
    return EXIT_OK
