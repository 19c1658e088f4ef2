"""The tenant-isolation matrix, generated from the URL configuration.

Every route is found by walking ``portal.urls``; none is listed by hand. Each route that takes
an object id (API or HTML) must have a factory in ``OBJECTS`` that makes such an object for a
given team, or a commented entry in ``EXEMPT``; each id-less API route must be in ``COLLECTIONS``
or ``EXEMPT``. A new endpoint that is in neither fails ``test_every_route_is_in_the_matrix``, so
isolation cannot be forgotten. Adding a route to the matrix is one line.

For every registered route the tests check, as alice (team vision) against bob's (team nlp)
object: GET is a 404, every write the view allows is a 404, any other method answers exactly as
for an id that does not exist (nothing reveals that the object exists), and bob's object is
absent from the matching list endpoint. A viewer in vision gets 403 on writes to vision objects.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pytest
from django.db.models import Model
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from django.utils import timezone
from rest_framework.test import APIClient

from apps.accounts.services import api_token_create
from apps.audit.models import AuditEvent
from apps.jobtemplates.models import JobTemplate
from apps.nodes.models import Node, NodePool
from apps.runs.models import Attempt, Checkpoint, CodeSnapshot, EnergySample, LogChunk, Run
from apps.tenants.models import Project, Team

WRITE_METHODS = ("post", "put", "patch", "delete")
MISSING_ID = 987654321


# --- walking the URL configuration ---------------------------------------------------------
@dataclass(frozen=True)
class Route:
    key: str  # normalised pattern, e.g. "api/v1/projects/<pk>/"
    name: str | None
    kwargs: tuple[str, ...]
    callback: Any

    @property
    def is_api(self) -> bool:
        return self.key.startswith("api/")

    @property
    def view_class(self) -> Any:
        return getattr(self.callback, "cls", None) or getattr(self.callback, "view_class", None)

    def allowed_methods(self) -> set[str] | None:
        """The methods the view implements, or None for a function view (cannot tell)."""
        actions = getattr(self.callback, "actions", None)
        cls = self.view_class
        if actions:  # a DRF viewset route: the router bound these methods
            names = set(cls.http_method_names) if cls else set(actions)
            return {m for m in actions if m in names}
        if cls is not None:
            return {m for m in cls.http_method_names if m != "options" and hasattr(cls, m)}
        return None

    def path(self, values: dict[str, Any]) -> str:
        out = "/" + self.key
        for name in self.kwargs:
            out = out.replace(f"<{name}>", str(values[name]))
        return out


_GROUP = re.compile(r"\(\?P<(\w+)>[^)]*\)")
_CONVERTER = re.compile(r"<(?:\w+:)?(\w+)>")
_FORMAT_SUFFIX = re.compile(r"\\\.\(\?P<format>[^)]*\)/\?\$?$|\.<format>$")


def _normalise(raw: str) -> str:
    raw = raw.replace("^", "").replace("$", "")
    raw = _GROUP.sub(lambda m: f"<{m.group(1)}>", raw)
    return _CONVERTER.sub(lambda m: f"<{m.group(1)}>", raw)


def _walk(resolver: URLResolver, prefix: str = "") -> list[Route]:
    routes: list[Route] = []
    for entry in resolver.url_patterns:
        raw = prefix + str(entry.pattern)
        if isinstance(entry, URLResolver):
            routes.extend(_walk(entry, raw))
        elif isinstance(entry, URLPattern):
            if _FORMAT_SUFFIX.search(raw):
                continue  # DefaultRouter's ".json" twin of a route already in the list: same view
            key = _normalise(raw)
            kwargs = tuple(_CONVERTER.findall(key))
            routes.append(Route(key=key, name=entry.name, kwargs=kwargs, callback=entry.callback))
    return routes


ROUTES: list[Route] = _walk(get_resolver())
BY_KEY: dict[str, Route] = {route.key: route for route in ROUTES}


# --- factories: make an object owned by `team` --------------------------------------------
def _owner(cast: Any, team: Team) -> Any:
    return cast.bob if team.slug == "nlp" else cast.alice


def _project(cast: Any, team: Team) -> Project:
    return cast.tinylm if team.slug == "nlp" else cast.digits


def _pool() -> NodePool:
    return NodePool.objects.get_or_create(name="matrix")[0]


def _template() -> JobTemplate:
    template, _ = JobTemplate.objects.get_or_create(
        slug="matrix-train", version=1, defaults={"title": "Matrix", "kind": "train", "entrypoint": "python -c pass"}
    )
    return template


def make_team(cast: Any, team: Team) -> Team:
    return team


def make_project(cast: Any, team: Team) -> Project:
    return _project(cast, team)


def make_token(cast: Any, team: Team) -> Model:
    return api_token_create(user=_owner(cast, team), name="matrix")[0]


def make_run(cast: Any, team: Team) -> Run:
    return Run.objects.create(
        project=_project(cast, team), template=_template(), pool=_pool(), entrypoint="python -c pass",
        submitted_by=_owner(cast, team), name=f"{team.slug}-run",
    )


def make_attempt(cast: Any, team: Team) -> Attempt:
    return Attempt.objects.create(run=make_run(cast, team), number=1)


def make_checkpoint(cast: Any, team: Team) -> Checkpoint:
    attempt = make_attempt(cast, team)
    return Checkpoint.objects.create(
        run=attempt.run, attempt=attempt, step=10, file_name="ckpt-0000000010.pt", size=4, sha256="a" * 64
    )


def make_log_chunk(cast: Any, team: Team) -> LogChunk:
    attempt = make_attempt(cast, team)
    return LogChunk.objects.create(run=attempt.run, attempt=attempt, seq=0, text="secret log line\n")


def make_node(cast: Any, team: Team) -> Node:
    return Node.objects.create(pool=_pool(), hostname=f"matrix-{uuid.uuid4().hex[:6]}", agent_uid=uuid.uuid4().hex)


def make_energy_sample(cast: Any, team: Team) -> EnergySample:
    return EnergySample.objects.create(
        attempt=make_attempt(cast, team), node=make_node(cast, team), device_index=-1, at=timezone.now(), energy_j=1.0
    )


def make_code_snapshot(cast: Any, team: Team) -> CodeSnapshot:
    return CodeSnapshot.objects.create(project=_project(cast, team), sha256="b" * 64, size=1, stored_path="snap.tar.gz")


def make_budget(cast: Any, team: Team) -> Model:
    from apps.billing.models import Budget

    return Budget.objects.get_or_create(team=team, project=_project(cast, team), defaults={"amount": Decimal("100")})[0]


def make_quota(cast: Any, team: Team) -> Model:
    from apps.billing.models import Quota

    return Quota.objects.get_or_create(team=team, pool=_pool(), defaults={"guaranteed_devices": 1})[0]


def make_secret(cast: Any, team: Team) -> Model:
    from apps.vault.models import Secret

    # Made directly: the ciphertext is never decrypted here, so no vault key is needed.
    return Secret.objects.get_or_create(project=_project(cast, team), name="MATRIX_TOKEN",
                                        defaults={"ciphertext": "not-a-token", "key_id": "matrix"})[0]


def make_webhook(cast: Any, team: Team) -> Model:
    from apps.webhooks.models import WebhookEndpoint

    return WebhookEndpoint.objects.get_or_create(project=_project(cast, team), url="http://127.0.0.1:9/hook",
                                                 defaults={"secret": "matrix-secret"})[0]


def make_webhook_delivery(cast: Any, team: Team) -> Model:
    from apps.webhooks.models import WebhookDelivery, WebhookEvent

    endpoint = make_webhook(cast, team)
    event = WebhookEvent.objects.get_or_create(project=endpoint.project, key="matrix", defaults={"type": "ping"})[0]
    return WebhookDelivery.objects.get_or_create(endpoint=endpoint, event=event)[0]


def make_saved_comparison(cast: Any, team: Team) -> Model:
    from apps.tracking.models import SavedComparison

    runs = [make_run(cast, team).pk for _ in range(2)]
    return SavedComparison.objects.create(project=_project(cast, team), name=f"matrix-{uuid.uuid4().hex[:6]}", run_ids=runs,
                                          created_by=_owner(cast, team))


def make_notification(cast: Any, team: Team) -> Model:
    from apps.notifications.models import Notification

    return Notification.objects.create(user=_owner(cast, team), team=team, kind="run.succeeded", title="nlp-run matrix",
                                       key=f"matrix-{uuid.uuid4().hex[:8]}")


def make_artifact(cast: Any, team: Team) -> dict[str, Any]:
    from apps.artifacts.models import Artifact

    # Made directly: only the lookup is tested, so no bytes are stored behind the key.
    run = make_run(cast, team)
    artifact = Artifact.objects.create(run=run, name="plots/secret-loss.png", size=4, sha256="c" * 64,
                                       content_type="image/png", storage_key=f"matrix/{uuid.uuid4().hex}")
    return {"pk": run.pk, "name": artifact.name, "object": artifact}


def make_registered_model(cast: Any, team: Team) -> Model:
    from apps.registry.models import RegisteredModel

    return RegisteredModel.objects.create(project=_project(cast, team), name=f"matrix-{uuid.uuid4().hex[:6]}",
                                          created_by=_owner(cast, team))


def make_model_version(cast: Any, team: Team) -> Any:
    from apps.registry.models import ModelVersion

    checkpoint = make_checkpoint(cast, team)
    return ModelVersion.objects.create(model=make_registered_model(cast, team), number=1, source_run=checkpoint.run,
                                       checkpoint=checkpoint, created_by=_owner(cast, team))


def make_model_version_ref(cast: Any, team: Team) -> dict[str, Any]:
    """The API's version routes name the model as <pk>, which a version's own pk is not."""
    version = make_model_version(cast, team)
    return {"pk": version.model_id, "number": version.number, "object": version}


def make_versioned_model(cast: Any, team: Team) -> Model:
    return make_model_version(cast, team).model


Factory = Callable[[Any, Team], Any]


@dataclass(frozen=True)
class Owned:
    """A factory plus who owns what it makes: "team" objects get the viewer check too."""

    make: Factory
    by: str = "team"


def user_owned(make: Factory) -> Owned:
    return Owned(make, by="user")


# Routes that take an object id -> how to make an object of a given team for them.
# URL kwargs are filled from the object: pk/id -> obj.pk, <x> -> obj.x, <x_pk> -> obj.x_id.
OBJECTS: dict[str, Factory | Owned] = {
    "api/v1/teams/<pk>/": make_team,
    "api/v1/projects/<pk>/": make_project,
    "api/v1/projects/<project_id>/budget/": make_project,
    "api/v1/auth/tokens/<pk>/": user_owned(make_token),
    "api/v1/runs/<pk>/": make_run,
    "api/v1/runs/<pk>/cancel/": make_run,
    "api/v1/runs/<pk>/rerun/": make_run,
    "api/v1/runs/<pk>/metrics/": make_run,
    "api/v1/runs/<pk>/metrics/keys/": make_run,
    "api/v1/runs/<pk>/checkpoints/": make_run,
    "api/v1/runs/<run_pk>/checkpoints/<pk>/download/": make_checkpoint,
    "api/v1/runs/<pk>/logs/": make_run,
    "api/v1/runs/<pk>/logs/download/": make_run,
    "api/v1/runs/<pk>/energy/": make_run,
    "api/v1/runs/<pk>/environment/": make_run,
    "api/v1/runs/<pk>/history/": make_run,
    "api/v1/code-snapshots/<pk>/": make_code_snapshot,
    "api/v1/finance/budgets/<pk>/": make_budget,
    "api/v1/finance/quotas/<pk>/": make_quota,
    "projects/<pk>/": make_project,
    "api/v1/projects/<project_id>/secrets/": make_project,
    "api/v1/projects/<project_id>/secrets/<name>/": make_secret,
    "projects/<project_id>/secrets/": make_project,
    "projects/<project_id>/secrets/set/": make_project,
    "projects/<project_id>/secrets/<name>/delete/": make_secret,
    "runs/<pk>/": make_run,
    "runs/<pk>/rerun/": make_run,
    "runs/<pk>/annotate/": make_run,
    "api/v1/compare/views/<pk>/": make_saved_comparison,
    "compare/v/<pk>/": make_saved_comparison,
    "api/v1/webhooks/<pk>/": make_webhook,
    "api/v1/webhooks/<pk>/ping/": make_webhook,
    "api/v1/webhook-deliveries/<pk>/": make_webhook_delivery,
    "api/v1/webhook-deliveries/<pk>/redeliver/": make_webhook_delivery,
    "projects/<pk>/webhooks/": make_project,
    "finance/budgets/<pk>/": make_budget,
    "finance/quotas/<pk>/": make_quota,
    "api/v1/notifications/<pk>/": user_owned(make_notification),
    "api/v1/notifications/<pk>/read/": user_owned(make_notification),
    "notifications/<pk>/read/": user_owned(make_notification),
    "api/v1/runs/<pk>/artifacts/": make_run,
    "api/v1/runs/<pk>/artifacts/<name>": make_artifact,
    "api/v1/models/<pk>/": make_registered_model,
    "api/v1/models/<pk>/versions/": make_registered_model,
    "api/v1/models/<pk>/rollback/": make_versioned_model,
    "api/v1/models/<pk>/versions/<number>/": make_model_version_ref,
    "api/v1/models/<pk>/versions/<number>/stage/": make_model_version_ref,
    "api/v1/models/<pk>/versions/<number>/promote/": make_model_version_ref,
    "projects/<project_id>/models/": make_project,
    "projects/<project_id>/models/new/": make_project,
    "models/<model_id>/": make_model_version,  # fills <model_id> from the version's model
    "models/<model_id>/rollback/": make_model_version,
    "models/<model_id>/versions/<number>/promote/": make_model_version,
    "models/<model_id>/versions/<number>/stage/": make_model_version,
    "runs/<run_id>/register-model-version/": make_run,
}

# Id-less API routes -> a factory whose object (for team nlp) must not appear to alice there,
# or a Query: a query string naming bob's object, which must answer as for a missing id.
@dataclass(frozen=True)
class Query:
    make: Factory
    query: str  # e.g. "runs={pk}"


@dataclass(frozen=True)
class Listed:
    """A list whose items name their object by `field` rather than "id"; alice's own must show there."""

    make: Factory
    field: str


