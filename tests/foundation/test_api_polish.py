"""The REST API's list and polling controls: strict ?ordering=, ?updated_after=, ETag / 304,
pagination of the nodes and checkpoints lists (also through the SDK client over real HTTP),
and an OpenAPI schema that documents every response body and error."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.test import Client
from rest_framework.test import APIClient

from apps.nodes.models import Device, Node
from apps.runs.models import Checkpoint, Run, RunStatus
from tests.tracking.conftest import make_attempt, make_node, make_pool, make_reporting, make_run

pytestmark = pytest.mark.django_db

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def ids(response: Any) -> list[int]:
    assert response.status_code == 200, response.content[:500]
    return [item["id"] for item in response.json()["results"]]


def three_runs(cast: Any) -> list[Run]:
    """Runs created in order a, b, c; updated at T0+1h, T0+2h, T0+3h; statuses and priorities mixed."""
    runs = [
        make_run(cast.digits, name="a", status=RunStatus.SUCCEEDED, priority="urgent"),
        make_run(cast.digits, name="b", status=RunStatus.QUEUED, priority="low"),
        make_run(cast.digits, name="c", status=RunStatus.RUNNING, priority="normal"),
    ]
    for i, run in enumerate(runs):
        # .update(): save() would set updated_at to now (auto_now).
        Run.objects.filter(pk=run.pk).update(created_at=T0 + timedelta(minutes=i), updated_at=T0 + timedelta(hours=i + 1))
    return runs


# --- ordering -----------------------------------------------------------------------------------
def test_runs_ordering_by_each_sensible_field(cast: Any) -> None:
    a, b, c = three_runs(cast)
    api = cast.client(cast.alice)
    assert ids(api.get("/api/v1/runs/")) == [c.pk, b.pk, a.pk]  # default: newest first
    assert ids(api.get("/api/v1/runs/?ordering=created_at")) == [a.pk, b.pk, c.pk]
    assert ids(api.get("/api/v1/runs/?ordering=-updated_at")) == [c.pk, b.pk, a.pk]
    assert ids(api.get("/api/v1/runs/?ordering=priority")) == [b.pk, c.pk, a.pk]  # low, normal, urgent
    assert ids(api.get("/api/v1/runs/?ordering=status")) == [b.pk, c.pk, a.pk]  # queued, running, succeeded
    assert ids(api.get("/api/v1/runs/?ordering=-name")) == [c.pk, b.pk, a.pk]
    assert ids(api.get("/api/v1/runs/?ordering=id")) == [a.pk, b.pk, c.pk]
    # With the other filters, and with pages.
    assert ids(api.get("/api/v1/runs/?ordering=id&status=queued,running")) == [b.pk, c.pk]
    page = api.get("/api/v1/runs/?ordering=id&page_size=2").json()
    assert [r["id"] for r in page["results"]] == [a.pk, b.pk] and "ordering=id" in page["next"]


@pytest.mark.parametrize("value", ["bogus", "-bogus", "created_at,nope", "project__team__slug", ",", "-"])
def test_unknown_ordering_is_a_400_naming_the_field_and_the_allowed_values(cast: Any, value: str) -> None:
    make_run(cast.digits)
    response = cast.client(cast.alice).get("/api/v1/runs/", {"ordering": value})
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert list(error["fields"]) == ["ordering"]
    assert "created_at" in error["message"] and "priority" in error["message"], error["message"]


def test_every_list_that_documents_ordering_refuses_an_unknown_field(cast: Any, schema: dict[str, Any]) -> None:
    checked = []
    for path, item in schema["paths"].items():
        params = item.get("get", {}).get("parameters", [])
        ordering = next((p for p in params if p["name"] == "ordering"), None)
        if ordering is None or "{" in path:
            continue
        client = cast.client(cast.admin if "/audit/" in path or "/finance/" in path else cast.alice)
        response = client.get(path, {"ordering": "no_such_field"})
        assert response.status_code == 400, (path, response.status_code)
        assert "ordering" in response.json()["error"]["fields"], path
        for value in ordering["schema"]["enum"]:  # every documented value works
            assert client.get(path, {"ordering": value}).status_code == 200, (path, value)
        checked.append(path)
    assert {"/api/v1/runs/", "/api/v1/nodes/", "/api/v1/projects/", "/api/v1/webhooks/", "/api/v1/templates/"} <= set(checked)


def test_ordering_on_a_retrieve_is_ignored_not_refused(cast: Any) -> None:
    run = make_run(cast.digits)
    assert cast.client(cast.alice).get(f"/api/v1/runs/{run.pk}/?ordering=bogus").status_code == 200


# --- updated_after -------------------------------------------------------------------------------
def test_updated_after_keeps_only_runs_changed_since(cast: Any) -> None:
    a, b, c = three_runs(cast)
    api = cast.client(cast.alice)
    assert ids(api.get("/api/v1/runs/", {"updated_after": "2025-03-01T13:30:00Z"})) == [c.pk, b.pk]
    assert ids(api.get("/api/v1/runs/", {"updated_after": "2025-03-01T14:00:00+00:00"})) == [c.pk]  # strictly after
    assert ids(api.get("/api/v1/runs/", {"updated_after": "2025-03-01T15:00:00+01:00"})) == [c.pk]  # 14:00 UTC
    assert ids(api.get("/api/v1/runs/", {"updated_after": "2025-03-01T13:30:00"})) == [c.pk, b.pk]  # naive = UTC
    # A '+' left unencoded in the URL arrives as a space.
    assert ids(api.get("/api/v1/runs/?updated_after=2025-03-01T13:30:00+00:00")) == [c.pk, b.pk]
    newest = api.get("/api/v1/runs/?ordering=-updated_at").json()["results"][0]["updated_at"]
    assert ids(api.get("/api/v1/runs/", {"updated_after": newest})) == []  # the polling loop: nothing new


@pytest.mark.parametrize("value", ["yesterday", "2025-13-01T00:00:00Z", "1700000000", "2025-03-01T25:00"])
def test_malformed_updated_after_is_a_400_naming_the_field(cast: Any, value: str) -> None:
    response = cast.client(cast.alice).get("/api/v1/runs/", {"updated_after": value})
    assert response.status_code == 400, response.content
    assert list(response.json()["error"]["fields"]) == ["updated_after"]
    assert "ISO 8601" in response.json()["error"]["message"]


def test_updated_after_on_other_lists_with_an_updated_at(cast: Any) -> None:
    alice = cast.client(cast.alice)
    old = alice.post("/api/v1/webhooks/", {"project": "vision/digits", "url": "https://a.test/"}, format="json").json()
    from apps.webhooks.models import WebhookEndpoint

    WebhookEndpoint.objects.filter(pk=old["id"]).update(updated_at=T0)
    new = alice.post("/api/v1/webhooks/", {"project": "vision/digits", "url": "https://b.test/"}, format="json").json()
    assert ids(alice.get("/api/v1/webhooks/", {"updated_after": "2025-03-02T00:00:00Z"})) == [new["id"]]
    assert alice.get("/api/v1/webhooks/", {"updated_after": "soon"}).status_code == 400
    finance = cast.client(cast.admin)
    assert finance.get("/api/v1/finance/budgets/", {"updated_after": "2999-01-01T00:00:00Z"}).json()["results"] == []
    assert finance.get("/api/v1/finance/quotas/", {"updated_after": "x"}).status_code == 400


def test_agent_progress_moves_updated_at_so_pollers_see_it(cast: Any) -> None:
    rep = make_reporting(cast.digits, name="p")
    Run.objects.filter(pk=rep.run.pk).update(updated_at=T0)
    response = Client().post("/api/v1/agent/progress/", {"attempt_id": rep.attempt.pk, "number": 1, "steps_done": 5},
                             content_type="application/json", HTTP_AUTHORIZATION=f"Node {rep.secret}")
    assert response.status_code == 200, response.content
    rep.run.refresh_from_db()
    assert rep.run.steps_done == 5 and rep.run.updated_at > T0
    assert ids(cast.client(cast.alice).get("/api/v1/runs/", {"updated_after": "2025-03-02T00:00:00Z"})) == [rep.run.pk]


# --- ETag / 304 ----------------------------------------------------------------------------------
def test_api_reads_carry_an_etag_and_answer_304_while_unchanged(cast: Any) -> None:
    api = cast.client(cast.alice)
    first = api.get("/api/v1/projects/")
    etag = first["ETag"]
    assert etag and "private" in first["Cache-Control"] and "no-cache" in first["Cache-Control"]
    again = api.get("/api/v1/projects/", HTTP_IF_NONE_MATCH=etag)
    assert again.status_code == 304 and again.content == b"" and again["ETag"] == etag
    # A change makes a new body, a new ETag, and the old one no longer matches.
    assert api.patch(f"/api/v1/projects/{cast.digits.pk}/", {"name": "Digits v2"}, format="json").status_code == 200
    changed = api.get("/api/v1/projects/", HTTP_IF_NONE_MATCH=etag)
    assert changed.status_code == 200 and changed["ETag"] != etag and "Digits v2" in changed.content.decode()
    # Another user with the same ETag gets their own (different) body, not a 304.
    other = cast.client(cast.bob).get("/api/v1/projects/", HTTP_IF_NONE_MATCH=changed["ETag"])
    assert other.status_code == 200 and "tiny-lm" in other.content.decode()


def test_errors_writes_streams_and_pages_get_no_etag(cast: Any, tmp_path: Any, settings: Any) -> None:
    api = cast.client(cast.alice)
    missing = api.get("/api/v1/runs/999999/")
    assert missing.status_code == 404 and not missing.has_header("ETag")
    assert api.get("/api/v1/runs/", {"ordering": "x"}, HTTP_IF_NONE_MATCH="*").status_code == 400
    created = api.post("/api/v1/webhooks/", {"project": "vision/digits", "url": "https://a.test/"}, format="json")
    assert created.status_code == 201 and not created.has_header("ETag")
    page = Client()
    page.force_login(cast.alice)
    assert not page.get("/").has_header("ETag")  # HTML: a per-request CSRF token, an ETag would never match
    # A file download streams: no ETag, never a 304.
    settings.MEDIA_ROOT = tmp_path
    (tmp_path / "c.pt").write_bytes(b"weights")
    rep = make_reporting(cast.digits, name="dl")
    ckpt = Checkpoint.objects.create(run=rep.run, attempt=rep.attempt, step=1, file_name="c.pt", size=7, sha256="a" * 64,
                                     stored_path="c.pt")
    download = page.get(f"/api/v1/runs/{rep.run.pk}/checkpoints/{ckpt.pk}/download/", HTTP_IF_NONE_MATCH="*")
    assert download.status_code == 200 and not download.has_header("ETag")


def test_run_page_polling_endpoints_revalidate_with_the_session(cast: Any) -> None:
    """What the run page's fetch() does: the browser resends the ETag and reuses its copy on a 304."""
    rep = make_reporting(cast.digits, name="live")
    Run.objects.filter(pk=rep.run.pk).update(status=RunStatus.SUCCEEDED)
    page = Client()
    page.force_login(cast.alice)
    for url in (f"/api/v1/runs/{rep.run.pk}/metrics/keys/", f"/api/v1/runs/{rep.run.pk}/logs/?after=0",
                f"/api/v1/runs/{rep.run.pk}/checkpoints/?page_size=500"):
        first = page.get(url)
        assert first.status_code == 200 and first.has_header("ETag"), url
        assert page.get(url, HTTP_IF_NONE_MATCH=first["ETag"]).status_code == 304, url
    assert "Cookie" in first["Vary"] and "Authorization" in first["Vary"]


