"""The ``trainyard`` command line: submit, watch and compare runs from a terminal.

Standard library only (argparse + urllib through :mod:`trainyard.client`). Tables and progress
go to the terminal; ``--json`` on every read command prints one JSON document on stdout instead
(``logs --follow --json`` prints one JSON object per chunk, a line each).
"""

from __future__ import annotations

import argparse
import getpass
import json
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trainyard import _config, _mlflow_import
from trainyard._cli_reports import cmd_budget, cmd_checkpoints, cmd_compare, cmd_nodes, cmd_queue, cmd_show
from trainyard._clibase import (
    EXIT_INTERRUPTED,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_TIMEOUT,
    EXIT_USAGE,
    FINISHED,
    CliError,
    Progress,
    _cell,
    _client,
    _kv_pairs,
    _local_time,
    _metric_table,
    _out,
    _run_result,
    _table,
    api_error_exit,
    is_sweep,
    progress_line,
)
from trainyard.client import (
    ApiError,
    AuthError,
    Client,
    ConnectionFailed,
    ServerError,
    git_commit_of,
    snapshot_tar,
)

EPILOG = """\
exit codes:
  0    ok
  1    the run failed or was cancelled (submit --wait, logs --follow)
  2    usage error (bad arguments)
  3    authentication error (not logged in, bad or revoked token)
  4    not found (no such run, project, template, metric or pool, or one of another team's)
  5    server or connection error (or --server is not the portal's root URL)
  6    refused by the server (validation, budget, quota, role, state conflict)
  7    --timeout-wait ran out; the run goes on
  130  interrupted (Ctrl-C); a run being waited on goes on

times are shown in your local time zone (YYYY-MM-DD HH:MM:SS); --json keeps the API's UTC ISO times.

environment:
  TRAINYARD_SERVER, TRAINYARD_TOKEN  override the server and token stored by `trainyard login`
  XDG_CONFIG_HOME                    the config file is $XDG_CONFIG_HOME/trainyard/config.json
                                     (default ~/.config/trainyard/config.json, mode 600)
"""


# --- small helpers --------------------------------------------------------------------------------

# Options whose values may start with "-" (descending orderings): argparse would take "-id" for
# an option and fail with "expected one argument".
DASH_VALUE_OPTIONS = ("--ordering",)
_DASH_VALUE = re.compile(r"-\w{2,}[\w,-]*")


def _attach_dash_values(argv: list[str]) -> list[str]:
    """`--ordering -id` as `--ordering=-id`, which argparse reads as a value."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        if argv[i] in DASH_VALUE_OPTIONS and i + 1 < len(argv) and _DASH_VALUE.fullmatch(argv[i + 1]):
            out.append(f"{argv[i]}={argv[i + 1]}")
            i += 2
            continue
        out.append(argv[i])
        i += 1
    return out


def _count(text: str) -> int:
    """An argparse type: a whole number, 0 or more (so a mistyped --limit -1 is a usage error)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 (no limit) or more, not {value}")
    return value


# --- commands -------------------------------------------------------------------------------------


def cmd_login(args: argparse.Namespace) -> int:
    server = (args.server or _config.config_load().server or "").rstrip("/")
    if not server:
        raise CliError("no server given", EXIT_USAGE, "run `trainyard login --server URL`")
    username = args.username or input("Username: ").strip()
    if args.password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    else:
        password = getpass.getpass(f"Password for {username}@{server}: ")
    if not password:
        raise CliError("empty password", EXIT_USAGE)
    client = Client.login(server, username, password, timeout=args.timeout)
    assert client.token is not None
    path = _config.config_save(server=server, token=client.token, username=username)
    print(f"logged in to {server} as {username}; token saved in {path}", file=sys.stderr)
    return EXIT_OK


