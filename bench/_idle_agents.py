"""bench/load.py --idle-agents N: N simulated agents that heartbeat every --interval seconds and
keep a claim open (wait_s 25, claiming again as soon as one answers), against `make run`'s web
command (portal.launch.web_argv) on PostgreSQL and Redis, while runs are placed on them.

The agents are coroutines in one process (asyncio, raw HTTP/1.1): a heartbeat on a new connection
each time, as the agent's urllib client does, and the claims on a keep-alive connection each. A
helper process (bench/_place_idle.py) queues --place runs and runs a scheduling pass every
--place-every seconds; an agent that claims one reports it started and exited at once, freeing its
node. Measured over the window after a warm-up: heartbeat latency; time from placement
(Assignment.created_at) to the agent reading the claim's answer; the database statements per
second (pg_stat_statements), those of the idle claims picked out; the web's memory, threads and
database connections.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import time
from collections import defaultdict
from datetime import datetime
from pathlib import Path
from typing import Any

import psutil

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CLAIM_WAIT_S = 25  # agents.protocol.MAX_CLAIM_WAIT_S: the longest a claim may wait
WARMUP_S = 20.0
# Statements only the claim path runs (the pending check, the re-read after a wake-up), and the
# one every agent request runs (authentication), shared out by request counts.
CLAIM_ONLY = ('FROM "runs_assignment" INNER JOIN "runs_attempt"',)
AUTH = "WHERE credential_hash ="


class Conn:
    """One HTTP/1.1 connection (keep-alive unless `close`)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(self, path: str, body: dict[str, Any], secret: str, *, close: bool = False) -> tuple[int, Any]:
        reused = self.writer is not None
        try:
            return await self._once(path, body, secret, close)
        except (ConnectionResetError, BrokenPipeError, asyncio.IncompleteReadError):
            if not reused:
                raise
            # The server closed the idle keep-alive connection: as any HTTP client, send again on a new one.
            return await self._once(path, body, secret, close)

    async def _once(self, path: str, body: dict[str, Any], secret: str, close: bool) -> tuple[int, Any]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        assert self.reader is not None
        data = json.dumps(body).encode()
        head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Node {secret}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n"
                f"{'Connection: close' + chr(13) + chr(10) if close else ''}\r\n")
        try:
            self.writer.write(head.encode() + data)
            lines = (await self.reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
            status = int(lines[0].split()[1])
            headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
            if headers.get("transfer-encoding") == "chunked":
                raw = b""
                while size := int((await self.reader.readuntil(b"\r\n")).strip(), 16):
                    raw += (await self.reader.readexactly(size + 2))[:-2]
                await self.reader.readuntil(b"\r\n")
            else:
                raw = await self.reader.readexactly(int(headers.get("content-length", "0")))
            if close or headers.get("connection") == "close":
                self.close()
            return status, json.loads(raw) if raw else None
        except (OSError, asyncio.IncompleteReadError, ValueError):
            self.close()
            raise

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


class Tally:
    def __init__(self) -> None:
        self.measuring = False
        self.heartbeat_s: list[float] = []
        self.heartbeat_at: list[float] = []  # epoch seconds each measured heartbeat was sent (with heartbeat_s)
        self.placed_at: list[tuple[float, float]] = []  # each placement pass: asked, answered (epoch seconds)
        self.loop_lag: list[tuple[float, float]] = []  # (epoch seconds, how late the client's 50 ms tick woke)
        self.cpu_busy: list[tuple[float, float]] = []  # (epoch seconds, machine cores busy over the last tick)
        self.requests: dict[str, int] = defaultdict(int)  # in the window, by kind
        self.claim_answers: dict[str, int] = defaultdict(int)  # in the window: work, timeout, drain, refused
        self.claimed_at: dict[int, float] = {}  # attempt id -> epoch seconds the agent read the answer
        self.errors: list[str] = []

    def count(self, kind: str) -> None:
        if self.measuring:
            self.requests[kind] += 1

    def error(self, what: str) -> None:
        if len(self.errors) < 20:
            self.errors.append(what[:200])
        self.requests["errors"] += 1


async def heartbeats(port: int, agent: dict[str, Any], interval: float, tally: Tally) -> None:
    loop = asyncio.get_running_loop()
    next_at = loop.time() + random.uniform(0, interval)  # spread over the interval
    body = {"session": agent["session"], "running": [], "devices": [{"index": 0, "utilization": 0.0, "power_w": 0.0}]}
    while True:
        await asyncio.sleep(max(0.0, next_at - loop.time()))
        next_at += interval
        started = time.perf_counter()
        try:
            status, answer = await Conn(port).request("/api/v1/agent/heartbeat/", body, agent["secret"], close=True)
        except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
            tally.error(f"heartbeat: {type(exc).__name__}: {exc}")
            continue
        if tally.measuring:
            tally.heartbeat_s.append(time.perf_counter() - started)
            tally.heartbeat_at.append(time.time() - tally.heartbeat_s[-1])
            tally.count("heartbeat")
        if status != 200:
            tally.error(f"heartbeat {status}: {answer}")


async def claims(port: int, agent: dict[str, Any], tally: Tally) -> None:
    conn = Conn(port)
    body = {"session": agent["session"], "wait_s": CLAIM_WAIT_S, "free_devices": [0]}
    await asyncio.sleep(random.uniform(0, 5))  # agents start over a few seconds, not all in one instant
    while True:
        try:
            status, answer = await conn.request("/api/v1/agent/claim/", body, agent["secret"])
            now = time.time()
            tally.count("claim")
            if status != 200:
                tally.error(f"claim {status}: {answer}")
                tally.claim_answers["refused"] += tally.measuring
                await asyncio.sleep(5)
                continue
            specs = answer["assignments"]
            if tally.measuring:
                tally.claim_answers["work" if specs else "drain" if answer.get("drain") else "timeout"] += 1
            for spec in specs:
                tally.claimed_at[spec["attempt_id"]] = now
                report = {"attempt_id": spec["attempt_id"], "number": spec["number"], "node_rank": spec["node_rank"]}
                for event in ({"event": "started"}, {"event": "exited", "exit_code": 0}):
                    status, answer = await conn.request("/api/v1/agent/events/", {**report, **event}, agent["secret"])
                    tally.count("event")
                    if status != 200:
                        tally.error(f"event {status}: {answer}")
        except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
            tally.error(f"claim: {type(exc).__name__}: {exc}")
            await asyncio.sleep(1)


def _cpu_ticks() -> tuple[int, int]:
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    return sum(fields), fields[3] + fields[4]  # all, idle + iowait


async def ticker(tally: Tally) -> None:
    """Where a slow heartbeat comes from: is the client's own loop late (the harness starving),
    and is the machine's CPU saturated at that moment?"""
    tick = 0.05
    loop = asyncio.get_running_loop()
    total0, idle0 = _cpu_ticks()
    while True:
        before = loop.time()
        await asyncio.sleep(tick)
        if tally.measuring:
            now = time.time()
            tally.loop_lag.append((now, loop.time() - before - tick))
            total, idle = _cpu_ticks()
            if total > total0:
                tally.cpu_busy.append((now, (os.cpu_count() or 1) * (1 - (idle - idle0) / (total - total0))))
            total0, idle0 = total, idle


def _tail(tally: Tally, slow_s: float = 0.1) -> dict[str, Any]:
    """The slow heartbeats against the placement passes, the client's loop lag and the machine's CPU."""
    import bisect

    passes = sorted(a for a, _ in tally.placed_at)
    lag_t = [t for t, _ in tally.loop_lag]
    cpu_t = [t for t, _ in tally.cpu_busy]

    def since_pass(t: float) -> float | None:
        i = bisect.bisect_right(passes, t)
        return t - passes[i - 1] if i else None

    def around(series: list[tuple[float, float]], times: list[float], t0: float, t1: float) -> float:
        i, j = bisect.bisect_left(times, t0), bisect.bisect_right(times, t1 + 0.05)
        return max((v for _, v in series[i:j]), default=0.0)

    slow = sorted(((at, s) for at, s in zip(tally.heartbeat_at, tally.heartbeat_s, strict=True) if s >= slow_s),
                  key=lambda x: -x[1])
    offsets = [o for at, _ in slow if (o := since_pass(at)) is not None]
    all_offsets = [o for at in tally.heartbeat_at if (o := since_pass(at)) is not None]
    lags = [v for _, v in tally.loop_lag]
    busy = [v for _, v in tally.cpu_busy]
    return {
        "slow_threshold_ms": slow_s * 1000, "slow": len(slow),
        # Where in the placement cycle a heartbeat starts: all of them, and the slow ones.
        "slow_within_1s_of_pass": sum(1 for o in offsets if o < 1.0), "all_within_1s_of_pass": sum(1 for o in all_offsets if o < 1.0),
        "pass_ms_p50": round(percentile([b - a for a, b in tally.placed_at], 0.5) * 1000, 1),
        "client_loop_lag_ms": {"p50": round(percentile(lags, 0.5) * 1000, 1), "p99": round(percentile(lags, 0.99) * 1000, 1),
                               "max": round(max(lags, default=0) * 1000, 1)},
        "machine_cores_busy": {"p50": round(percentile(busy, 0.5), 2), "p90": round(percentile(busy, 0.9), 2)},
        "slowest": [{"ms": round(s * 1000, 1), "after_pass_s": round(o, 2) if (o := since_pass(at)) is not None else None,
                     "client_lag_ms": round(around(tally.loop_lag, lag_t, at, at + s) * 1000, 1),
                     "cores_busy": round(around(tally.cpu_busy, cpu_t, at, at + s), 2)} for at, s in slow[:25]],
    }


def percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def web_memory(pid: int) -> dict[str, Any]:
    """The gunicorn master and its workers: RSS summed, PSS summed (shared pages counted once), threads."""
    procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    rss = pss = 0
    threads = []
    for p in procs:
        with_pss = p.memory_full_info()
        rss += with_pss.rss
        pss += getattr(with_pss, "pss", with_pss.rss)
        threads.append(p.num_threads())
    return {"rss_mib": round(rss / 2**20, 1), "pss_mib": round(pss / 2**20, 1), "processes": len(procs), "threads": threads}


class Sampler:
    """Every few seconds in the window: the web's memory, and the database connections open."""

    def __init__(self, web_pid: int, db: str) -> None:
        self.web_pid, self.db = web_pid, db
        self.memory: list[dict[str, Any]] = []
        self.connections: list[int] = []

    async def run(self) -> None:
        import psycopg

        with psycopg.connect(self.db, autocommit=True) as conn:
            while True:
                self.memory.append(web_memory(self.web_pid))
                row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()").fetchone()
                self.connections.append(int(row[0]) - 1 if row else 0)
                await asyncio.sleep(5)


def statements(db: str, *, reset: bool) -> list[tuple[str, int]]:
    import psycopg

    with psycopg.connect(db, autocommit=True) as conn:
        if reset:
            conn.execute("SELECT pg_stat_statements_reset()")
            return []
        rows = conn.execute("SELECT query, calls FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database "
                            "WHERE datname = current_database())").fetchall()
    return [(str(q), int(c)) for q, c in rows]


async def drive(args: argparse.Namespace, port: int, web_pid: int, db: str, setup: dict[str, Any],
                placer: subprocess.Popen[str]) -> dict[str, Any]:
    tally = Tally()
    tasks = [asyncio.create_task(heartbeats(port, a, args.interval, tally)) for a in setup["agents"]]
    tasks += [asyncio.create_task(claims(port, a, tally)) for a in setup["agents"]]
    print(f"{len(setup['agents'])} agents up; warming up {WARMUP_S:.0f} s ...", flush=True)
    await asyncio.sleep(WARMUP_S)
    sampler = Sampler(web_pid, db)
    tasks.append(asyncio.create_task(sampler.run()))
    tasks.append(asyncio.create_task(ticker(tally)))
    statements(db, reset=True)
    tally.measuring = True
    started, mono0 = time.time(), time.monotonic()
    placed = passes = 0
    print(f"measuring {args.duration:.0f} s: placing {args.place} run(s) every {args.place_every:g} s ...", flush=True)
    # The last placement leaves a few seconds for its claims inside the window.
    while time.monotonic() - mono0 < args.duration - 5:
        await asyncio.sleep(args.place_every)
        assert placer.stdin is not None and placer.stdout is not None
        asked = time.time()
        placer.stdin.write(f"{args.place}\n")
        placer.stdin.flush()
        placed += (await asyncio.get_running_loop().run_in_executor(None, _answer, placer, "placed"))["placed"]
        tally.placed_at.append((asked, time.time()))
        passes += 1
    await asyncio.sleep(max(0.0, args.duration - (time.monotonic() - mono0)))
    elapsed = time.monotonic() - mono0
    tally.measuring = False
    stmts = statements(db, reset=False)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return _figures(args, tally, sampler, stmts, db, started, elapsed, placed, passes)


def _figures(args: argparse.Namespace, tally: Tally, sampler: Sampler, stmts: list[tuple[str, int]], db: str, started: float,
             elapsed: float, placed: int, passes: int) -> dict[str, Any]:
    import psycopg

    with psycopg.connect(db) as conn:
        rows = conn.execute("SELECT attempt_id, created_at, claimed_at FROM runs_assignment WHERE created_at >= %s",
                            [datetime.fromtimestamp(started).astimezone()]).fetchall()
    latency = [tally.claimed_at[a] - c.timestamp() for a, c, _ in rows if a in tally.claimed_at]
    server = [(cl - c).total_seconds() for _, c, cl in rows if cl is not None]
    unclaimed = sum(1 for a, _, _ in rows if a not in tally.claimed_at)
    total_calls = sum(c for _, c in stmts)
    auth_calls = sum(c for q, c in stmts if AUTH in q)
    claim_only = sum(c for q, c in stmts if any(s in q for s in CLAIM_ONLY))
    agent_requests = tally.requests["heartbeat"] + tally.requests["claim"] + tally.requests["event"]
    # Authentication runs once per agent request: the claims' share of it is theirs.
    claim_auth = auth_calls * tally.requests["claim"] / agent_requests if agent_requests else 0.0
    idle_claims = tally.claim_answers["timeout"]
    memory = sampler.memory[-1] if sampler.memory else {}
    hb = tally.heartbeat_s
    figures = {
        "agents": args.idle_agents, "seconds": round(elapsed, 1), "claim_wait_s": CLAIM_WAIT_S,
        "heartbeat": {"requests": len(hb), "per_s": round(len(hb) / elapsed, 1), "p50_ms": round(percentile(hb, 0.5) * 1000, 1),
                      "p99_ms": round(percentile(hb, 0.99) * 1000, 1), "max_ms": round(max(hb, default=0) * 1000, 1)},
        "placement_to_claim": {"placed": placed, "passes": passes, "assignments": len(rows), "measured": len(latency),
                               "unclaimed_at_end": unclaimed, "p50_ms": round(percentile(latency, 0.5) * 1000, 1),
                               "p99_ms": round(percentile(latency, 0.99) * 1000, 1),
                               "max_ms": round(max(latency, default=0) * 1000, 1),
                               "server_claimed_p99_ms": round(percentile(server, 0.99) * 1000, 1)},
        "claims": {"answers": dict(tally.claim_answers), "requests_per_s": round(tally.requests["claim"] / elapsed, 1)},
        "database": {
            "statements_per_s": round(total_calls / elapsed, 1),
            "from_claims_per_s": round((claim_only + claim_auth) / elapsed, 1),
            "per_idle_claim": round((claim_only + claim_auth) / max(1, tally.requests["claim"]), 2),
            "while_waiting_per_s": 0.0 if idle_claims else None,  # see tests/nodes/test_claim_wakeups.py
            "connections_max": max(sampler.connections, default=0),
            "top": [{"calls_per_s": round(c / elapsed, 1), "query": q[:160]} for q, c in sorted(stmts, key=lambda x: -x[1])[:8]],
        },
        "web": {"peak_rss_mib": max((m["rss_mib"] for m in sampler.memory), default=0), **memory},
        "errors": tally.requests["errors"], "error_samples": tally.errors,
        "tail": _tail(tally),
    }
    figures["targets"] = {
        "heartbeat_p99_under_200ms": figures["heartbeat"]["p99_ms"] < 200,
        "placement_to_claim_p99_under_1s": figures["placement_to_claim"]["p99_ms"] < 1000 and unclaimed == 0,
        "no_errors": figures["errors"] == 0,
    }
    return figures


def report(figures: dict[str, Any]) -> None:
    hb, pc, db, web = figures["heartbeat"], figures["placement_to_claim"], figures["database"], figures["web"]
    print(f"\n{figures['agents']} agents, {figures['seconds']} s measured (claims wait {figures['claim_wait_s']} s)")
    print(f"heartbeats: {hb['requests']} ({hb['per_s']}/s), p50 {hb['p50_ms']} ms, p99 {hb['p99_ms']} ms, max {hb['max_ms']} ms")
    print(f"placement -> claim: {pc['measured']} of {pc['assignments']} assignments ({pc['passes']} passes), p50 {pc['p50_ms']} ms, "
          f"p99 {pc['p99_ms']} ms, max {pc['max_ms']} ms; unclaimed at the end {pc['unclaimed_at_end']}")
    print(f"claims: {figures['claims']['requests_per_s']}/s, answers {figures['claims']['answers']}")
    print(f"database: {db['statements_per_s']} statements/s in all; from claims {db['from_claims_per_s']}/s "
          f"({db['per_idle_claim']} per claim request, none while waiting); at most {db['connections_max']} connections")
    for row in db["top"]:
        print(f"  {row['calls_per_s']:>8}/s  {row['query'][:110]}")
    print(f"web: {web.get('processes')} processes, threads {web.get('threads')}, RSS {web.get('rss_mib')} MiB "
          f"(PSS {web.get('pss_mib')} MiB, peak RSS {web['peak_rss_mib']} MiB)")
    tail = figures["tail"]
    print(f"slow heartbeats (>= {tail['slow_threshold_ms']:.0f} ms): {tail['slow']}, {tail['slow_within_1s_of_pass']} of them "
          f"started within 1 s of a placement pass (of all heartbeats: {tail['all_within_1s_of_pass']}); client loop lag "
          f"{tail['client_loop_lag_ms']}; machine cores busy {tail['machine_cores_busy']}")
    for row in tail["slowest"][:8]:
        print(f"  {row}")
    print(f"errors: {figures['errors']}" + "".join(f"\n  {e}" for e in figures["error_samples"]))
    for name, ok in figures["targets"].items():
        print(f"  {'met ' if ok else 'MISSED'} {name}")


def _answer(placer: subprocess.Popen[str], key: str) -> dict[str, Any]:
    """The helper's next JSON line holding `key` (Django's shell may print other lines first)."""
    assert placer.stdout is not None
    while line := placer.stdout.readline():
        if line.startswith("{") and key in (found := json.loads(line)):
            return dict(found)
    raise RuntimeError(f"bench/_place_idle.py exited with {placer.wait()}")


def run(args: argparse.Namespace, py: str, env: dict[str, str], db: str, port: int, web_pid: int) -> dict[str, Any]:
    """Set up N idle nodes, start the placement helper, drive the agents; returns the figures."""
    out = subprocess.run([py, "manage.py", "shell", "-c", (HERE / "_setup_idle.py").read_text()], cwd=ROOT,
                         env={**env, "BENCH_AGENTS": str(args.idle_agents)}, check=True, capture_output=True, text=True)
    setup = json.loads(out.stdout.strip().splitlines()[-1])
    import psycopg

    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        conn.execute("UPDATE nodes_node SET last_heartbeat_at = now() WHERE hostname LIKE 'idle-%%'")
    placer = subprocess.Popen([py, "manage.py", "shell", "-c", (HERE / "_place_idle.py").read_text()], cwd=ROOT, text=True,
                              env={**env, "BENCH_POOL": str(setup["pool"]), "BENCH_PROJECT": str(setup["project"]),
                                   "BENCH_TEMPLATE": str(setup["template"])},
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert placer.stdout is not None
        _answer(placer, "ready")
        figures = asyncio.run(drive(args, port, web_pid, db, setup, placer))
    finally:
        if placer.stdin is not None:
            placer.stdin.close()
        placer.wait(30)
    figures["config"] = {"web": env.get("BENCH_WEB_ARGV", ""), "interval_s": args.interval, "place": args.place,
                         "place_every_s": args.place_every, "python": sys.version.split()[0], "cpus": os.cpu_count()}
    return figures
