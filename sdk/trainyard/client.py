"""A small HTTP client for the Trainyard REST API (``/api/v1/``). Standard library only.

    from trainyard import Client, ApiError
    client = Client("http://127.0.0.1:8000", token="ty_...")
    run = client.submit(project="vision/digits", template="digits-classifier",
                        params={"steps": 100}, tags={"task": "digits", "dataset": "sklearn-digits",
                                                     "candidate": "baseline", "family": "demo"})
    for r in client.runs(project="vision/digits", status="running"):
        print(r["id"], r["status"])

Every error the server answers comes back as an :class:`ApiError` subclass carrying the API's
error shape ``{"error": {"status", "code", "message", "fields"}}``; a server that cannot be
reached is a :class:`ConnectionFailed` (status 0), and an answer that is not the API's JSON (an
HTML page: the URL is not the portal's root) a :class:`NotTheApi`.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import tarfile
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

JSON = dict[str, Any]

# Directories never worth shipping in a code snapshot (and often huge).
SNAPSHOT_SKIP_DIRS = frozenset({".git", "__pycache__", ".venv", "venv", ".mypy_cache", ".pytest_cache", ".ruff_cache",
                                "node_modules", "trainyard-local"})


def is_id(text: str) -> bool:
    """A plain number such as a run or project id: ASCII digits only (str.isdigit() takes "³",
    which int() refuses)."""
    return text.isascii() and text.isdecimal()


class ApiError(Exception):
    """An error answered by the API (or 0 when the server could not be reached)."""

    def __init__(self, status: int, code: str, message: str, fields: Mapping[str, list[str]] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.fields: dict[str, list[str]] = dict(fields or {})

    def __str__(self) -> str:
        if not self.fields:
            return self.message
        # Errors of the whole submission come under "non_field_errors": shown as themselves.
        details = "; ".join(' '.join(v) if k == "non_field_errors" else f"{k}: {' '.join(v)}" for k, v in self.fields.items())
        return self.message if details in self.message else f"{self.message} ({details})"


class ValidationError(ApiError):
    """400: bad input; ``fields`` names each bad field."""


class AuthError(ApiError):
    """401: no credentials, or a revoked or wrong token."""


class PermissionDenied(ApiError):
    """403: your role may not do this."""


class NotFoundError(ApiError):
    """404: no such object, or one of another team's."""


class ConflictError(ApiError):
    """409: the object is in a state where the action does not apply (e.g. the run finished)."""


class RateLimited(ApiError):
    """429: too many requests (token requests are limited per minute)."""


class ServerError(ApiError):
    """5xx: the server failed; retrying later may help."""


class ConnectionFailed(ApiError):
    """The server could not be reached at all (status 0)."""


class NotTheApi(ApiError):
    """Something answered, but not the Trainyard API: a page instead of its JSON, usually because
    the URL is not the portal's root (``http://host:8000/runs`` instead of ``http://host:8000``)."""


NOT_THE_API_HINT = "not the Trainyard API (is --server the portal's root URL, e.g. http://host:8000?)"


_BY_STATUS: dict[int, type[ApiError]] = {400: ValidationError, 401: AuthError, 403: PermissionDenied, 404: NotFoundError,
                                         409: ConflictError, 429: RateLimited}


def error_from_response(status: int, raw: bytes, url: str = "") -> ApiError:
    """Builds the matching ApiError subclass from an error response body of any shape.

    A body that is not JSON did not come from the API (its errors are always JSON), so its
    status says nothing about the object asked for: a 404 page is a wrong base URL, not a
    missing run. Such an answer is a NotTheApi (a ServerError for 5xx: a failing proxy or
    server), and the page itself is left out of the message."""
    code, message, fields = "error", f"HTTP {status}", {}
    try:
        body = json.loads(raw.decode("utf-8")) if raw else None
    except (UnicodeDecodeError, ValueError):
        body = None
    source = f"HTTP {status} from {url}" if url else f"HTTP {status}"
    if raw and body is None:
        if status >= 500:
            return ServerError(status, "server_error", f"{source}: the server (or a proxy in front of it) failed")
        return NotTheApi(status, "not_the_api", f"{source}: {NOT_THE_API_HINT}")
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        err = body["error"]
        code = str(err.get("code") or code)
        message = str(err.get("message") or message)
        raw_fields = err.get("fields") or {}
        if isinstance(raw_fields, dict):
            fields = {str(k): [str(m) for m in (v if isinstance(v, list) else [v])] for k, v in raw_fields.items()}
    elif isinstance(body, dict) and "detail" in body:
        message = str(body["detail"])
    cls = _BY_STATUS.get(status) or (ServerError if status >= 500 else ApiError)
    return cls(status, code, message, fields)