def cmd_logout(args: argparse.Namespace) -> int:
    saved = _config.config_load(env=False)
    asked = (args.server or "").rstrip("/")
    if asked and saved.server and asked != saved.server.rstrip("/"):
        # The stored token is the only one logout knows, and it belongs to another server:
        # sending it there would hand the key to the wrong host.
        raise CliError(f"logged in to {saved.server}, not {asked}", EXIT_USAGE,
                       f"`trainyard logout` revokes and forgets the token for {saved.server}")
    if saved.server and saved.token:
        # Forgetting the key locally is not enough: a copy of the file would still work. Revoke it.
        try:
            client = Client(saved.server, saved.token, timeout=args.timeout)
            mine = [t for t in client.request("GET", "/api/v1/auth/tokens/")
                    if t.get("prefix") == saved.token[:10] and not t.get("revoked_at")]
            for token in mine:
                client.request("DELETE", f"/api/v1/auth/tokens/{token['id']}/")
            print(f"revoked the token on {saved.server}" if mine else "the token was already revoked", file=sys.stderr)
        except AuthError:
            # The server no longer takes it (revoked in the browser, or the user is gone): nothing left to revoke.
            print(f"the token no longer works on {saved.server} (already revoked); nothing to revoke", file=sys.stderr)
        except ApiError as err:
            print(f"warning: could not revoke the token on {saved.server} ({err}); revoke it at {saved.server}/account/tokens/",
                  file=sys.stderr)
    path = _config.config_path()
    path.unlink(missing_ok=True)
    print(f"removed {path}", file=sys.stderr)
    return EXIT_OK


def cmd_templates(args: argparse.Namespace) -> int:
    templates = _client(args).templates()
    if args.json:
        _out(templates)
        return EXIT_OK
    _table(["slug", "version", "kind", "title"], [[t["slug"], t["version"], t["kind"], t["title"]] for t in templates])
    return EXIT_OK


# Options of `trainyard submit` sent as the body keys of the same name.
SUBMIT_OPTIONS = ("name", "notes", "template_version", "init_run")


def _submission(args: argparse.Namespace) -> dict[str, Any]:
    """The submission `submit` sends (and `submit --dry-run` forecasts), but for the code snapshot."""
    params = _kv_pairs(args.param, "param", parse_json=True)
    tags = {k: str(v) for k, v in _kv_pairs(args.tag, "tag", parse_json=False).items()}
    template = args.template or ("custom" if args.code else None)
    if not template:
        raise CliError("give a TEMPLATE (see `trainyard templates`), or --code DIR for the custom template", EXIT_USAGE)
    if args.command is not None:
        params["command"] = args.command
    body: dict[str, Any] = {"project": args.project, "template": template, "params": params, "tags": tags,
                            "priority": args.priority, **{key: getattr(args, key) for key in SUBMIT_OPTIONS}}
    resources: dict[str, Any] = {}
    if getattr(args, "pool", None):
        resources["pool"] = args.pool
    if getattr(args, "pools", None):
        resources["pools"] = [name.strip() for name in args.pools.split(",") if name.strip()]
    if resources:
        body["resources"] = resources
    return body


def _upload_code(args: argparse.Namespace, client: Client) -> str:
    """Uploads ``--code DIR`` as a snapshot of the project; its sha256."""
    try:
        data = snapshot_tar(args.code)
    except FileNotFoundError as err:
        raise CliError(str(err), EXIT_USAGE) from None
    commit = git_commit_of(args.code)
    uploaded = client.upload_snapshot(project=args.project, data=data, git_commit=commit)
    snapshot = str(uploaded["sha256"])
    print(
        f"uploaded {args.code} ({len(data)} bytes, sha256 {snapshot[:12]}{', commit ' + commit[:12] if commit else ''})",
        file=sys.stderr,
    )
    return snapshot


def cmd_submit(args: argparse.Namespace) -> int:
    client = _client(args)
    body = _submission(args)
    if args.dry_run:
        return _forecast(client, args, body)
    if args.code:
        body["code_snapshot"] = _upload_code(args, client)
    run = client.submit(**body)
    url = f"{client.url}/runs/{run['id']}/"
    if not args.wait:
        if args.json:
            _out(run)
        else:
            print(f"submitted run {run['id']} ({run['status']}): {url}")
        return EXIT_OK
    print(f"submitted run {run['id']}: {url}", file=sys.stderr)
    return _wait(client, int(run["id"]), args, unit="runs" if is_sweep(run) else "steps")


def _forecast(client: Client, args: argparse.Namespace, body: dict[str, Any]) -> int:
    """`submit --dry-run`: the server's forecast for this submission; nothing is uploaded or queued."""
    if args.code and not Path(args.code).is_dir():
        raise CliError(f"{args.code}: not a directory", EXIT_USAGE)
    # Tags, name and the start run go along so the server refuses what the submission would.
    answer = client.forecast(**body)
    if args.json:
        _out(answer)
    else:
        print(answer["summary"])
    return EXIT_OK


