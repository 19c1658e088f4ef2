"""Read-only CLI reports: show, checkpoints, compare, queue, budget, nodes."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from trainyard._clibase import (
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    _cell,
    _client,
    _out,
    _table,
)
from trainyard.client import NotFoundError


def cmd_compare(args: argparse.Namespace) -> int:
    client = _client(args)
    if len(args.runs) < 2:
        raise CliError("compare needs at least two runs", EXIT_USAGE)
    url = f"{client.url}/compare/?runs={','.join(str(r) for r in args.runs)}"
    if args.open:
        print(url)
        return EXIT_OK
    data = client.compare(args.runs, keys=args.keys.split(",") if args.keys else None, max_points=1)
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
                rows.append(
                    [
                        f"{section[:-1] if section == 'params' else 'tag'} {row['name']}" + (" *" if row.get("differs") else ""),
                        *row["values"],
                    ]
                )
    for key in data.get("keys") or []:
        rows.append([f"{key} (last)", *[(r.get("summaries") or {}).get(key, {}).get("last") for r in runs]])
        rows.append([f"{key} (min)", *[(r.get("summaries") or {}).get(key, {}).get("min") for r in runs]])
    _table(headers, rows)
    print(f"\n* differs between runs; all rows with --all. In the browser: {url}", file=sys.stderr)
    return EXIT_OK


def cmd_queue(args: argparse.Namespace) -> int:
    client = _client(args)
    try:
        data: Any = client.queue()
        source = "queue"
    except NotFoundError:
        # The scheduler's queue API may not exist on this server yet: show queued runs instead.
        print("note: this server has no queue API (GET /api/v1/queue/ is 404); showing queued runs without positions", file=sys.stderr)
        data = list(client.runs(status=["queued", "scheduled"]))
        source = "runs"
    items = (
        data
        if isinstance(data, list)
        else next((data[k] for k in ("results", "queue", "runs", "items") if isinstance(data, dict) and isinstance(data.get(k), list)), [])
    )
    if args.json:
        _out(data if source == "queue" else {"source": "runs", "runs": data})
        return EXIT_OK
    cols = ["position", "id", "name", "project", "pool", "priority", "status", "reason", "estimated_start"]
    aliases = {
        "id": ("id", "run"),
        "project": ("project", "project_slug"),
        "reason": ("reason", "status_reason"),
        "position": ("position", "queue_position"),
        "estimated_start": ("estimated_start", "estimate", "eta"),
    }

    def pick(item: dict[str, Any], col: str) -> Any:
        for name in aliases.get(col, (col,)):
            if name in item:
                value = item[name]
                return value.get("at") if isinstance(value, dict) and "at" in value else value
        return None

    present = [c for c in cols if any(pick(i, c) is not None for i in items)] or ["id"]
    _table(present, [[pick(i, c) for c in present] for i in items])
    if not items:
        print("the queue is empty", file=sys.stderr)
    return EXIT_OK


def cmd_budget(args: argparse.Namespace) -> int:
    data = _client(args).budget(args.project)
    if args.json:
        _out(data)
        return EXIT_OK
    budget = data.get("budget")
    period = data.get("period") or {}
    print(f"project   {data.get('project', {}).get('full_slug')}")
    print(f"period    {period.get('label') or period.get('key')}")
    if budget:
        print(
            f"budget    {budget.get('name')} ({budget.get('scope')}): {budget.get('amount')} {data.get('currency', '')}"
            f"  thresholds {budget.get('thresholds')}%  at 100%: {budget.get('action')}"
        )
    else:
        print("budget    none set")
    for key in ("spent", "reserved", "remaining", "forecast"):
        print(f"{key:<9} {_cell(data.get(key))}")
    if data.get("percent") is not None:
        print(f"used      {data['percent']}%")
    for alert in data.get("alerts") or []:
        print(f"alert     {alert.get('threshold')}% at {alert.get('at')}")
    return EXIT_OK


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
                "-" if n.get("heartbeat_age_s") is None else f"{n['heartbeat_age_s']}s",
                ",".join(str(r["id"]) for r in n.get("runs", []) if r.get("id")),
            ]
            for n in data.get("nodes", [])
        ],
    )
    return EXIT_OK


def cmd_show(args: argparse.Namespace) -> int:
    run = _client(args).run(args.run)
    if args.json:
        _out(run)
        return EXIT_OK
    est = run.get("estimated_start") or {}
    rows = [
        ("id", run["id"]),
        ("name", run.get("name")),
        ("project", run.get("project_slug")),
        ("template", f"{run['template']}@{run.get('template_version')}"),
        ("status", run["status"]),
        ("reason", run.get("status_reason")),
        ("priority", run.get("priority")),
        ("submitted by", run.get("submitted_by")),
        ("progress", f"{run.get('steps_done')}/{run.get('total_steps') or '?'} steps"),
        ("tags", run.get("tags")),
        ("params", run.get("params")),
        ("resources", run.get("resources")),
        ("estimated start", est.get("at")),
        ("queue position", est.get("queue_position")),
        ("cost", (run.get("cost") or {}).get("amount")),
        ("energy kWh", (run.get("energy") or {}).get("kwh")),
        ("created", run.get("created_at")),
        ("started", run.get("started_at")),
        ("finished", run.get("finished_at")),
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
                    a.get("started_at"),
                    a.get("ended_at"),
                    a.get("exit_code"),
                    (a.get("reason") or "").splitlines()[0] if a.get("reason") else "",
                ]
                for a in attempts
            ],
        )
    return EXIT_OK


def cmd_checkpoints(args: argparse.Namespace) -> int:
    ckpts = _client(args).checkpoints(args.run)
    if args.json:
        _out(ckpts)
        return EXIT_OK
    _table(
        ["id", "step", "attempt", "file", "size", "available", "created"],
        [
            [k["id"], k["step"], k.get("attempt"), k.get("file_name"), k.get("size"), k.get("available"), str(k.get("created_at", ""))[:19]]
            for k in ckpts
        ],
    )
    return EXIT_OK