# --- pagination of nodes and checkpoints ------------------------------------------------------------
def make_nodes(n: int) -> list[Node]:
    nodes = []
    for i in range(n):
        node, _ = make_node()
        Node.objects.filter(pk=node.pk).update(hostname=f"host-{i:02d}", last_heartbeat_at=T0 - timedelta(seconds=i))
        for index in range(2):
            Device.objects.create(node=node, index=index, kind="cpu")
        nodes.append(node)
    return nodes


def test_nodes_list_is_paginated_and_ordered(cast: Any) -> None:
    nodes = make_nodes(5)
    run = make_run(cast.digits)
    make_attempt(run, nodes[0])  # holds device 0 of host-00
    api = cast.client(cast.alice)
    first = api.get("/api/v1/nodes/?page_size=2&ordering=hostname").json()
    assert first["count"] == 5 and first["previous"] is None and "page=2" in first["next"]
    assert [n["hostname"] for n in first["results"]] == ["host-00", "host-01"]
    assert first["nodes"] == first["results"]  # the old key still works
    assert first["results"][0]["devices_used"] == 1 and first["results"][0]["runs"][0]["id"] == run.pk
    # Pools sum every node, not only this page's.
    assert first["pools"] == [{"name": "track", "kind": make_pool().kind, "description": "", "price_per_device_hour": "2.0000",
                               "devices_total": 10, "devices_free": 9}]
    last = api.get(first["next"].replace("http://testserver", "")).json()
    assert [n["hostname"] for n in last["results"]] == ["host-02", "host-03"]
    newest_beat = api.get("/api/v1/nodes/?ordering=-last_heartbeat_at&page_size=1").json()["results"][0]
    assert newest_beat["hostname"] == "host-00"
    oldest_beat = api.get("/api/v1/nodes/?ordering=last_heartbeat_at&page_size=1").json()["results"][0]
    assert oldest_beat["hostname"] == "host-04"
    assert api.get("/api/v1/nodes/?ordering=secret").status_code == 400
    assert api.get("/api/v1/nodes/?state=melted").json()["error"]["fields"] == {"state": [
        "one of ready, draining, lost, offline (got 'melted')"]}
    # Another team sees the node but not the run's details.
    theirs = cast.client(cast.bob).get("/api/v1/nodes/?ordering=hostname&page_size=1").json()["results"][0]
    assert theirs["runs"] == [{"id": None, "name": "another team's run", "project": None, "status": None, "attempt": None,
                               "rank": None}]


