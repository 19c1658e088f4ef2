"""The Nodes page and GET /api/v1/nodes/ as the fleet's users read them (in-process): how runs are
named and hidden, times that name their zone, ages in words, readings that say when nothing is
reported, and what a lost node's row says."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from apps.fleet.services import nodes_sweep
from apps.nodes.models import Device, Node, NodePool
from apps.nodes.services import node_drain
from apps.runs.models import Run
from apps.scheduling.services import placement_pass
from tests.agents.server import A, claim, make_run, register
from tests.pages import page_html


@pytest.fixture
def pool(db: Any) -> NodePool:
    return NodePool.objects.create(name="local")


def page(user: Any, path: str = "/nodes/") -> str:
    return page_html(user, path)


def node_block(html: str, hostname: str) -> str:
    match = re.search(rf'<div class="node" data-node="\d+" data-node-name="{hostname}".*?</details>', html, re.S)
    assert match, html
    return match.group(0)


def running_run(cast: Any, pool: NodePool, uid: str = "n1", **fields: Any) -> tuple[APIClient, dict[str, Any], Run]:
    """A run of vision/digits (alice's team) placed and claimed on a fresh node."""
    client, reg = register(pool, uid)
    run = make_run(cast, pool, **fields)
    placement_pass()
    [spec] = claim(client, reg["session"])
    assert spec["run_id"] == run.pk
    return client, reg, run


def test_runs_are_named_as_on_every_page_and_other_teams_see_none(cast: Any, pool: NodePool) -> None:
    _, _, unnamed = running_run(cast, pool, "n1")
    _, _, named = running_run(cast, pool, "n2", name="digits-a")
    html = page(cast.alice)
    # "#41", as the runs list, the run page and the queue write it: never a made-up "run 41".
    assert f'<a href="/runs/{unnamed.pk}/">#{unnamed.pk}</a>' in node_block(html, "n1")
    assert f'<a href="/runs/{named.pk}/">#{named.pk} digits-a</a>' in node_block(html, "n2")
    assert f"run {unnamed.pk}" not in html
    # bob (another team) sees that the devices are taken, by whom never: no link, id, name or project.
    theirs = page(cast.bob)
    for hostname in ("n1", "n2"):
        block = node_block(theirs, hostname)
        assert "another team&#x27;s run" in block
        assert "/runs/" not in block and "digits-a" not in block and "vision/digits" not in block
    assert f"#{unnamed.pk}" not in theirs and f"#{named.pk}" not in theirs
    # The API keeps its fields as older clients read them.
    [row] = [n for n in cast.client(cast.alice).get("/api/v1/nodes/").json()["results"] if n["hostname"] == "n1"]
    assert row["runs"][0]["name"] == f"run {unnamed.pk}" and "label" not in row["runs"][0]


def test_times_name_their_zone_and_ages_read_in_words(cast: Any, pool: NodePool) -> None:
    register(pool, "n1")
    node = Node.objects.get(agent_uid="n1")
    beat = timezone.now() - timedelta(hours=2, minutes=30)
    Node.objects.filter(pk=node.pk).update(last_heartbeat_at=beat)
    node_drain(node=node, user=cast.admin, deadline_s=600)
    block = node_block(page(cast.admin), "n1")
    # An age in the unit that fits (not "9000 s ago"), and the instant as a <time> whose text says its zone.
    assert "last heartbeat 2.5 hours ago" in block
    assert re.search(rf'<time datetime="{re.escape(beat.isoformat())}" title="[^"]+">\w{{3}} \d+, \d{{4}}, \d+:\d\d:\d\d [AP]M UTC</time>',
                     block), block
    # The drain deadline: how long until running attempts are preempted, and when, with its zone
    # (it was "2026-11-2502:54:30", the date and the clock run together and no zone).
    node.refresh_from_db()
    assert node.drain_deadline is not None
    text = re.sub(r"\s+", " ", block)
    assert re.search(r"Drained by an administrator: takes no new work until undrained\. Running attempts are preempted "
                     r"\(checkpointed and requeued\) in 10 minutes, at <time datetime=\"[^\"]+\" title=\"[^\"]+\">"
                     r"[^<]+ UTC</time>\.", text), text
    # The API gives the instant too, beside the age in seconds.
    row = cast.client(cast.alice).get("/api/v1/nodes/").json()["results"][0]
    assert row["last_heartbeat_at"] == beat.isoformat() and row["drained_by_admin"] is True
    assert 9000 <= row["heartbeat_age_s"] < 9100


def test_readings_say_when_not_reported_and_which_are_estimates(cast: Any, pool: NodePool) -> None:
    register(pool, "n1", slots=2)
    node = Node.objects.get(agent_uid="n1")
    Device.objects.filter(node=node, index=0).update(utilization=240.0, power_w=24.0)  # a job using 2.4 cores on one slot
    Device.objects.create(node=node, index=2, kind="gpu", model="NVIDIA H100", utilization=97.0, power_w=612.5)
    block = node_block(page(cast.alice), "n1")
    # A row ends where the next begins (the page leaves out the end tags HTML allows it to).
    rows = re.findall(r'<tr id="d\d+-\d">.*?(?=<tr|</tbody>)', block, re.S)
    busy, idle, measured = (re.sub(r"\s+", " ", r) for r in rows)
    assert "240 %" in busy and re.search(r'<a href="#d\d+-0" class="u3">', block)  # the square's colour tops out
    assert "≈ 24.0 W (estimated)" in busy  # a CPU slot's watts are CPU time x watts per core
    assert idle.count("not reported") == 2 and "–" not in idle
    assert "612.5 W" in measured and "estimated" not in measured


def test_a_lost_node_says_what_happened_and_keeps_no_stale_readings(cast: Any, pool: NodePool, settings: Any) -> None:
    settings.TRAINYARD_NODE_TIMEOUT_S = 30
    client, reg, run = running_run(cast, pool)
    base = {"attempt_id": run.attempts.get().pk, "number": 1, "node_rank": 0, "time": 0}
    assert client.post(A + "events/", {**base, "event": "started"}, format="json").status_code == 200
    hb = {"session": reg["session"], "draining": False, "devices": [{"index": 0, "utilization": 88.0, "power_w": 8.8}],
          "running": [base]}
    assert client.post(A + "heartbeat/", hb, format="json").status_code == 200
    assert Device.objects.get(node__agent_uid="n1").utilization == 88.0
    Node.objects.update(last_heartbeat_at=timezone.now() - timedelta(minutes=5))
    assert nodes_sweep()["lost"] == 1
    # Its last readings were minutes old and nothing measures the node now: not shown as current.
    assert Device.objects.filter(node__agent_uid="n1", utilization__isnull=True, power_w__isnull=True).count() == 1
    block = re.sub(r"\s+", " ", node_block(page(cast.bob), "n1"))
    assert "status-lost" in block and "last heartbeat 5 minutes ago" in block
    assert "Silent for more than 30 seconds: its runs were requeued. It rejoins when its agent reports again." in block
    assert block.count("not reported") == 2


def test_the_page_polls_its_pools(cast: Any, pool: NodePool) -> None:
    register(pool, "n1")
    client = Client()
    client.force_login(cast.victor)
    full = client.get("/nodes/").content.decode()
    assert 'id="node-pools"' in full and "nodes/nodes.js" in full  # the script keeps every viewer's page current
    part = client.get("/nodes/?partial=1")
    assert part.status_code == 200 and part.content.decode().lstrip().startswith('<div id="node-pools">')
    assert "<html" not in part.content.decode() and part.has_header("ETag")


def test_nodes_api_names_an_unknown_pool_as_it_names_an_unknown_state(cast: Any) -> None:
    NodePool.objects.get_or_create(name="local")
    client = cast.client(cast.alice)
    assert client.get("/api/v1/nodes/?pool=local").status_code == 200
    answer = client.get("/api/v1/nodes/?pool=lcoal")
    assert answer.status_code == 400
    assert answer.json()["error"]["fields"]["pool"] == ["no pool 'lcoal' (pools: local)"]
