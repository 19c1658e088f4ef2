"""``trainyard import-mlflow``: copy an MLflow server's experiment into a Trainyard project.

Reads the source with MLflow's REST API (runs, params, tags, full metric histories, artifacts
through its ``mlflow-artifacts`` proxy or a local artifact folder) and writes through the portal's
own MLflow API under ``/mlflow/`` with the user's token, so imported runs are tracked-only runs
like any an MLflow client logs. Each imported run carries the tag ``trainyard.mlflow_source``
(server, run id): a second import of the same experiment skips what is already there.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from trainyard import _config
from trainyard._clibase import EXIT_AUTH, EXIT_NOT_FOUND, EXIT_OK, EXIT_REFUSED, EXIT_SERVER, CliError, _out

SOURCE_TAG = "trainyard.mlflow_source"
API = "/api/2.0/mlflow/"
ARTIFACTS = "/api/2.0/mlflow-artifacts/artifacts"
BATCH_METRICS, BATCH_KEYS = 1000, 100
ENDED = ("FINISHED", "FAILED", "KILLED")


class HttpFailed(Exception):
    def __init__(self, status: int, error_code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.error_code, self.message = status, error_code, message


class Endpoint:
    """One MLflow tracking server (the source, or the portal's /mlflow/), JSON over urllib."""

    def __init__(self, base: str, token: str | None, timeout: float) -> None:
        self.base, self.token, self.timeout = base.rstrip("/"), token, timeout

    def _open(self, method: str, path: str, *, query: dict[str, Any] | None = None, data: Any = None,
              headers: dict[str, str] | None = None) -> Any:
        url = self.base + path + ("?" + urllib.parse.urlencode(query, doseq=True) if query else "")
        all_headers = dict(headers or {})
        if self.token:
            all_headers["Authorization"] = f"Bearer {self.token}"
        request = urllib.request.Request(url, data=data, method=method, headers=all_headers)
        try:
            return urllib.request.urlopen(request, timeout=self.timeout)
        except urllib.error.HTTPError as err:
            raw = err.read().decode(errors="replace")
            try:
                body = json.loads(raw)
                code, message = str(body.get("error_code", "")), str(body.get("message", raw))
            except (ValueError, AttributeError):
                code, message = "", raw[:300]
            raise HttpFailed(err.code, code, f"{method} {url}: {err.code} {code} {message}".strip()) from None
        except (urllib.error.URLError, OSError) as err:
            raise CliError(f"cannot reach {self.base}: {err}", EXIT_SERVER) from None

    def call(self, endpoint: str, body: dict[str, Any] | None = None, *, query: dict[str, Any] | None = None) -> Any:
        if body is None:
            with self._open("GET", API + endpoint, query=query) as response:
                return json.loads(response.read() or b"{}")
        data = json.dumps(body).encode()
        with self._open("POST", API + endpoint, data=data, headers={"Content-Type": "application/json"}) as response:
            return json.loads(response.read() or b"{}")

    def artifact_list(self, path: str) -> list[dict[str, Any]]:
        with self._open("GET", ARTIFACTS, query={"path": path}) as response:
            return list(json.loads(response.read() or b"{}").get("files", []))

    def artifact_get(self, path: str, into: IO[bytes]) -> None:
        with self._open("GET", f"{ARTIFACTS}/{urllib.parse.quote(path)}") as response:
            shutil.copyfileobj(response, into)

    def artifact_put(self, path: str, source: Path) -> None:
        with source.open("rb") as body:
            headers = {"Content-Type": "application/octet-stream", "Content-Length": str(source.stat().st_size)}
            with self._open("PUT", f"{ARTIFACTS}/{urllib.parse.quote(path)}", data=body, headers=headers):
                pass


@dataclass
class Tally:
    runs: int = 0
    skipped: int = 0
    params: int = 0
    points: int = 0
    artifacts: int = 0
    artifact_bytes: int = 0
    warnings: list[str] = field(default_factory=list)


def _pages(source: Endpoint, endpoint: str, body: dict[str, Any], items: str) -> Iterator[dict[str, Any]]:
    token: str | None = None
    while True:
        page = source.call(endpoint, {**body, **({"page_token": token} if token else {})})
        yield from page.get(items, [])
        token = page.get("next_page_token")
        if not token:
            return


def _history(source: Endpoint, run_id: str, key: str) -> list[dict[str, Any]]:
    points: list[dict[str, Any]] = []
    token: str | None = None
    while True:
        query = {"run_id": run_id, "run_uuid": run_id, "metric_key": key, **({"page_token": token} if token else {})}
        page = source.call("metrics/get-history", query=query)
        points += page.get("metrics", [])
        token = page.get("next_page_token")
        if not token:
            return points


def _artifact_files(source: Endpoint, root: str, sub: str = "") -> Iterator[str]:
    for entry in source.artifact_list(f"{root}/{sub}" if sub else root):
        rel = f"{sub}/{entry['path']}" if sub else str(entry["path"])
        if entry.get("is_dir"):
            yield from _artifact_files(source, root, rel)
        else:
            yield rel


def _copy_artifacts(source: Endpoint, dest: Endpoint, run: dict[str, Any], dest_uri: str, tally: Tally) -> None:
    uri = str(run["info"].get("artifact_uri") or "")
    target = dest_uri.removeprefix("mlflow-artifacts:").lstrip("/")
    with tempfile.TemporaryDirectory(prefix="trainyard-import-") as tmp:
        scratch = Path(tmp) / "file"
        if uri.startswith("mlflow-artifacts:"):
            root = urllib.parse.urlparse(uri).path.lstrip("/")
            for rel in _artifact_files(source, root):
                with scratch.open("wb") as out:
                    source.artifact_get(f"{root}/{rel}", out)
                _put(dest, f"{target}/{rel}", scratch, tally)
            return
        local = Path(urllib.parse.urlparse(uri).path if uri.startswith("file:") else uri)
        if uri and local.is_dir():
            for path in sorted(p for p in local.rglob("*") if p.is_file()):
                _put(dest, f"{target}/{path.relative_to(local).as_posix()}", path, tally)
            return
        if uri:
            tally.warnings.append(f"run {run['info']['run_id']}: artifacts at {uri} are not reachable from here (not copied)")


def _put(dest: Endpoint, path: str, source: Path, tally: Tally) -> None:
    dest.artifact_put(path, source)
    tally.artifacts += 1
    tally.artifact_bytes += source.stat().st_size


def _chunks(items: list[Any], size: int) -> Iterator[list[Any]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


def _import_run(source: Endpoint, dest: Endpoint, run: dict[str, Any], dest_experiment: str, marker: str, tally: Tally) -> None:
    info, data = run["info"], run.get("data", {})
    tags = [t for t in data.get("tags", []) if t.get("key") != SOURCE_TAG] + [{"key": SOURCE_TAG, "value": marker}]
    created = dest.call("runs/create", {"experiment_id": dest_experiment, "start_time": info.get("start_time"),
                                        "run_name": info.get("run_name", ""), "tags": tags[:BATCH_KEYS]})
    new_id = created["run"]["info"]["run_id"]
    for chunk in _chunks(tags[BATCH_KEYS:], BATCH_KEYS):
        dest.call("runs/log-batch", {"run_id": new_id, "tags": chunk})
    params = data.get("params", [])
    for chunk in _chunks(params, BATCH_KEYS):
        dest.call("runs/log-batch", {"run_id": new_id, "params": chunk})
    tally.params += len(params)
    for key in sorted({m["key"] for m in data.get("metrics", [])}):
        points = [{"key": key, "value": p.get("value"), "timestamp": p.get("timestamp", 0), "step": p.get("step", 0)}
                  for p in _history(source, info["run_id"], key)]
        for chunk in _chunks(points, BATCH_METRICS):
            dest.call("runs/log-batch", {"run_id": new_id, "metrics": chunk})
        tally.points += len(points)
    _copy_artifacts(source, dest, run, created["run"]["info"]["artifact_uri"], tally)
    if info.get("status") in ENDED:
        dest.call("runs/update", {"run_id": new_id, "status": info["status"], "end_time": info.get("end_time")})
    tally.runs += 1


def _experiment_id(endpoint: Endpoint, name: str, where: str) -> str:
    try:
        found = endpoint.call("experiments/get-by-name", query={"experiment_name": name})
    except HttpFailed as err:
        if err.status == 404:
            raise CliError(f"no experiment {name!r} on {where}", EXIT_NOT_FOUND,
                           "on Trainyard, give a project of your team as team/project" if where == "Trainyard" else "") from None
        raise
    return str(found["experiment"]["experiment_id"])


def import_mlflow(*, source: Endpoint, dest: Endpoint, experiments: list[str], project: str, tally: Tally) -> None:
    dest_experiment = _experiment_id(dest, project, "Trainyard")
    done = {t["value"] for r in _pages(dest, "runs/search", {"experiment_ids": [dest_experiment], "max_results": 1000}, "runs")
            for t in r.get("data", {}).get("tags", []) if t.get("key") == SOURCE_TAG}
    for name in experiments:
        source_experiment = _experiment_id(source, name, source.base)
        body = {"experiment_ids": [source_experiment], "max_results": 1000, "run_view_type": "ACTIVE_ONLY"}
        runs = sorted(_pages(source, "runs/search", body, "runs"), key=lambda r: (r["info"].get("start_time") or 0, r["info"]["run_id"]))
        for run in runs:
            marker = f"{source.base} {run['info']['run_id']}"
            if marker in done:
                tally.skipped += 1
                continue
            _import_run(source, dest, run, dest_experiment, marker, tally)
            print(f"imported {name} run {run['info'].get('run_name') or run['info']['run_id']}", file=sys.stderr)


def cmd_import_mlflow(args: argparse.Namespace) -> int:
    cfg = _config.config_load()
    server = getattr(args, "server", None) or cfg.server
    if not server or not cfg.token:
        raise CliError("not logged in", EXIT_AUTH, "run `trainyard login --server URL`")
    source = Endpoint(args.source, args.from_token or os.environ.get("MLFLOW_SOURCE_TOKEN"), args.timeout)
    dest = Endpoint(server.rstrip("/") + "/mlflow", cfg.token, args.timeout)
    tally = Tally()
    try:
        import_mlflow(source=source, dest=dest, experiments=args.experiment, project=args.project, tally=tally)
    except HttpFailed as err:
        code = {401: EXIT_AUTH, 403: EXIT_REFUSED, 404: EXIT_NOT_FOUND}.get(err.status, EXIT_SERVER if err.status >= 500 else EXIT_REFUSED)
        raise CliError(f"import stopped after {tally.runs} runs: {err.message}", code) from None
    summary = {"runs": tally.runs, "skipped": tally.skipped, "params": tally.params, "metric_points": tally.points,
               "artifacts": tally.artifacts, "artifact_bytes": tally.artifact_bytes, "warnings": tally.warnings}
    if args.json:
        _out(summary)
    else:
        for warning in tally.warnings:
            print(f"warning: {warning}", file=sys.stderr)
        print(f"imported {tally.runs} runs into {args.project} ({tally.skipped} already there): {tally.params} params, "
              f"{tally.points} metric points, {tally.artifacts} artifacts ({tally.artifact_bytes} bytes)")
    return EXIT_OK


def add_parser(add: Any) -> None:
    """Registers the command with cli.build_parser's `add`."""
    p = add("import-mlflow", cmd_import_mlflow, "copy an MLflow server's experiment (runs, params, metrics, tags, artifacts) "
                                                "into a project")
    p.add_argument("--from", dest="source", required=True, metavar="URL", help="the MLflow server, e.g. http://host:5000")
    p.add_argument("--experiment", action="append", required=True, metavar="NAME", help="an experiment's name there (repeat)")
    p.add_argument("--project", "-p", required=True, help="the Trainyard project, as team/project")
    p.add_argument("--from-token", help="a bearer token for the MLflow server, if it wants one (or MLFLOW_SOURCE_TOKEN)")