def make_checkpoints(n: int, cast: Any) -> Run:
    rep = make_reporting(cast.digits, name="ckpts")
    for step in range(1, n + 1):
        Checkpoint.objects.create(run=rep.run, attempt=rep.attempt, step=step * 10, file_name=f"ckpt-{step}.pt", size=step,
                                  sha256=f"{step:064d}", metrics={"loss": 1.0 / step})
    return rep.run


def test_checkpoints_list_is_paginated_and_ordered(cast: Any) -> None:
    run = make_checkpoints(7, cast)
    api = cast.client(cast.alice)
    first = api.get(f"/api/v1/runs/{run.pk}/checkpoints/?page_size=3").json()
    assert first["count"] == 7 and [c["step"] for c in first["results"]] == [10, 20, 30]
    assert first["checkpoints"] == first["results"]  # the old key still works
    assert first["results"][0]["metrics"] == {"loss": 1.0}
    latest = api.get(f"/api/v1/runs/{run.pk}/checkpoints/?ordering=-step&page_size=2").json()
    assert [c["step"] for c in latest["results"]] == [70, 60]
    assert api.get(f"/api/v1/runs/{run.pk}/checkpoints/?ordering=sha").status_code == 400
    assert cast.client(cast.bob).get(f"/api/v1/runs/{run.pk}/checkpoints/").status_code == 404