def _wait(client: Client, run_id: int, args: argparse.Namespace, unit: str = "steps") -> int:
    bar = Progress(sys.stderr)
    deadline = time.monotonic() + args.timeout_wait if args.timeout_wait else None
    errors = 0
    try:
        while True:
            try:
                state = client.metric_keys(run_id)
                errors = 0
            except (ServerError, ConnectionFailed) as err:
                # A restarting server should not kill a long wait: keep polling a while.
                errors += 1
                if errors > 30:
                    raise
                bar.show(f"run {run_id}: {err}; retrying")
                time.sleep(min(10.0, args.poll * errors))
                continue
            info = state["run"]
            bar.show(progress_line(run_id, info["status"], info.get("progress") or {}, unit=unit))
            if info.get("is_finished") or info["status"] in FINISHED:
                break
            if deadline is not None and time.monotonic() > deadline:
                bar.done()
                raise CliError(
                    f"run {run_id} still {info['status']} after {args.timeout_wait:g}s; it goes on (not cancelled)",
                    EXIT_TIMEOUT,
                    f"`trainyard show {run_id}` to check on it",
                )
            time.sleep(args.poll)
    except KeyboardInterrupt:
        bar.done()
        print(f"stopped waiting; run {run_id} goes on (`trainyard cancel {run_id}` to stop it)", file=sys.stderr)
        return EXIT_INTERRUPTED
    bar.done()
    run = client.run(run_id)
    keys = client.metric_keys(run_id)["keys"]
    if args.json:
        _out({"run": run, "metrics": keys})
    else:
        line = f"run {run_id} {run['status']}"
        if run.get("status_reason"):
            line += f": {run['status_reason']}"
        print(line)
        if keys:
            _metric_table(keys)
    return _run_result(run["status"])


def cmd_runs(args: argparse.Namespace) -> int:
    tags = {k: str(v) for k, v in _kv_pairs(args.tag, "tag", parse_json=False).items()}
    runs = []
    for run in _client(args).runs(
        project=args.project, status=args.status, template=args.template, tags=tags, family=args.family, search=args.search,
        ordering=args.ordering,
    ):
        runs.append(run)
        if args.limit and len(runs) >= args.limit:
            break
    if args.json:
        _out(runs)
        return EXIT_OK
    if not runs:
        filtered = any([args.project, args.status, args.template, args.tag, args.family, args.search])
        print("no runs match these filters" if filtered else "no runs yet", file=sys.stderr)
        return EXIT_OK
    _table(
        ["id", "name", "project", "template", "status", "progress", "family", "created"],
        [
            [
                r["id"],
                r.get("name") or "",
                r.get("project_slug"),
                f"{r['template']}@{r.get('template_version')}",
                r["status"],
                "-" if r.get("progress") is None else f"{r['progress'] * 100:.0f}%",
                r.get("family") or "",
                _local_time(r.get("created_at")),
            ]
            for r in runs
        ],
    )
    return EXIT_OK


def cmd_logs(args: argparse.Namespace) -> int:
    client = _client(args)
    cursor = args.after
    if not args.follow:
        page = client.logs(args.run, after=cursor, limit=1000)
        chunks = list(page["chunks"])
        while page.get("more"):
            page = client.logs(args.run, after=page["next"], limit=1000)
            chunks += page["chunks"]
        if args.json:
            _out({"chunks": chunks, "next": chunks[-1]["id"] if chunks else cursor})
        else:
            for chunk in chunks:
                sys.stdout.write(chunk["text"])
            sys.stdout.flush()
        return EXIT_OK
    finished_seen = 0
    status = ""
    try:
        while True:
            page = client.logs(args.run, after=cursor, limit=1000)
            for chunk in page["chunks"]:
                if args.json:
                    sys.stdout.write(json.dumps(chunk) + "\n")
                else:
                    sys.stdout.write(chunk["text"])
            sys.stdout.flush()
            cursor = page["next"]
            if page.get("more"):
                continue
            status = client.metric_keys(args.run)["run"]["status"]
            if status in FINISHED:
                # Agents ship the last lines around the moment they report the exit: drain for
                # one more quiet poll after the run ends before stopping.
                finished_seen += 1
                if finished_seen > 1 and not page["chunks"]:
                    break
            time.sleep(args.poll)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    if not args.json:
        print(f"-- run {args.run} {status}", file=sys.stderr)
    return _run_result(status)