def snapshot_tar(directory: str | os.PathLike[str]) -> bytes:
    """A .tar.gz of ``directory``'s regular files and folders, skipping VCS, caches and venvs.

    Symlinks are left out: the portal refuses archives with links, since they could point
    outside the unpacked folder.
    """
    root = Path(directory).resolve()
    if not root.is_dir():
        raise FileNotFoundError(f"{directory}: not a directory")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for current, dirs, files in os.walk(root):
            dirs[:] = sorted(d for d in dirs if d not in SNAPSHOT_SKIP_DIRS and not (Path(current) / d).is_symlink())
            for name in sorted(files):
                path = Path(current) / name
                if path.is_symlink() or not path.is_file() or name.endswith((".pyc", ".pyo")):
                    continue
                arcname = path.relative_to(root).as_posix()
                info = tar.gettarinfo(str(path), arcname=arcname)
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                with path.open("rb") as fh:
                    tar.addfile(info, fh)
    return buf.getvalue()


def git_commit_of(directory: str | os.PathLike[str]) -> str:
    """The HEAD commit if ``directory`` is inside a git work tree, else ''."""
    try:
        out = subprocess.run(["git", "-C", str(directory), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10,
                             check=False)
    except (OSError, subprocess.SubprocessError):
        return ""
    commit = out.stdout.strip()
    return commit if out.returncode == 0 and len(commit) >= 7 else ""


def submission_body(project: int | str, template: str, fields: Mapping[str, Any]) -> JSON:
    """The JSON body of a submission (or its forecast): the fields given, None ones left out."""
    body: JSON = {"project": str(project), "template": template}
    for key, value in fields.items():
        if value is not None:
            body[key] = dict(value) if isinstance(value, Mapping) else value
    return body


class Client:
    """The REST API as typed methods. ``url`` is the portal's base URL, ``token`` an API token."""

    def __init__(self, url: str, token: str | None = None, *, timeout: float = 30.0, user_agent: str = "trainyard-client/0.1") -> None:
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout
        self.user_agent = user_agent

    # --- transport --------------------------------------------------------------------------
    def request(self, method: str, path: str, *, params: Mapping[str, Any] | Iterable[tuple[str, Any]] | None = None,
                body: Any = None, data: bytes | None = None, content_type: str | None = None) -> Any:
        """One request; returns the decoded JSON (None for an empty body). Raises ApiError."""
        url = self._url(path, params)
        headers = {"Accept": "application/json", "User-Agent": self.user_agent}
        if self.token:
            headers["Authorization"] = f"Token {self.token}"
        if body is not None:
            data = json.dumps(body).encode()
            content_type = "application/json"
        if content_type:
            headers["Content-Type"] = content_type
        status, raw = self._send(method, url, headers, data)
        if status >= 400:
            raise error_from_response(status, raw, url)
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            raise NotTheApi(status, "not_the_api", f"HTTP {status} from {url}: {NOT_THE_API_HINT}") from None

    def _send(self, method: str, url: str, headers: dict[str, str], data: bytes | None) -> tuple[int, bytes]:
        """The HTTP exchange alone: (status, body) of any answer, error statuses included.
        Everything else (errors, JSON) is request()'s, so a test can swap this one method."""
        req = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return int(resp.status), resp.read()
        except urllib.error.HTTPError as err:
            return int(err.code), err.read()
        except (urllib.error.URLError, OSError) as err:
            reason = getattr(err, "reason", err)
            raise ConnectionFailed(0, "connection_failed", f"cannot reach {self.url}: {reason}") from None

    def _url(self, path: str, params: Mapping[str, Any] | Iterable[tuple[str, Any]] | None) -> str:
        if path.startswith(("http://", "https://")):
            # A pagination link: keep its path and query but our base, since the server may
            # build absolute links with a host name we did not use (proxies, 127.0.0.1 vs localhost).
            parts = urllib.parse.urlsplit(path)
            path = parts.path + (f"?{parts.query}" if parts.query else "")
        url = self.url + (path if path.startswith("/") else "/api/v1/" + path)
        if params:
            items = params.items() if isinstance(params, Mapping) else params
            pairs = [(k, str(v)) for k, v in items if v is not None and v != ""]
            if pairs:
                url += ("&" if "?" in url else "?") + urllib.parse.urlencode(pairs)
        return url

    def get(self, path: str, **params: Any) -> Any:
        return self.request("GET", path, params=params)

    def paginate(self, path: str, params: Mapping[str, Any] | Iterable[tuple[str, Any]] | None = None) -> Iterator[JSON]:
        """Yields every item of a list endpoint, following ``next`` links page by page.

        Lists take ``ordering`` ("-created_at"; an unknown field is a ValidationError) and, where
        items have an updated_at, ``updated_after`` (an ISO date-time) for cheap polling."""
        page: Any = self.request("GET", path, params=params)
        while True:
            if isinstance(page, list):  # an unpaginated list endpoint
                yield from page
                return
            if "results" not in page and isinstance(page.get("checkpoints"), list):  # a server from before pagination
                yield from page["checkpoints"]
                return
            yield from page.get("results", [])
            nxt = page.get("next")
            if not nxt:
                return
            page = self.request("GET", nxt)

    # --- auth ---------------------------------------------------------------------------------
    @classmethod
    def login(cls, url: str, username: str, password: str, *, name: str = "trainyard-cli", timeout: float = 30.0) -> Client:
        """Exchanges a username and password for a new token; returns a client that uses it."""
        client = cls(url, None, timeout=timeout)
        data = client.request("POST", "/api/v1/auth/token/", body={"username": username, "password": password, "name": name})
        client.token = str(data["token"])
        return client

    # --- tenants ------------------------------------------------------------------------------
    def teams(self) -> list[JSON]:
        return list(self.paginate("/api/v1/teams/"))

    def projects(self) -> list[JSON]:
        return list(self.paginate("/api/v1/projects/"))

    def project(self, ref: int | str) -> JSON:
        """A project by id or 'team/slug' (NotFoundError if it is not one of your teams')."""
        text = str(ref).strip()
        if is_id(text):
            return dict(self.request("GET", f"/api/v1/projects/{int(text)}/"))
        for project in self.projects():
            if project.get("full_slug") == text or f"{project.get('team')}/{project.get('slug')}" == text:
                return project
        raise NotFoundError(404, "not_found", f"no such project {text!r} (use an id or 'team/project')")

    # --- templates ----------------------------------------------------------------------------
    def templates(self) -> list[JSON]:
        return list(self.paginate("/api/v1/templates/"))

    def template(self, slug: str, version: int | None = None) -> JSON:
        return dict(self.request("GET", f"/api/v1/templates/{urllib.parse.quote(slug)}/", params={"version": version}))

    # --- runs ---------------------------------------------------------------------------------
    def runs(self, *, project: int | str | None = None, status: str | Iterable[str] | None = None, template: str | None = None,
             tags: Mapping[str, str] | None = None, family: str | None = None, parent: int | None = None,
             search: str | None = None, page_size: int = 200, ordering: str | None = None,
             updated_after: str | None = None) -> Iterator[JSON]:
        """Every run matching the filters (all pages), newest first unless ``ordering`` says
        otherwise ("-finished_at", "priority,created_at"). ``updated_after`` (ISO date-time) keeps
        only runs changed since then: poll with the newest ``updated_at`` seen."""
        if status is not None and not isinstance(status, str):
            status = ",".join(status)
        params: list[tuple[str, Any]] = [("project", project), ("status", status), ("template", template), ("family", family),
                                         ("parent", parent), ("search", search), ("page_size", page_size),
                                         ("ordering", ordering), ("updated_after", updated_after)]
        params += [("tag", f"{k}:{v}") for k, v in (tags or {}).items()]
        return self.paginate("/api/v1/runs/", params)

    def run(self, run_id: int) -> JSON:
        return dict(self.request("GET", f"/api/v1/runs/{int(run_id)}/"))

    get_run = run

    def submit(self, *, project: int | str, template: str, **fields: Any) -> JSON:
        """Submits a run; returns its detail. ValidationError names each bad field.

        ``fields`` are the other keys of ``POST /api/v1/runs/`` (params, tags, priority, resources,
        name, template_version, init_run, init_checkpoint, code_snapshot, secrets, ...); one that is
        None is left out, so the server's default applies."""
        return dict(self.request("POST", "/api/v1/runs/", body=submission_body(project, template, fields)))

    def cancel(self, run_id: int) -> JSON:
        return dict(self.request("POST", f"/api/v1/runs/{int(run_id)}/cancel/"))

    # --- tracking -----------------------------------------------------------------------------
    def metric_keys(self, run_id: int) -> JSON:
        """Per-key summaries plus the run's status and progress (cheap: for polling)."""
        return dict(self.request("GET", f"/api/v1/runs/{int(run_id)}/metrics/keys/"))

    def metrics(self, run_id: int, key: str | Iterable[str], *, max_points: int | None = None, x: str | None = None,
                start: float | None = None, end: float | None = None) -> JSON:
        keys = key if isinstance(key, str) else ",".join(key)
        return dict(self.request("GET", f"/api/v1/runs/{int(run_id)}/metrics/",
                                 params={"key": keys, "max_points": max_points, "x": x, "start": start, "end": end}))

    def checkpoints(self, run_id: int, *, ordering: str | None = None, page_size: int = 500) -> list[JSON]:
        """Every checkpoint record of the run (all pages), by step unless ``ordering`` says otherwise."""
        return list(self.paginate(f"/api/v1/runs/{int(run_id)}/checkpoints/", {"ordering": ordering, "page_size": page_size}))

    def logs(self, run_id: int, *, after: int = 0, limit: int | None = None) -> JSON:
        """One page of log chunks after the cursor: {"chunks": [...], "next": cursor, "more": bool}."""
        return dict(self.request("GET", f"/api/v1/runs/{int(run_id)}/logs/", params={"after": after, "limit": limit}))

    def compare(self, run_ids: Iterable[int], *, keys: Iterable[str] | None = None, max_points: int | None = None) -> JSON:
        return dict(self.request("GET", "/api/v1/compare/", params={
            "runs": ",".join(str(int(r)) for r in run_ids), "keys": ",".join(keys) if keys else None, "max_points": max_points}))

    # --- scheduling, billing, nodes -------------------------------------------------------------
    def queue(self) -> Any:
        return self.request("GET", "/api/v1/queue/")

    def forecast(self, *, project: int | str, template: str, **fields: Any) -> JSON:
        """Where a run would stand in line and when it would start if submitted now; queues nothing.

        ``fields`` are those of :meth:`submit`. With `tags`, the server also checks the rest as a
        submission would (a dry run); without, only what decides the place in line."""
        return dict(self.request("POST", "/api/v1/queue/forecast/", body=submission_body(project, template, fields)))

    def budget(self, project: int | str) -> JSON:
        text = str(project).strip()
        project_id = int(text) if is_id(text) else self.project(text)["id"]
        return dict(self.request("GET", f"/api/v1/projects/{project_id}/budget/"))

    def finance_budgets(self) -> list[JSON]:
        """Every budget, team-level ones too (the finance role and admins; PermissionDenied otherwise)."""
        return list(self.paginate("/api/v1/finance/budgets/"))

    def finance_spend(self, *, group_by: str = "team", period: str | None = None, team: str | None = None,
                      project: int | str | None = None) -> JSON:
        """Spend totals per group (finance role and admins): {"group_by", "period", "rows": [{"label", "cost", ...}]}."""
        return dict(self.request("GET", "/api/v1/finance/spend/",
                                 params={"group_by": group_by, "period": period, "team": team, "project": project}))

    def nodes(self, *, pool: str | None = None, state: str | None = None, ordering: str | None = None,
              page_size: int = 500) -> JSON:
        """{"pools": [...], "nodes": [...every node, all pages...]}: the fleet and its free devices."""
        params = {"pool": pool, "state": state, "ordering": ordering, "page_size": page_size}
        first: Any = self.request("GET", "/api/v1/nodes/", params=params)
        if not isinstance(first, dict) or "results" not in first:  # a server from before pagination
            return dict(first)
        nodes = list(first.get("results") or [])
        nxt = first.get("next")
        while nxt:
            page = self.request("GET", nxt)
            nodes += page.get("results") or []
            nxt = page.get("next")
        return {"pools": list(first.get("pools") or []), "nodes": nodes}

    # --- code snapshots -------------------------------------------------------------------------
    def upload_snapshot(self, *, project: int | str, directory: str | os.PathLike[str] | None = None,
                        data: bytes | None = None, git_commit: str | None = None) -> JSON:
        """Uploads a .tar.gz (``data``) or a tarball of ``directory``; returns {"id", "sha256", ...}.

        The git commit is read from ``directory`` when it is a git work tree and none is given.
        """
        if data is None:
            if directory is None:
                raise ValueError("give directory or data")
            data = snapshot_tar(directory)
            if git_commit is None:
                git_commit = git_commit_of(directory)
        boundary = uuid.uuid4().hex
        parts = []
        for field, value in (("project", str(project)), ("git_commit", git_commit or "")):
            parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{field}"\r\n\r\n{value}\r\n'.encode())
        parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="code.tar.gz"\r\n'
                     "Content-Type: application/gzip\r\n\r\n".encode() + data + b"\r\n")
        payload = b"".join(parts) + f"--{boundary}--\r\n".encode()
        return dict(self.request("POST", "/api/v1/code-snapshots/", data=payload,
                                 content_type=f"multipart/form-data; boundary={boundary}"))