@pytest.mark.django_db(transaction=True)
def test_sdk_client_follows_pages_of_nodes_and_checkpoints(cast: Any, live_server: Any) -> None:
    """Over real HTTP: the stdlib client collects every page."""
    from trainyard.client import Client as SdkClient

    make_nodes(3)
    run = make_checkpoints(5, cast)
    token = APIClient().post("/api/v1/auth/token/", {"username": "alice", "password": "pw-alice-123456"}, format="json")
    client = SdkClient(live_server.url, token.json()["token"])
    assert [c["step"] for c in client.checkpoints(run.pk, page_size=2)] == [10, 20, 30, 40, 50]
    assert [c["step"] for c in client.checkpoints(run.pk, ordering="-step", page_size=2)][:2] == [50, 40]
    fleet = client.nodes(page_size=1, ordering="-hostname")
    assert [n["hostname"] for n in fleet["nodes"] if n["hostname"].startswith("host-")] == ["host-02", "host-01", "host-00"]
    assert len(fleet["nodes"]) == Node.objects.count() == 4  # and the checkpoints' run's node
    runs = list(client.runs(ordering="id", page_size=1))
    assert [r["id"] for r in runs] == sorted(r["id"] for r in runs) and run.pk in [r["id"] for r in runs]


# --- OpenAPI ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def schema(django_db_blocker: Any) -> dict[str, Any]:
    with django_db_blocker.unblock():
        response = Client().get("/api/schema/?format=json")
    assert response.status_code == 200
    return dict(json.loads(response.content))