def cmd_metrics(args: argparse.Namespace) -> int:
    client = _client(args)
    data = client.metrics(args.run, args.key, max_points=args.max_points)
    series = data.get("series") or []
    missing = [str(s.get("key")) for s in series if not s.get("count")] or ([] if series else [args.key])
    if missing:
        # The API answers an unknown key with an empty series; --json or not, that is not found.
        raise _no_such_metric(client, args.run, missing)
    if args.json:
        _out(data)
        return EXIT_OK
    for s in series:
        print(
            f"# {s.get('key')}: {s['count']} points, {len(s.get('x') or [])} shown (bucket {s.get('bucket_steps')} steps); "
            f"min {_cell(s.get('true_min'))} max {_cell(s.get('true_max'))}",
            file=sys.stderr,
        )
        _table(
            [s.get("x_axis") or "step", "mean", "min", "max"],
            zip(s.get("x") or [], s.get("mean") or [], s.get("min") or [], s.get("max") or [], strict=False),
        )
    return EXIT_OK


def _no_such_metric(client: Client, run_id: int, missing: list[str]) -> CliError:
    known = [str(k["key"]) for k in client.metric_keys(run_id).get("keys") or []]
    names = ", ".join(repr(k) for k in missing)
    found = f"its metrics: {', '.join(known)}" if known else "it has logged no metrics yet"
    return CliError(f"run {run_id} has no metric {names} ({found})", EXIT_NOT_FOUND,
                    f"`trainyard keys {run_id}` lists them with summaries")


def cmd_keys(args: argparse.Namespace) -> int:
    data = _client(args).metric_keys(args.run)
    if args.json:
        _out(data)
        return EXIT_OK
    if not data["keys"]:
        print(f"run {args.run} has logged no metrics yet ({data['run']['status']})", file=sys.stderr)
        return EXIT_OK
    _metric_table(data["keys"])
    return EXIT_OK


def cmd_cancel(args: argparse.Namespace) -> int:
    run = _client(args).cancel(args.run)
    if args.json:
        _out(run)
    else:
        print(
            f"run {run['id']} {run['status']}" + (" (cancel requested; the job is being stopped)" if run["status"] not in FINISHED else "")
        )
    return EXIT_OK