COLLECTIONS: dict[str, Factory | Query | Listed] = {
    "api/v1/teams/": make_team,
    "api/v1/projects/": make_project,
    "api/v1/auth/tokens/": make_token,
    "api/v1/runs/": make_run,
    "api/v1/code-snapshots/": make_code_snapshot,
    "api/v1/webhooks/": make_webhook,
    "api/v1/webhook-deliveries/": make_webhook_delivery,
    "api/v1/compare/": Query(make_run, "runs={pk},987654320"),  # tracking: bob's run in a comparison is a 404
    "api/v1/compare/views/": make_saved_comparison,
    "api/v1/queue/": make_run,  # scheduling: pools are shared; bob's queued run shows with no id, name or project
    "api/v1/notifications/": make_notification,
    "api/v1/models/": make_registered_model,
    "api/v1/model-costs/": Listed(make_versioned_model, "model_id"),  # one row per version, named by its model
    # HTML pages that name an object in the query string (not required, but cheap to cover):
    "compare/": Query(make_run, "runs={pk}"),
    "compare/export.csv": Query(make_run, "runs={pk}"),
    "runs/new/": Query(make_project, "project={pk}"),
    "runs/overview/": Query(make_project, "project={pk}"),
}
# What bob's objects are called: none of it may show on a page alice gets for them.
BOB_MARKERS = ("tiny-lm", "Tiny LM", "nlp-run")

