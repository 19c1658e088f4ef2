"""Read-only CLI reports: show, checkpoints, compare, queue, budget, nodes."""

from __future__ import annotations

import argparse
import sys
from datetime import datetime, timezone
from typing import Any

from trainyard._clibase import (
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    _cell,
    _client,
    _duration,
    _out,
    _table,
)


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


def _when(at: str | None, now: datetime) -> str:
    """An ISO time as local HH:MM with how far off it is, as the queue page shows it."""
    if not at:
        return "not estimated"
    when = datetime.fromisoformat(at.replace("Z", "+00:00"))
    ahead = (when - now).total_seconds()
    return f"{when.astimezone():%H:%M} (in {_duration(ahead)})" if ahead > 0 else f"{when.astimezone():%H:%M} (due now)"


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
        raise CliError(f"no pool {args.pool!r} (pools: {known})", EXIT_USAGE)
    if args.json:
        _out(data | {"pools": pools})
        return EXIT_OK
    now = datetime.now(timezone.utc)  # noqa: UP017 (datetime.UTC is 3.11+; the SDK supports 3.10)
    for i, pool in enumerate(pools):
        waiting = pool.get("queued_runs", 0)
        online = "no node online: nothing here can start" if not pool.get("nodes_ready", 1) else ""
        head = f"pool {pool['pool']}: {waiting} waiting" + (f" ({online})" if online else "")
        print(("\n" if i else "") + head)
        rows = _queue_rows(pool, now)
        if rows:
            _table(["#", "class", "team", "run", "devices", "runtime", "waiting because", "estimated start"], rows, max_width=90)
        accuracy = (pool.get("accuracy") or {}).get("summary")
        if accuracy:
            print(accuracy, file=sys.stderr)
    if not pools:
        print("no pools", file=sys.stderr)
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