# --- parser ---------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    def add_timeout(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
        p.add_argument("--timeout", type=float, default=30.0, help="seconds per HTTP request (default 30)")
        return p

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--server", help="portal URL (default: TRAINYARD_SERVER, else the one `trainyard login` stored)")
    add_timeout(common)
    reader = argparse.ArgumentParser(add_help=False)
    reader.add_argument("--json", action="store_true", help="print machine-readable JSON on stdout")

    parser = argparse.ArgumentParser(
        prog="trainyard",
        description="Submit, watch and compare Trainyard training runs.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version="trainyard 0.1.0")
    sub = parser.add_subparsers(dest="cmd", metavar="COMMAND")

    def add(name: str, func: Callable[[argparse.Namespace], int], help_text: str, read: bool = True,
            parents: list[argparse.ArgumentParser] | None = None) -> argparse.ArgumentParser:
        p = sub.add_parser(
            name,
            parents=parents if parents is not None else [common, reader] if read else [common],
            help=help_text,
            description=help_text,
            epilog=EPILOG,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        p.set_defaults(func=func)
        return p

    p = add("login", cmd_login, "get an API token and store it (config file, mode 600)", read=False)
    p.add_argument("--username", "-u", help="your username (prompted if missing)")
    p.add_argument("--password-stdin", action="store_true", help="read the password from standard input")
    # Not `common`: logout acts on the stored login alone; TRAINYARD_SERVER and TRAINYARD_TOKEN do not apply.
    p = add("logout", cmd_logout, "revoke the token `trainyard login` stored, on its server, and delete it here",
            parents=[add_timeout(argparse.ArgumentParser(add_help=False))])
    p.add_argument("--server", help="only a check: refuse unless this is the server logged in to")

    add("templates", cmd_templates, "list the published job templates")

    p = add("submit", cmd_submit, "submit a run from a template (or your own code with --code)")
    p.add_argument("template", nargs="?", help="template slug, e.g. digits-classifier (default with --code: custom)")
    p.add_argument("--project", "-p", required=True, help="project id or team/project")
    p.add_argument(
        "--param", action="append", default=[], metavar="KEY=VALUE", help="a parameter; VALUE is JSON if it parses, else a string (repeat)"
    )
    p.add_argument(
        "--tag", action="append", default=[], metavar="KEY=VALUE", help="a tag (repeat); task, dataset, candidate and family are required"
    )
    p.add_argument("--priority", default="normal", choices=["urgent", "normal", "low"], help="queue class (default normal)")
    p.add_argument("--pool", help="the pool to run in (default: the template's)")
    p.add_argument("--pools", metavar="A,B", help="several acceptable pools, e.g. a100,h100: the scheduler places the run "
                                                  "where it is predicted to finish first")
    p.add_argument("--name", default="", help="a display name")
    p.add_argument("--notes", help="free text shown on the run's page (at most 2,000 characters)")
    p.add_argument("--template-version", type=int, help="a specific published template version")
    p.add_argument("--init-run", help="fine-tune/evaluate: the run whose latest checkpoint to start from")
    p.add_argument("--code", metavar="DIR", help="tar DIR (leaving out VCS folders, caches, virtualenvs, *.pyc and links), "
                                                 "upload it and run it")
    p.add_argument("--command", help="the command the custom template runs in DIR, e.g. 'python train.py'")
    p.add_argument("--dry-run", action="store_true", help="queue nothing: say where the run would stand and when it would start")
    p.add_argument("--wait", action="store_true", help="show progress until the run ends; exit 0 if it succeeded, 1 if not")
    p.add_argument("--poll", type=float, default=1.0, help="seconds between polls with --wait (default 1)")
    p.add_argument("--timeout-wait", type=float, default=0,
                   help="stop waiting after this many seconds (0 = never); exit 7, the run goes on")

    p = add("runs", cmd_runs, "list runs (newest first)")
    p.add_argument("--project", "-p", help="project id or team/project")
    p.add_argument("--status", help="one status or several, comma-separated")
    p.add_argument("--template", help="template slug")
    p.add_argument("--tag", action="append", default=[], metavar="KEY=VALUE", help="require this tag (repeat)")
    p.add_argument("--family", help="runs of one family (a sweep)")
    p.add_argument("--search", help="match name, family or id")
    p.add_argument("--limit", type=_count, default=0, help="at most this many runs (0 = all)")
    p.add_argument("--ordering", help="sort field, '-' for descending: created_at, updated_at, finished_at, status, "
                                      "priority, id ... (default -created_at; `--ordering -id` works)")

    p = add("show", cmd_show, "show one run: status, progress, params, attempts, cost")
    p.add_argument("run", type=int)

    p = add("logs", cmd_logs, "print a run's log; --follow streams it until the run ends")
    p.add_argument("run", type=int)
    p.add_argument("--follow", "-f", action="store_true", help="keep streaming until the run ends (exit code as submit --wait)")
    p.add_argument("--after", type=int, default=0, help="start after this chunk id (cursor)")
    p.add_argument("--poll", type=float, default=1.0, help="seconds between polls with --follow (default 1)")

    p = add("metrics", cmd_metrics, "a metric's (downsampled) series")
    p.add_argument("run", type=int)
    p.add_argument("key", help="metric key; several comma-separated")
    p.add_argument("--max-points", type=int, default=None, help="at most this many points (server default 500)")

    p = add("keys", cmd_keys, "a run's metric keys with last/min/max summaries")
    p.add_argument("run", type=int)

    p = add("checkpoints", cmd_checkpoints, "a run's checkpoints")
    p.add_argument("run", type=int)

    p = add("compare", cmd_compare, "compare runs side by side: differing params and metric summaries")
    p.add_argument("runs", type=int, nargs="+", metavar="RUN")
    p.add_argument("--keys", help="metric keys, comma-separated (default: all, up to 20)")
    p.add_argument("--all", action="store_true", help="also show params and tags that do not differ")
    p.add_argument("--open", action="store_true", help="print the compare page's URL for the browser instead")

    p = add("queue", cmd_queue, "queued runs in order, with position, reason and estimated start")
    p.add_argument("--pool", help="only this pool")

    p = add("budget", cmd_budget, "a project's spend against its budget this period")
    p.add_argument("project", help="project id or team/project")

    p = add("cancel", cmd_cancel, "cancel a run (a sweep cancels its children)", read=True)
    p.add_argument("run", type=int)

    add("nodes", cmd_nodes, "nodes and pools, with free and used devices")
    _mlflow_import.add_parser(add)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(_attach_dash_values(sys.argv[1:] if argv is None else list(argv)))
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        return int(args.func(args))
    except CliError as err:
        code, message, hint = err.code, err.message, err.hint
    except ApiError as err:
        code, message, hint = api_error_exit(err, args)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return EXIT_OK  # `trainyard runs | head`
    print(f"error: {message}" + (f" — {hint}" if hint else ""), file=sys.stderr)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