# Routes outside the matrix, each with the reason: exact keys, then whole prefixes.
EXEMPT: dict[str, str] = {
    "api/schema/": "the API description, the same for every user",
    "api/docs/": "the API docs page, the same for every user",
    "api/v1/": "DefaultRouter's API root: links only",
    "api/v1/auth/token/": "exchanges a password for a token; no object",
    "api/v1/audit/": "administrators only (IsAdminUser, 403 before any lookup); see test_audit",
    "api/v1/audit/<pk>/": "administrators only (IsAdminUser, 403 before any lookup); see test_audit",
    "api/v1/templates/": "job templates are shared by every team, not tenant-owned",
    "api/v1/templates/<slug>/": "job templates are shared by every team, not tenant-owned",
    "api/v1/images/": "approved container images are shared by every team, not tenant-owned",
    "api/v1/nodes/": "the fleet is shared by every team (pools, nodes, free devices)",
    "api/v1/nodes/<pk>/drain/": "fleet nodes belong to no team; draining is for administrators",
    "api/v1/nodes/<pk>/undrain/": "fleet nodes belong to no team; draining is for administrators",
    "api/v1/runs/trials/": ("POST only, counts a sweep's trials from a shared template; an optional project is checked as a "
                            "submission's: another team's answers exactly as a missing one (tests/runs/test_trials_project.py)"),
    "api/v1/queue/forecast/": ("POST only, a submission body naming a project: another team's project answers exactly as a "
                               "missing one (tests/scheduling/test_forecast.py)"),
    "api/v1/notifications/read-all/": "POST only, marks the requesting user's own notifications read; names no object",
    "api/v1/notifications/unread-count/": "the requesting user's own unread count; names no object",
    "api/v1/storage/object/": ("the local object store's presigned URLs: the signed token names the one object and method, "
                               "no session or credential counts (tests/storage/test_backends.py)"),
}
# Agent routes that take no node credential, with what they take instead.
AGENT_OPEN: dict[str, str] = {"api/v1/agent/register/": "a pool's join token in the body"}
EXEMPT_PREFIXES: dict[str, str] = {
    "admin/": "Django admin: staff only, every model behind its own permission; see test_audit",
    "api/v1/agent/": "node credentials only (NodeAuthentication); see test_agent_routes_refuse_users",
    "mlflow/": "MLflow's REST API: ids in the body or query, MLflow's error JSON; tenancy in tests/mlflow/test_api.py",
}