def _json_schema(operation: dict[str, Any], code: str) -> dict[str, Any]:
    return dict(operation["responses"].get(code, {}).get("content", {}).get("application/json", {}).get("schema", {}))


def test_read_endpoints_document_their_bodies(schema: dict[str, Any]) -> None:
    expected = {
        "/api/v1/runs/{id}/metrics/": "MetricSeriesResponse",
        "/api/v1/runs/{id}/metrics/keys/": "MetricKeysResponse",
        "/api/v1/runs/{id}/logs/": "LogPage",
        "/api/v1/runs/{id}/energy/": "EnergyResponse",
        "/api/v1/runs/{id}/checkpoints/": "CheckpointPage",
        "/api/v1/compare/": "CompareResponse",
        "/api/v1/projects/{project_id}/budget/": "ProjectBudget",
        "/api/v1/nodes/": "NodePage",
    }
    for path, name in expected.items():
        assert _json_schema(schema["paths"][path]["get"], "200") == {"$ref": f"#/components/schemas/{name}"}, path
    components = schema["components"]["schemas"]
    assert {"x", "mean", "min", "max", "true_min", "level"} <= set(components["Series"]["properties"])
    assert {"chunks", "next", "more", "q", "matches"} == set(components["LogPage"]["properties"])  # q, matches: with ?q=
    assert {"spent", "remaining", "forecast", "burndown", "alerts", "budget"} <= set(components["ProjectBudget"]["properties"])
    generic = [f"{m.upper()} {p}" for p, item in schema["paths"].items() for m, op in item.items()
               if p.startswith(("/api/v1/runs/", "/api/v1/compare/", "/api/v1/nodes/", "/api/v1/projects/{project_id}/budget/"))
               and _json_schema(op, "200").get("additionalProperties") == {} and "properties" not in _json_schema(op, "200")]
    assert not generic, f"free-form response bodies left: {generic}"


def test_every_operation_documents_its_errors_with_the_error_shape(schema: dict[str, Any]) -> None:
    error_ref = {"$ref": "#/components/schemas/ApiError"}
    detail = schema["components"]["schemas"]["ApiErrorDetail"]
    assert set(detail["required"]) == {"status", "code", "message", "fields"}
    for path, item in schema["paths"].items():
        if not path.startswith("/api/v1/"):
            continue
        for method, op in item.items():
            codes = set(op["responses"])
            assert "503" in codes, (method, path)
            if path not in ("/api/v1/auth/token/", "/api/v1/agent/register/"):  # open to all: password / join token
                assert {"401", "403"} <= codes, (method, path, codes)
            if "{" in path:
                assert "404" in codes, (method, path)
            if method in ("post", "patch", "put"):
                assert {"400", "409"} <= codes, (method, path)
            for code in codes:
                if code.startswith(("4", "5")):
                    assert _json_schema(op, code) == error_ref, (method, path, code)
            if method == "get" and "application/json" in op["responses"]["200"].get("content", {}):
                assert "304" in codes, path
    runs_list = schema["paths"]["/api/v1/runs/"]["get"]
    names = {p["name"] for p in runs_list["parameters"]}
    assert {"ordering", "updated_after", "page", "page_size"} <= names
