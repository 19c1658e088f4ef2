"""The runs card on the home and project pages: what is running, what waits and when it starts,
what finished lately; and never another team's runs."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.test import Client
from django.utils import timezone

from apps.runs.models import RunStatus
from apps.tracking.overview import runs_overview
from tests.pages import page_html
from tests.tracking.conftest import make_run


def _page(user: Any, path: str) -> str:
    return page_html(user, path)


def test_overview_orders_and_words(cast: Any) -> None:
    now = timezone.now()
    ago = now - timedelta(minutes=10)
    queued_2 = make_run(cast.digits, name="second", status=RunStatus.QUEUED, queue_position=2, submitted_by=cast.alice,
                        estimated_start=now + timedelta(minutes=20))
    queued_1 = make_run(cast.digits, name="first", status=RunStatus.QUEUED, queue_position=1, submitted_by=cast.alice,
                        estimated_start=now + timedelta(seconds=40))
    running = make_run(cast.digits, name="busy", status=RunStatus.RUNNING, started_at=ago, progress_at=now - timedelta(minutes=5),
                       steps_done=500, total_steps=2000, submitted_by=cast.alice)
    done = make_run(cast.digits, name="done", status=RunStatus.SUCCEEDED, started_at=ago - timedelta(hours=2),
                    finished_at=ago - timedelta(hours=1, minutes=30))
    failed = make_run(cast.digits, name="broke", status=RunStatus.FAILED, started_at=ago, finished_at=ago + timedelta(minutes=2))
    just = make_run(cast.digits, name="just", status=RunStatus.CANCELLED, finished_at=now - timedelta(seconds=20))
    make_run(cast.digits, name="old", status=RunStatus.SUCCEEDED, started_at=now - timedelta(days=30),
             finished_at=now - timedelta(days=29))

    view = runs_overview(runs=cast.digits.runs.all(), now=now)

    assert [r["pk"] for r in view["active"]] == [running.pk, queued_1.pk, queued_2.pk]
    assert (view["running"], view["waiting"], view["succeeded"], view["failed"], view["cancelled"]) == (1, 2, 1, 1, 1)
    busy, first, second = (r["words"] for r in view["active"])
    # 500 steps in the 5 minutes between start and last progress: 1,500 left at that pace is 15 minutes.
    assert busy == "500 of 2,000 steps · about 15 minutes left"
    assert view["active"][0]["pct"] == 25
    assert first.startswith("#1 in pool track · starts in about 40 seconds (")
    assert second.startswith("#2 in pool track · starts in about 20 minutes (")
    assert [r["pk"] for r in view["recent"]][:3] == [just.pk, failed.pk, done.pk]
    assert view["recent"][0]["words"] == "cancelled just now"
    # timesince keeps "8 minutes" together with a no-break space.
    assert view["recent"][1]["words"].replace("\xa0", " ") == "failed 8 minutes ago after 2 minutes"
    assert view["recent"][2]["words"].endswith("ago after 30 minutes")


def test_overview_of_a_queued_run_the_scheduler_has_not_seen(cast: Any) -> None:
    make_run(cast.digits, status=RunStatus.QUEUED, status_reason="")
    view = runs_overview(runs=cast.digits.runs.all())
    assert view["active"][0]["words"] == "waiting in pool track · no estimate yet"


def test_home_shows_your_runs_and_the_project_page_its_runs(cast: Any) -> None:
    mine = make_run(cast.digits, name="alices-run", status=RunStatus.QUEUED, queue_position=1, submitted_by=cast.alice)
    teammate = make_run(cast.digits, name="victors-run", status=RunStatus.RUNNING, submitted_by=cast.victor)
    theirs = make_run(cast.tinylm, name="bobs-secret-run", status=RunStatus.RUNNING, submitted_by=cast.bob)

    home = _page(cast.alice, "/projects/")
    assert "Your runs" in home and f"/runs/{mine.pk}/" in home
    assert "victors-run" not in home and "bobs-secret-run" not in home

    project = _page(cast.alice, f"/projects/{cast.digits.pk}/")
    assert 'id="runs-panel"' in project and "alices-run" in project and "victors-run" in project
    assert "bobs-secret-run" not in project
    assert project.index('id="runs-panel"') < project.index("Members")

    # Bob sees his own run on his home page, and nothing of the vision team's.
    bob_home = _page(cast.bob, "/projects/")
    assert f"/runs/{theirs.pk}/" in bob_home and "alices-run" not in bob_home and f"/runs/{teammate.pk}/" not in bob_home

    # Someone who never submitted a run (finance) gets no empty card.
    assert "Your runs" not in _page(cast.carol, "/projects/")


def test_the_card_alone_keeps_the_pages_current(cast: Any) -> None:
    run = make_run(cast.digits, name="alices-run", status=RunStatus.QUEUED, queue_position=3, submitted_by=cast.alice)
    client = Client()
    client.force_login(cast.alice)
    card = client.get("/runs/overview/").content.decode()
    assert "#3 in pool track" in card and "<section" not in card  # the inside of the card, to swap in
    assert "alices-run" in client.get(f"/runs/overview/?project={cast.digits.pk}").content.decode()
    # Another team's project, or a made-up one, is a 404; a user with no runs gets no card at all.
    assert client.get(f"/runs/overview/?project={cast.tinylm.pk}").status_code == 404
    assert client.get("/runs/overview/?project=x").status_code == 404
    carol = Client()
    carol.force_login(cast.carol)
    assert carol.get("/runs/overview/").status_code == 204
    run.status = RunStatus.RUNNING
    run.save()
    assert "running for" in client.get("/runs/overview/").content.decode()


def test_the_card_says_why_a_run_waits_or_failed_in_a_line_of_its_own(cast: Any) -> None:
    """Not only in the status badge's tooltip, which touch and keyboard users never see."""
    now = timezone.now()
    make_run(cast.digits, name="waits", status=RunStatus.QUEUED, queue_position=1, estimated_start=now + timedelta(minutes=5),
             status_reason="Waiting behind urgent-priority job 12 and others ahead of it.")
    make_run(cast.digits, name="broke", status=RunStatus.FAILED, started_at=now - timedelta(minutes=3), finished_at=now,
             status_reason="exit code 1: CUDA out of memory")
    make_run(cast.digits, name="unseen", status=RunStatus.QUEUED, status_reason="Not yet looked at by the scheduler.")
    make_run(cast.digits, name="fine", status=RunStatus.SUCCEEDED, finished_at=now, status_reason="exit code 0")
    html = _page(cast.alice, f"/projects/{cast.digits.pk}/")
    reasons = [line.split(">", 1)[1] for line in html.split('<span class="run-reason"')[1:]]
    assert [r.split("</span>", 1)[0] for r in reasons] == [
        "Waiting behind urgent-priority job 12 and others ahead of it.", "exit code 1: CUDA out of memory"]
    # Already in the words of a run with no estimate, and a success says nothing more.
    view = runs_overview(runs=cast.digits.runs.all(), now=now)
    assert {r["name"]: r["why"] for r in view["active"] + view["recent"]} == {
        "waits": "Waiting behind urgent-priority job 12 and others ahead of it.", "unseen": "",
        "broke": "exit code 1: CUDA out of memory", "fine": ""}