def _exempt_reason(key: str) -> str | None:
    if key in EXEMPT:
        return EXEMPT[key]
    return next((reason for prefix, reason in EXEMPT_PREFIXES.items() if key.startswith(prefix)), None)


def _takes_id(route: Route) -> bool:
    return bool(route.kwargs)


def _is_finance(route: Route) -> bool:
    return (route.name or "").startswith("finance")


# Finance routes answer 403 to engineers whatever the id: test_finance_pages_refuse_engineers.
MATRIX = [r for r in ROUTES if _takes_id(r) and _exempt_reason(r.key) is None and not _is_finance(r)]
LISTS = [r for r in ROUTES if r.is_api and not _takes_id(r) and _exempt_reason(r.key) is None and not _is_finance(r)]
FINANCE_ROUTES = [r for r in ROUTES if _is_finance(r)]


def _owned(key: str) -> Owned:
    entry = OBJECTS[key]
    return entry if isinstance(entry, Owned) else Owned(entry)


def _kwarg_value(obj: Any, name: str) -> Any:
    if isinstance(obj, dict):
        return obj[name]
    if name in ("pk", "id", f"{obj._meta.model_name}_id", f"{obj._meta.model_name}_pk"):
        return obj.pk
    if hasattr(obj, name):
        value = getattr(obj, name)
        return value.pk if isinstance(value, Model) else value
    if name.endswith("_pk") and hasattr(obj, name[:-3] + "_id"):
        return getattr(obj, name[:-3] + "_id")
    raise AssertionError(f"cannot fill <{name}> from {obj!r}; return a dict of URL kwargs from the factory")


