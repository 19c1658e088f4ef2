"""Every change to a team, project or membership is audited, whichever door it came through
(services, the API, the Django admin); audit events are append-only and for admins only."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import transaction
from django.test import Client

from apps.audit.context import acting_as
from apps.audit.models import AuditEvent
from apps.audit.services import audit_record
from apps.tenants import services
from apps.tenants.models import Membership, Project, Role, Team

IP = "203.0.113.7"


def _last(action: str) -> AuditEvent:
    event = AuditEvent.objects.filter(action=action).first()
    assert event is not None, f"no {action} event; have {list(AuditEvent.objects.values_list('action', flat=True))}"
    return event


def _assert_event(action: str, actor: Any, *, before: dict[str, Any] | None = None, after: dict[str, Any] | None = None) -> AuditEvent:
    event = _last(action)
    assert event.actor_id == actor.pk, (action, event.actor_id, actor.pk)
    assert event.actor_label == actor.username
    assert event.ip == IP, (action, event.ip)
    for key, value in (before or {}).items():
        assert event.before is not None and event.before.get(key) == value, (action, "before", event.before)
    for key, value in (after or {}).items():
        assert event.after is not None and event.after.get(key) == value, (action, "after", event.after)
    if action.endswith(".create"):
        assert event.before is None and event.after
    if action.endswith(".delete"):
        assert event.before and event.after is None
    return event


# --- services --------------------------------------------------------------------------------
def test_services_audit_every_change(cast: Any) -> None:
    with acting_as(user=cast.admin, ip=IP):
        team = services.team_create(slug="audio", name="Audio")
        _assert_event("team.create", cast.admin, after={"slug": "audio", "name": "Audio"})
        services.team_update(team=team, name="Audio & Speech")
        _assert_event("team.update", cast.admin, before={"name": "Audio"}, after={"name": "Audio & Speech"})
        project = services.project_create(team=team, slug="asr", name="ASR")
        event = _assert_event("project.create", cast.admin, after={"slug": "asr", "team": team.pk})
        assert event.team_id == team.pk and event.object_id == str(project.pk)
        services.project_update(project=project, name="Speech recognition")
        _assert_event("project.update", cast.admin, before={"name": "ASR"}, after={"name": "Speech recognition"})
        membership = services.membership_set(team=team, user=cast.outsider, role=Role.VIEWER)
        _assert_event("membership.create", cast.admin, after={"user": cast.outsider.pk, "role": "viewer"})
        services.membership_set(team=team, user=cast.outsider, role=Role.ENGINEER)
        _assert_event("membership.update", cast.admin, before={"role": "viewer"}, after={"role": "engineer"})
        count = AuditEvent.objects.count()
        services.membership_set(team=team, user=cast.outsider, role=Role.ENGINEER)
        assert AuditEvent.objects.count() == count, "an unchanged membership must not be audited as a change"
        services.membership_delete(membership=membership)
        _assert_event("membership.delete", cast.admin, before={"role": "engineer"})
        services.project_delete(project=project)
        _assert_event("project.delete", cast.admin, before={"slug": "asr"})
        services.team_delete(team=team)
        _assert_event("team.delete", cast.admin, before={"slug": "audio"})


def test_non_user_actor_is_named(cast: Any) -> None:
    with acting_as(label="agent:gpu-01"):
        services.team_create(slug="robots", name="Robots")
    event = _last("team.create")
    assert event.actor is None and event.actor_label == "agent:gpu-01"


def test_a_named_user_outside_a_request_is_recorded_by_name(cast: Any) -> None:
    # A service handed `user=` from a task or a shell: the event names that user, not "system".
    audit_record(action="run.cancel_requested", object_type="runs.run", object_id=1, actor=cast.bob)
    event = _last("run.cancel_requested")
    assert event.actor == cast.bob and event.actor_label == "bob"
    audit_record(action="run.cancel_requested", object_type="runs.run", object_id=1)
    assert _last("run.cancel_requested").actor_label == "system"


# --- the API -------------------------------------------------------------------------------
def test_api_changes_are_audited_with_actor_and_ip(cast: Any) -> None:
    client = cast.client(cast.alice)
    created = client.post("/api/v1/projects/", {"team": "vision", "slug": "mnist", "name": "MNIST"}, format="json", REMOTE_ADDR=IP)
    assert created.status_code == 201
    pk = created.json()["id"]
    _assert_event("project.create", cast.alice, after={"slug": "mnist", "name": "MNIST"})
    assert client.patch(f"/api/v1/projects/{pk}/", {"name": "MNIST 2"}, format="json", REMOTE_ADDR=IP).status_code == 200
    _assert_event("project.update", cast.alice, before={"name": "MNIST"}, after={"name": "MNIST 2"})
    assert client.delete(f"/api/v1/projects/{pk}/", REMOTE_ADDR=IP).status_code == 204
    _assert_event("project.delete", cast.alice, before={"name": "MNIST 2"})


def test_token_authenticated_api_changes_name_the_token_user(cast: Any) -> None:
    anon = Client()
    key = anon.post("/api/v1/auth/token/", {"username": "alice", "password": "pw-alice-123456"}, content_type="application/json")
    body = {"team": "vision", "slug": "tok", "name": "T"}
    created = anon.post(
        "/api/v1/projects/", body, content_type="application/json", HTTP_AUTHORIZATION=f"Token {key.json()['token']}", REMOTE_ADDR=IP
    )
    assert created.status_code == 201
    _assert_event("project.create", cast.alice)


# --- the Django admin ----------------------------------------------------------------------
def _admin(cast: Any) -> Client:
    client = Client(REMOTE_ADDR=IP)
    client.force_login(cast.admin)
    return client


INLINE = {"memberships-TOTAL_FORMS": "0", "memberships-INITIAL_FORMS": "0", "memberships-MIN_NUM_FORMS": "0",
          "memberships-MAX_NUM_FORMS": "1000"}


def _ok(response: Any) -> None:
    assert response.status_code == 302, response.content.decode()[:3000]


def test_admin_changes_are_audited(cast: Any) -> None:
    admin = _admin(cast)
    _ok(admin.post("/admin/tenants/team/add/", {"slug": "audio", "name": "Audio", **INLINE}))
    team = Team.objects.get(slug="audio")
    _assert_event("team.create", cast.admin, after={"slug": "audio"})
    _ok(admin.post(f"/admin/tenants/team/{team.pk}/change/", {"slug": "audio", "name": "Audio 2", **INLINE}))
    _assert_event("team.update", cast.admin, before={"name": "Audio"}, after={"name": "Audio 2"})

    _ok(admin.post("/admin/tenants/project/add/", {"team": team.pk, "slug": "asr", "name": "ASR", "description": ""}))
    project = Project.objects.get(team=team, slug="asr")
    _assert_event("project.create", cast.admin, after={"slug": "asr"})
    _ok(admin.post(f"/admin/tenants/project/{project.pk}/change/", {"team": team.pk, "slug": "asr", "name": "ASR 2", "description": "x"}))
    _assert_event("project.update", cast.admin, before={"name": "ASR", "description": ""}, after={"name": "ASR 2", "description": "x"})

    _ok(admin.post("/admin/tenants/membership/add/", {"team": team.pk, "user": cast.outsider.pk, "role": "viewer"}))
    membership = Membership.objects.get(team=team, user=cast.outsider)
    _assert_event("membership.create", cast.admin, after={"role": "viewer"})
    _ok(admin.post(f"/admin/tenants/membership/{membership.pk}/change/", {"role": "engineer"}))
    _assert_event("membership.update", cast.admin, before={"role": "viewer"}, after={"role": "engineer"})
    membership.refresh_from_db()
    assert (membership.team_id, membership.user_id, membership.role) == (team.pk, cast.outsider.pk, "engineer")

    _ok(admin.post(f"/admin/tenants/membership/{membership.pk}/delete/", {"post": "yes"}))
    _assert_event("membership.delete", cast.admin, before={"role": "engineer"})
    _ok(admin.post(f"/admin/tenants/project/{project.pk}/delete/", {"post": "yes"}))
    _assert_event("project.delete", cast.admin, before={"slug": "asr"})
    _ok(admin.post(f"/admin/tenants/team/{team.pk}/delete/", {"post": "yes"}))
    _assert_event("team.delete", cast.admin, before={"slug": "audio"})


def test_admin_bulk_delete_is_audited_per_object(cast: Any) -> None:
    with acting_as(user=cast.admin):
        teams = [services.team_create(slug=f"bulk-{i}", name=f"Bulk {i}") for i in range(2)]
    response = _admin(cast).post(
        "/admin/tenants/team/", {"action": "delete_selected", "_selected_action": [t.pk for t in teams], "post": "yes"}
    )
    _ok(response)
    assert not Team.objects.filter(slug__startswith="bulk-").exists()
    deleted = set(AuditEvent.objects.filter(action="team.delete").values_list("object_id", flat=True))
    assert deleted == {str(t.pk) for t in teams}


# --- append-only ---------------------------------------------------------------------------
def test_audit_events_cannot_be_updated_or_deleted(cast: Any) -> None:
    event = _last("team.create")
    event.action = "forged"
    with pytest.raises(TypeError, match="append-only"):
        event.save()
    with pytest.raises(TypeError, match="append-only"):
        event.delete()
    with pytest.raises(TypeError, match="append-only"):
        AuditEvent.objects.filter(pk=event.pk).update(action="forged")
    with pytest.raises(TypeError, match="append-only"):
        AuditEvent.objects.filter(pk=event.pk).delete()
    # bulk_update's own atomic block is rolled back by the refusal; keep it off the test's.
    with pytest.raises(TypeError, match="append-only"), transaction.atomic():
        AuditEvent.objects.bulk_update([event], ["action"])
    assert AuditEvent.objects.get(pk=event.pk).action == "team.create"

    # Nor through the admin, even for a superuser.
    admin = _admin(cast)
    assert admin.post(f"/admin/audit/auditevent/{event.pk}/delete/", {"post": "yes"}).status_code == 403
    page = admin.get(f"/admin/audit/auditevent/{event.pk}/change/")
    assert page.status_code == 200 and 'name="_save"' not in page.content.decode()
    admin.post(f"/admin/audit/auditevent/{event.pk}/change/", {"action": "forged"})
    assert admin.get("/admin/audit/auditevent/add/").status_code == 403
    assert AuditEvent.objects.get(pk=event.pk).action == "team.create"


# --- who may read it -----------------------------------------------------------------------
def test_audit_api_is_admin_only(cast: Any) -> None:
    for user in (cast.alice, cast.victor, cast.carol, cast.outsider):
        response = cast.client(user).get("/api/v1/audit/")
        assert response.status_code == 403, user
        assert response.json()["error"]["code"] == "permission_denied"
    event = _last("team.create")
    assert cast.client(cast.alice).get(f"/api/v1/audit/{event.pk}/").status_code == 403
    response = cast.client(cast.admin).get("/api/v1/audit/", {"action": "team.create"})
    assert response.status_code == 200
    rows = response.json()["results"]
    assert {row["action"] for row in rows} == {"team.create"} and len(rows) == 2
    assert {"actor", "before", "after", "ip", "at"} <= set(rows[0])
    assert cast.client(cast.admin).put(f"/api/v1/audit/{event.pk}/", {}).status_code == 405
    assert cast.client(cast.admin).delete(f"/api/v1/audit/{event.pk}/").status_code == 405


def test_audit_page_is_admin_only(cast: Any) -> None:
    client = Client()
    client.force_login(cast.alice)
    response = client.get("/audit/")
    # A signed-in engineer gets a page that says why, not the admin's staff login.
    assert response.status_code == 403
    assert "The audit log is for staff" in response.content.decode()
    anonymous = Client().get("/audit/")
    assert anonymous.status_code == 302 and anonymous["Location"] == "/login/?next=/audit/"
    client.force_login(cast.admin)
    page = client.get("/audit/", {"action": "team."})
    assert page.status_code == 200
    html = page.content.decode()
    assert "team.create" in html and "vision" in html


def test_audit_page_shows_changes_field_by_field() -> None:
    from apps.audit.views import change_lines

    before = {"guaranteed_devices": 2, "borrow_limit": 2, "preemptible": True}
    after = {"guaranteed_devices": 1, "borrow_limit": 2, "preemptible": False, "note": None}
    assert change_lines(before, after) == ["guaranteed_devices: 2 → 1", "note: null", "preemptible: true → false"]
    assert change_lines(None, {"name": "laptop"}) == ["name: laptop"]
    assert change_lines({"state": "ready"}, {}) == ["state: ready → (removed)"]
    assert change_lines("queued", "running") == ["queued → running"] and change_lines(None, None) == []


def test_a_refused_page_logs_one_line_without_a_traceback(cast: Any, caplog: pytest.LogCaptureFixture) -> None:
    client = Client()
    client.force_login(cast.alice)
    with caplog.at_level("WARNING", logger="django.request"):
        assert client.get("/audit/").status_code == 403
    [record] = [r for r in caplog.records if r.name == "django.request"]
    assert "Forbidden" in record.getMessage() and record.exc_info is None


def test_a_quota_reads_by_names_in_the_audit_log(cast: Any) -> None:
    from apps.billing.services import quota_create
    from apps.nodes.models import NodePool

    quota_create(team=cast.vision, pool=NodePool.objects.create(name="local"), guaranteed_devices=2, borrow_limit=1)
    event = AuditEvent.objects.get(action="quota.create")
    assert event.object_repr == "vision in local: 2 guaranteed + 1 to borrow"
