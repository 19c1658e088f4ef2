"""In-app notifications: audited happenings (run transitions, a lost node, budget alerts, model
promotions) tell the right users once, never another team's; the API and page show each user
their own only."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection, transaction
from django.test import Client as PageClient
from django.test.utils import CaptureQueriesContext

from apps.audit.models import AuditEvent
from apps.billing import tasks
from apps.billing.services import accrual_run, budget_alerts_check, budget_create
from apps.nodes.services import node_lost_mark
from apps.notifications import signals
from apps.notifications.models import Notification
from apps.registry import services as registry
from apps.runs.models import Run, RunStatus
from apps.runs.services.transitions import run_transition
from apps.tenants.models import Membership, Role
from apps.tenants.services import membership_set
from tests.billing.helpers import make_attempt, make_node, make_pool, make_run
from tests.registry.factories import evaluate_run, train_run
from tests.runs.factories import body, local_pool, make_template

pytestmark = pytest.mark.django_db


def submit(cast: Any, user: Any = None, project: Any = None) -> Run:
    local_pool()
    make_template()
    user = user or cast.alice
    response = cast.client(user).post("/api/v1/runs/", body(cast, project=(project or cast.digits).pk), format="json")
    assert response.status_code == 201, response.json()
    return Run.objects.get(pk=response.json()["id"])


def walk(run: Run, *steps: tuple[str, str], **extra: Any) -> None:
    """Move the run through the transition table, as the services do (each move audited)."""
    for to, action in steps:
        run_transition(run, to=to, action=action, **extra)


START = ((RunStatus.SCHEDULED, "run.scheduled"), (RunStatus.RUNNING, "run.running"))


def told(user: Any) -> list[tuple[str, str]]:
    return list(Notification.objects.filter(user=user).order_by("pk").values_list("kind", "title"))


def test_run_outcomes_tell_their_submitter_only(cast: Any) -> None:
    won, lost, preempted = submit(cast), submit(cast), submit(cast)
    walk(won, *START, (RunStatus.SUCCEEDED, "run.succeeded"))
    walk(lost, *START)
    run_transition(lost, to=RunStatus.LOST, action="run.lost", reason="node host-1 went silent", reason_code="node_lost")
    run_transition(lost, to=RunStatus.QUEUED, action="run.requeued", reason="node host-1 went silent", reason_code="node_lost")
    walk(preempted, *START)
    run_transition(preempted, to=RunStatus.QUEUED, action="run.requeued", reason="preempted by the scheduler",
                   reason_code="preempted")
    run_transition(lost, to=RunStatus.SCHEDULED, action="run.scheduled")
    run_transition(lost, to=RunStatus.FAILED, action="run.failed", reason="rank 0 exited with code 1", reason_code="user_error")
    cancelled = submit(cast)
    assert cast.client(cast.alice).post(f"/api/v1/runs/{cancelled.pk}/cancel/").status_code == 200

    assert told(cast.alice) == [
        ("run.succeeded", f"Run #{won.pk} succeeded"),
        ("run.lost", f"Run #{lost.pk} lost its node"),  # its requeue after the lost node says nothing more
        ("run.preempted", f"Run #{preempted.pk} was preempted"),
        ("run.failed", f"Run #{lost.pk} failed"),
        ("run.cancelled", f"Run #{cancelled.pk} was cancelled"),
    ]
    note = Notification.objects.get(user=cast.alice, kind="run.failed")
    assert note.url == f"/runs/{lost.pk}/" and note.team_id == cast.vision.pk and note.read_at is None
    assert note.body == "digits-classifier in vision/digits. Rank 0 exited with code 1."
    assert "resumes from its latest checkpoint" in Notification.objects.get(user=cast.alice, kind="run.preempted").body
    # Team-mates, another team, finance, outsiders and superusers hear nothing of alice's runs.
    for other in (cast.victor, cast.bob, cast.carol, cast.outsider, cast.admin):
        assert told(other) == []


def test_a_notification_is_made_once_and_only_if_the_change_commits(cast: Any) -> None:
    run = submit(cast)
    walk(run, *START)
    with pytest.raises(RuntimeError), transaction.atomic():
        run_transition(run, to=RunStatus.SUCCEEDED, action="run.succeeded")
        raise RuntimeError("rolled back")
    assert told(cast.alice) == []
    run.refresh_from_db()
    run_transition(run, to=RunStatus.SUCCEEDED, action="run.succeeded")
    event = AuditEvent.objects.get(action="run.succeeded", object_id=str(run.pk))
    signals.on_audit_event(AuditEvent, event, created=True)  # the same happening seen again
    assert len(told(cast.alice)) == 1


def test_a_submitter_who_left_the_team_hears_no_more_of_it(cast: Any, django_user_model: Any) -> None:
    erin = django_user_model.objects.create_user("erin", "erin@example.com", "pw-erin-1234567")
    membership_set(team=cast.vision, user=erin, role=Role.ENGINEER)
    run = submit(cast, user=erin)
    Membership.objects.filter(team=cast.vision, user=erin).delete()
    walk(run, *START, (RunStatus.FAILED, "run.failed"))
    assert told(erin) == [] and told(cast.alice) == []


def test_a_lost_node_tells_each_submitter_of_their_own_runs_on_it(cast: Any) -> None:
    pool = make_pool()
    node, elsewhere = make_node(pool), make_node(pool)
    now = datetime.now(UTC)
    mine = [make_run(cast.digits, pool, submitted_by=cast.alice) for _ in range(2)]
    theirs = make_run(cast.tinylm, pool, submitted_by=cast.bob)
    for run in (*mine, theirs):
        make_attempt(run, started_at=now, node=node)
    make_attempt(make_run(cast.digits, pool, submitted_by=cast.victor), started_at=now, node=elsewhere)
    with transaction.atomic():
        assert node_lost_mark(node_id=node.pk) is not None

    alice = Notification.objects.get(user=cast.alice, kind="node.lost")
    assert alice.title == f"Node {node.hostname} lost" and alice.url == "/runs/"
    assert f"#{mine[0].pk}, #{mine[1].pk}" in alice.body and f"#{theirs.pk}" not in alice.body
    bob = Notification.objects.get(user=cast.bob, kind="node.lost")
    assert bob.body.endswith(f"run #{theirs.pk}; they are requeued.") and bob.url == f"/runs/{theirs.pk}/"
    assert bob.team_id == cast.nlp.pk and f"#{mine[0].pk}" not in bob.body
    assert told(cast.victor) == [] and told(cast.carol) == []


def test_budget_alert_tells_team_admins_and_finance_once_naming_the_highest(
        cast: Any, django_capture_on_commit_callbacks: Callable[..., Any]) -> None:
    pool = make_pool(prices=[(datetime(2024, 1, 1, tzinfo=UTC), "1.00")])
    budget_create(team=cast.vision, project=cast.digits, amount="10.00")
    budget_create(team=cast.nlp, project=cast.tinylm, amount="1000.00")
    now = datetime(2026, 11, 20, 12, tzinfo=UTC)
    start = datetime(2026, 11, 2, tzinfo=UTC)
    make_attempt(make_run(cast.digits, pool), started_at=start, ended_at=start + timedelta(hours=8.5))  # $8.50: 50% and 80%
    accrual_run(now=now)
    with django_capture_on_commit_callbacks(execute=True):
        fired = budget_alerts_check(now=now, notify=tasks._queue_notify)
    assert [a.threshold for a in fired] == [50, 80]
    tasks.alert_notify.apply(args=[fired[-1].pk], throw=True)  # a redelivered task message tells no one twice

    alice = Notification.objects.get(user=cast.alice)
    assert alice.kind == "budget.alert" and "reached 80%" in alice.title and alice.url == "/budgets/"
    assert "$8.50 of $10.00" in alice.body
    carol = Notification.objects.get(user=cast.carol)  # finance: every team's budgets, on the finance page
    assert carol.title == alice.title and carol.url == "/finance/"
    for other in (cast.victor, cast.bob, cast.outsider):  # a viewer, another team's admin, an outsider
        assert told(other) == []


def test_model_promotion_and_rollback_tell_the_team(cast: Any) -> None:
    model = registry.model_create(project=cast.digits, name="digits-classifier", user=cast.alice,
                                  thresholds=[{"metric": "val_accuracy", "op": ">=", "value": 0.9}])
    _, ckpts = train_run(cast.digits, steps=(100, 200))
    for ckpt in ckpts:
        registry.version_create(model=model, user=cast.alice, checkpoint=ckpt.pk)
        evaluate_run(cast.digits, ckpt, metrics={"val_accuracy": 0.95})
    registry.version_promote(version=model.versions.get(number=1), user=cast.alice)
    registry.version_promote(version=model.versions.get(number=2), user=cast.alice)
    registry.model_rollback(model=model, user=cast.alice)

    titles = ["Model digits-classifier v1 promoted to production", "Model digits-classifier v2 promoted to production",
              "Model digits-classifier rolled back to v1"]
    for member in (cast.alice, cast.victor):  # the team, viewers included
        assert [t for _, t in told(member)] == titles
    second = Notification.objects.get(user=cast.victor, title=titles[1])
    assert second.kind == "model.promoted" and second.url == f"/models/{model.pk}/"
    assert second.body.startswith("alice promoted it in vision/digits; it replaces v1; evidence: run #")
    rolled = Notification.objects.get(user=cast.victor, kind="model.rolled_back")
    assert rolled.body == "alice rolled back vision/digits; v2 is archived."
    for other in (cast.bob, cast.carol, cast.outsider, cast.admin):
        assert told(other) == []


def _notes(cast: Any) -> tuple[Run, list[Notification]]:
    run = submit(cast)
    walk(run, *START, (RunStatus.SUCCEEDED, "run.succeeded"))
    walk(submit(cast), (RunStatus.CANCELLED, "run.cancelled"))
    walk(submit(cast, user=cast.bob, project=cast.tinylm), (RunStatus.CANCELLED, "run.cancelled"))
    return run, list(Notification.objects.filter(user=cast.alice).order_by("-pk"))


def test_api_lists_marks_and_counts_own_notifications_only(cast: Any) -> None:
    run, (newest, oldest) = _notes(cast)
    alice, bob = cast.client(cast.alice), cast.client(cast.bob)
    listed = alice.get("/api/v1/notifications/").json()
    assert [n["id"] for n in listed["results"]] == [newest.pk, oldest.pk] and listed["count"] == 2
    assert listed["results"][1] | {"created_at": None} == {
        "id": oldest.pk, "kind": "run.succeeded", "title": f"Run #{run.pk} succeeded", "url": f"/runs/{run.pk}/",
        "body": "digits-classifier in vision/digits.", "created_at": None, "read_at": None, "unread": True}
    assert [n["kind"] for n in bob.get("/api/v1/notifications/").json()["results"]] == ["run.cancelled"]
    assert alice.get("/api/v1/notifications/unread-count/").json() == {"unread": 2}

    # Another user's notification does not exist for bob: 404, and nothing changes.
    assert bob.get(f"/api/v1/notifications/{oldest.pk}/").status_code == 404
    assert bob.post(f"/api/v1/notifications/{oldest.pk}/read/").status_code == 404
    assert Notification.objects.get(pk=oldest.pk).read_at is None

    read = alice.post(f"/api/v1/notifications/{oldest.pk}/read/").json()
    assert read["unread"] is False and read["read_at"]
    assert [n["id"] for n in alice.get("/api/v1/notifications/?unread=1").json()["results"]] == [newest.pk]
    assert alice.get("/api/v1/notifications/?unread=0").json()["count"] == 2
    bad = alice.get("/api/v1/notifications/?unread=maybe")
    assert bad.status_code == 400 and "unread" in bad.json()["error"]["fields"]

    assert bob.post("/api/v1/notifications/read-all/").json() == {"marked": 1, "unread": 0}
    assert alice.get("/api/v1/notifications/unread-count/").json() == {"unread": 1}  # bob's read-all is bob's
    assert alice.post("/api/v1/notifications/read-all/").json() == {"marked": 1, "unread": 0}
    assert cast.client(None).get("/api/v1/notifications/").status_code in (401, 403)


def test_the_bell_poll_is_one_count_query(cast: Any) -> None:
    _notes(cast)
    alice = cast.client(cast.alice)
    with CaptureQueriesContext(connection) as queries:
        assert alice.get("/api/v1/notifications/unread-count/").json() == {"unread": 2}
    ours = [q["sql"] for q in queries.captured_queries if "notifications_notification" in q["sql"]]
    assert len(ours) == 1 and "COUNT(" in ours[0].upper()


def test_page_and_bell_show_own_notifications(cast: Any) -> None:
    run, (newest, oldest) = _notes(cast)
    page = PageClient()
    page.force_login(cast.alice)
    html = page.get("/", follow=True).content.decode()
    assert 'aria-label="Notifications, 2 unread"' in html and 'id="bell-badge"' in html
    html = page.get("/notifications/").content.decode()
    assert f'href="/runs/{run.pk}/">Run #{run.pk} succeeded</a>' in html and "Unread (2)" in html
    assert "tiny-lm" not in html  # bob's cancelled run is bob's

    other = PageClient()
    other.force_login(cast.bob)
    assert other.post(f"/notifications/{oldest.pk}/read/").status_code == 404
    followed = page.post(f"/notifications/{oldest.pk}/read/", {"follow": "1"})
    assert followed.status_code == 302 and followed["Location"] == f"/runs/{run.pk}/"
    assert page.post("/notifications/read-all/").status_code == 302
    html = page.get("/notifications/?unread=1").content.decode()
    assert "Nothing unread." in html and "Unread (0)" in html
    assert 'aria-label="Notifications, none unread"' in html


def test_admin_lists_notifications_read_only(cast: Any) -> None:
    _, (newest, _) = _notes(cast)
    page = PageClient()
    page.force_login(cast.admin)
    listing = page.get("/admin/notifications/notification/")
    assert listing.status_code == 200 and newest.title in listing.content.decode()
    assert page.get("/admin/notifications/notification/add/").status_code == 403