def _path_for(route: Route, obj: Any) -> str:
    return route.path({name: _kwarg_value(obj, name) for name in route.kwargs})


def _missing_path(route: Route, obj: Any) -> str:
    # Only the last kwarg is replaced: parent ids stay real, so the answer is for "no such child".
    values = {name: _kwarg_value(obj, name) for name in route.kwargs}
    last = route.kwargs[-1]
    values[last] = MISSING_ID if isinstance(values[last], int) else f"no-such-{uuid.uuid4().hex[:8]}"
    return route.path(values)


def _client(route: Route, user: Any) -> Client:
    if route.is_api:
        api = APIClient()
        api.force_authenticate(user)
        return api
    client = Client()
    client.force_login(user)
    return client


def _send(client: Client, method: str, path: str) -> Any:
    if method == "get":
        return client.get(path)
    return getattr(client, method)(path, data=json.dumps({}), content_type="application/json")


def _ids(route_id: Any) -> str:
    return route_id.key if isinstance(route_id, Route) else str(route_id)


def _routes(routes: list[Route]) -> list[Any]:
    """Parameters for a test; with no such route yet, one `None` case that passes (not a skip)."""
    return routes or [pytest.param(None, id="none-yet")]


# --- the tests ----------------------------------------------------------------------------
def test_every_route_is_in_the_matrix() -> None:
    missing_objects = [r.key for r in [*MATRIX, *FINANCE_ROUTES] if r.kwargs and r.key not in OBJECTS]
    missing_lists = [r.key for r in LISTS if r.key not in COLLECTIONS and r.key not in OBJECTS]
    stale = [key for key in [*OBJECTS, *COLLECTIONS] if key not in BY_KEY]
    problems = []
    if missing_objects:
        problems.append("routes taking an object id with no factory in OBJECTS (or reason in EXEMPT):\n  " + "\n  ".join(missing_objects))
    if missing_lists:
        problems.append("API routes with no entry in COLLECTIONS (or reason in EXEMPT):\n  " + "\n  ".join(missing_lists))
    if stale:
        problems.append("registry keys that match no route (renamed?):\n  " + "\n  ".join(stale))
    assert not problems, "\n".join(problems)
    assert any(r.key == "api/v1/projects/<pk>/" for r in MATRIX), "the URL walk found nothing: is the resolver empty?"


@pytest.mark.parametrize("route", _routes([r for r in MATRIX if r.key in OBJECTS]), ids=_ids)
def test_other_teams_object_is_not_found(cast: Any, route: Route | None) -> None:
    if route is None:
        return
    obj = _owned(route.key).make(cast, cast.nlp)
    path, missing = _path_for(route, obj), _missing_path(route, obj)
    client = _client(route, cast.alice)
    allowed = route.allowed_methods()
    events = AuditEvent.objects.count()
    for method in ("get", *WRITE_METHODS):
        got = _send(client, method, path)
        baseline = _send(client, method, missing)
        where = f"{method.upper()} {path} as alice"
        assert got.status_code != 403, f"{where}: 403 reveals that the object exists; must be 404"
        assert got.status_code < 200 or got.status_code >= 300, f"{where}: {got.status_code} — alice reached bob's object"
        assert got.status_code == baseline.status_code, (
            f"{where}: {got.status_code}, but {baseline.status_code} for an id that does not exist"
        )
        if allowed is None:
            assert got.status_code in (404, 405), f"{where}: {got.status_code}"
        elif method in allowed:
            assert got.status_code == 404, f"{where}: {got.status_code}, expected 404"
    if route.is_api and allowed is not None and "get" in allowed:
        assert _send(client, "get", path).json()["error"]["code"] == "not_found"
    # The writes above were refused, not applied: nothing audited, the object still there.
    assert AuditEvent.objects.count() == events, "alice's request changed bob's object (it left an audit event)"
    made = obj.get("object") if isinstance(obj, dict) else obj  # a factory of URL kwargs may name what it made
    if isinstance(made, Model):
        assert type(made)._default_manager.filter(pk=made.pk).exists()


def _list_route(route: Route) -> Route | None:
    """The list a detail route belongs to: the same route without its last id (projects/<pk>/ -> projects/)."""
    list_key = re.sub(r"<\w+>/$", "", route.key)
    found = BY_KEY.get(list_key)
    return found if found is not None and list_key != route.key and not found.kwargs else None


@pytest.mark.parametrize("route", _routes([r for r in MATRIX if r.key in OBJECTS and _list_route(r)]), ids=_ids)
def test_other_teams_object_is_absent_from_its_list(cast: Any, route: Route | None) -> None:
    if route is None:
        return
    list_route = _list_route(route)
    assert list_route is not None
    obj = _owned(route.key).make(cast, cast.nlp)
    own = _owned(route.key).make(cast, cast.vision)
    response = _client(list_route, cast.alice).get("/" + list_route.key)
    assert response.status_code == 200, f"GET /{list_route.key} as alice: {response.status_code}"
    if list_route.is_api:
        ids = _list_ids(response)
        assert obj.pk not in ids, f"/{list_route.key} shows bob's object {obj.pk} to alice"
        assert own.pk in ids, f"/{list_route.key} does not show alice her own object: the check above proves nothing"
    else:
        body = response.content.decode()
        assert f'href="{_path_for(route, obj)}"' not in body, f"/{list_route.key} links bob's object for alice"
        assert f'href="{_path_for(route, own)}"' in body, f"/{list_route.key} does not link alice's own object"


def _list_ids(response: Any, field: str = "id") -> list[Any]:
    data = response.json()
    items = data["results"] if isinstance(data, dict) and "results" in data else data
    return [item.get(field) for item in items if isinstance(item, dict)]


QUERY_ROUTES = [r for r in ROUTES if isinstance(COLLECTIONS.get(r.key), Query)]


@pytest.mark.parametrize("route", _routes(QUERY_ROUTES), ids=_ids)
def test_query_naming_other_teams_object_is_not_found(cast: Any, route: Route | None) -> None:
    if route is None:
        return
    entry = COLLECTIONS[route.key]
    assert isinstance(entry, Query)
    obj = entry.make(cast, cast.nlp)
    client = _client(route, cast.alice)
    got = client.get("/" + route.key + "?" + entry.query.format(pk=obj.pk))
    baseline = client.get("/" + route.key + "?" + entry.query.format(pk=MISSING_ID))
    where = f"/{route.key}?{entry.query.format(pk=obj.pk)} as alice"
    assert got.status_code == baseline.status_code, f"{where}: {got.status_code}, but {baseline.status_code} for a missing id"
    assert got.status_code != 403, f"{where}: 403 reveals that the object exists"
    if route.is_api:
        assert got.status_code in (400, 404), f"{where}: {got.status_code}"
    body = b"".join(got.streaming_content) if got.streaming else got.content  # type: ignore[attr-defined]
    leaked = [m for m in BOB_MARKERS if m.encode() in body]
    assert not leaked, f"{where}: the answer shows {leaked}"


PLAIN_LISTS = [r for r in LISTS if r.key in COLLECTIONS and not isinstance(COLLECTIONS[r.key], Query)]


@pytest.mark.parametrize("route", _routes(PLAIN_LISTS), ids=_ids)
def test_list_hides_other_teams_objects(cast: Any, route: Route | None) -> None:
    if route is None:
        return
    entry = COLLECTIONS[route.key]
    assert not isinstance(entry, Query)
    make, field = (entry.make, entry.field) if isinstance(entry, Listed) else (entry, "id")
    obj = make(cast, cast.nlp)
    own = make(cast, cast.vision) if isinstance(entry, Listed) else None
    response = _client(route, cast.alice).get("/" + route.key)
    assert response.status_code == 200
    ids = _list_ids(response, field)
    assert obj.pk not in ids, f"/{route.key} shows bob's object to alice"
    if own is not None:  # an item without `field` would pass the check above whatever it showed
        assert own.pk in ids, f"/{route.key} does not show alice her own object: the check above proves nothing"


@pytest.mark.parametrize("route", _routes([r for r in MATRIX if r.key in OBJECTS and _owned(r.key).by == "team"]), ids=_ids)
def test_viewer_may_not_write(cast: Any, route: Route | None) -> None:
    if route is None:
        return
    allowed = route.allowed_methods()
    obj = _owned(route.key).make(cast, cast.vision)
    path = _path_for(route, obj)
    client = _client(route, cast.victor)
    events = AuditEvent.objects.count()
    # A function view (HTML) cannot be asked what it allows: POST is tried, and must change nothing.
    for method in WRITE_METHODS if allowed is not None else ("post",):
        got = _send(client, method, path)
        where = f"{method.upper()} {path} as viewer victor"
        if allowed is not None and method in allowed:
            assert got.status_code == 403, f"{where}: {got.status_code}, expected 403"
        else:
            assert got.status_code in (403, 405) or allowed is None, f"{where}: {got.status_code}"
    assert AuditEvent.objects.count() == events, "a viewer's request changed state (it left an audit event)"


def test_agent_routes_refuse_users(cast: Any) -> None:
    """A user's token, even a superuser's, is not a node credential."""
    key = api_token_create(user=cast.admin, name="not-a-node")[1]
    client = APIClient(HTTP_AUTHORIZATION=f"Token {key}")
    agent_routes = [r for r in ROUTES if r.key.startswith("api/v1/agent/") and r.key not in AGENT_OPEN]
    for route in agent_routes:
        path = route.path(dict.fromkeys(route.kwargs, 1))
        for method in ("get", "post"):
            status = _send(client, method, path).status_code
            assert status in (401, 403, 405), f"{method.upper()} {path} with a user token: {status}"
    assert all(r.is_api for r in agent_routes)  # none, until the agent protocol lands


FINANCE_ROUTES = [r for r in ROUTES if (r.name or "").startswith("finance")]


def test_finance_pages_refuse_engineers(cast: Any) -> None:
    checked = []
    for route in FINANCE_ROUTES:
        if route.kwargs:
            obj = _owned(route.key).make(cast, cast.nlp)
            paths = [_path_for(route, obj), _missing_path(route, obj)]
        else:
            paths = ["/" + route.key]
        for user in (cast.alice, cast.bob, cast.victor):
            client = _client(route, user)
            for path in paths:
                # 405 for a method the route lacks gives nothing away; every route refuses somewhere.
                statuses = {method: _send(client, method, path).status_code for method in ("get", "post", "patch")}
                assert set(statuses.values()) <= {403, 405} and 403 in statuses.values(), (
                    f"{path} as engineer {user.username}: {statuses}, expected 403"
                )
        carol = _client(route, cast.carol).get(paths[0]).status_code
        assert carol in (200, 405), f"finance carol on GET {paths[0]}: {carol}"
        checked.append(route.key)
    # Named "finance*" routes are picked up as they land; with none, there is nothing to refuse.
    assert checked == [r.key for r in FINANCE_ROUTES]
