"""The Nodes page as a fleet map (in-process): a line per node with a square per device, filled when
a run holds it and hollow when free, each saying so in words too; the node's device table folded
below its line, written without repeating a model or a run on every row; a sentence that stays in
view for a node that is not working normally; other teams' runs named no more than before; and no
query per node or per device."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from apps.nodes.models import Device, Node, NodePool
from apps.nodes.templatetags.nodes_page import table_rows, util_level
from apps.runs.models import Assignment, Attempt, Run
from apps.tenants.models import Project
from tests.billing.helpers import make_run
from tests.nodes.test_nodes_page import node_block, page


@pytest.fixture
def pool(db: Any) -> NodePool:
    return NodePool.objects.create(name="fleet")


def gpu_node(pool: NodePool, hostname: str, utilization: list[float | None], state: str = "ready") -> Node:
    node = Node.objects.create(pool=pool, hostname=hostname, agent_uid=hostname, state=state, address="10.0.0.1", cpus=64,
                               memory_bytes=512 << 30, agent_version="1.0", last_heartbeat_at=timezone.now() - timedelta(seconds=4))
    Device.objects.bulk_create([Device(node=node, index=i, kind="gpu", model="NVIDIA A100", memory_bytes=80 << 30, utilization=u,
                                       power_w=None if u is None else 100.0 + i)
                                for i, u in enumerate(utilization)])
    return node


def hold(node: Node, project: Project, devices: list[int], name: str = "") -> Run:
    run = make_run(project, node.pool, devices_per_node=len(devices), name=name)
    attempt = Attempt.objects.create(run=run, number=1, started_at=timezone.now())
    Assignment.objects.create(attempt=attempt, node=node, devices=devices, state="started")
    return run




def squares(block: str) -> list[tuple[str, str, bool, str]]:
    """(the row it leads to, its colour, whether filled, what it says) for each square of a node."""
    strip = re.search(r'<span class="devmap">(.*?)</span>\n', block, re.S)
    assert strip, block
    return [(target, level, bool(held), said) for target, level, held, said in
            re.findall(r'<a href="#([\w-]+)" class="(u\d|un)( held)?"><span>([^<]*)</span></a>', strip.group(1))]


def test_a_square_per_device_filled_when_held_hollow_when_free_and_saying_which(cast: Any, pool: NodePool) -> None:
    node = gpu_node(pool, "g1", [10.0, 60.0, None, 99.0])
    run = hold(node, cast.digits, [0, 1], name="digits-a")
    block = node_block(page(cast.alice), "g1")
    assert squares(block) == [
        (f"d{node.pk}-0", "u0", True, "gpu0 in use"),
        (f"d{node.pk}-1", "u2", True, "gpu1 in use"),
        (f"d{node.pk}-2", "un", False, "gpu2 free"),
        (f"d{node.pk}-3", "u3", False, "gpu3 free"),
    ]
    # The line: hostname, state, heartbeat age in words; the squares before the folded table.
    line = block.split("<details", 1)[0]
    assert '<h3 class="node-name">g1</h3>' in line and "status-ready" in line and "last heartbeat 4 seconds ago" in line
    # Each square leads to its device's row in the node's table, which is folded (closed) by default.
    details = re.search(rf'<details id="node-{node.pk}-devices">(.*)</details>', block, re.S)
    assert details, block
    table = details.group(1).replace("\xa0", " ")
    for target, *_ in squares(block):
        assert f'<tr id="{target}">' in table
    assert "<summary>Details<span> of g1</span></summary>" in table
    assert "10.0.0.1 · 64 CPUs · 512.0 GB memory · agent 1.0" in table
    # What the table showed before: readings, "not reported", the run with its link and where it runs.
    assert "60 %" in table and "101.0 W" in table and table.count("not reported") == 2
    assert f'<a href="/runs/{run.pk}/">#{run.pk} digits-a</a>' in table
    assert "vision/digits · attempt 1 · rank 0" in table
    # The model is written once for the node's four devices and the run once for its two.
    assert table.count("NVIDIA A100 · 80.0 GB") == 1 and 'class="model" rowspan="4"' in table
    assert table.count("digits-a") == 1 and 'class="run" rowspan="2"' in table
    assert 'class="run" rowspan="2"><span class="muted">free</span>' in table


def test_a_node_that_is_not_working_normally_says_why_in_view(cast: Any, pool: NodePool, settings: Any) -> None:
    settings.TRAINYARD_NODE_TIMEOUT_S = 30
    gpu_node(pool, "fine", [0.0])
    busy = gpu_node(pool, "full", [90.0])
    hold(busy, cast.digits, [0])
    gpu_node(pool, "gone", [None, None], state="lost")
    gpu_node(pool, "leaving", [5.0], state="draining")
    html = page(cast.alice)
    for hostname, sentence in (("gone", "Silent for more than 30 seconds: its runs were requeued."),
                               ("leaving", "Its agent is shutting down: takes no new work.")):
        shown = node_block(html, hostname).split("<details", 1)[0]  # outside the folded table
        assert f'<p class="muted node-state">{sentence}' in shown, shown
    # A ready node needs no words, and a busy one's are in the legend, once for the page.
    assert "node-state" not in node_block(html, "fine") and "node-state" not in node_block(html, "full")
    assert 'data-state="busy"' in node_block(html, "full")
    legend = html.split('<div id="node-pools">', 1)[0]
    assert "A node is busy when every device is in use" in legend
    for words in ("under 25 % busy", "75 % or more", "not reported", "filled: held by a run", "hollow: free"):
        assert words in legend
    # The legend and the details box are the page's, not the part that is fetched again and again.
    part = page(cast.alice, "/nodes/?partial=1")
    assert "legend" not in part and "device-tip" not in part and 'class="devmap"' in part


def test_another_teams_run_is_named_no_more_than_before(cast: Any, pool: NodePool) -> None:
    node = gpu_node(pool, "g1", [50.0, 50.0, 0.0])
    theirs = hold(node, cast.tinylm, [0, 1], name="secret-lm")
    mine = page(cast.bob)
    assert f'<a href="/runs/{theirs.pk}/">#{theirs.pk} secret-lm</a>' in node_block(mine, "g1")
    block = node_block(page(cast.alice), "g1")
    # alice sees that two devices are taken, and by whom never: no link, id, name or project.
    assert [(held, said) for _, _, held, said in squares(block)] == [(True, "gpu0 in use"), (True, "gpu1 in use"), (False, "gpu2 free")]
    assert "another team&#x27;s run" in block
    assert "/runs/" not in block and "secret-lm" not in block and "nlp/tiny-lm" not in block and f"#{theirs.pk}" not in block


def test_drain_stays_on_the_line_and_the_pool_keeps_its_totals(cast: Any, pool: NodePool) -> None:
    node = gpu_node(pool, "g1", [0.0, 0.0, 0.0])
    hold(node, cast.digits, [2])
    html = page(cast.admin)
    line = node_block(html, "g1").split("<details", 1)[0]
    assert f'data-action="drain" data-node="{node.pk}"' in line
    assert "1 node · 2 of 3 devices free · $0.00 per device-hour" in html
    assert "data-action" not in page(cast.alice)


def test_the_table_writes_each_model_and_run_once_per_stretch() -> None:
    a, b = {"id": 1}, {"id": 2}
    devices = [{"model": "cpu", "memory_bytes": 0, "run": a}, {"model": "cpu", "memory_bytes": 0, "run": a},
               {"model": "H100", "memory_bytes": 80, "run": None}, {"model": "H100", "memory_bytes": 80, "run": b},
               {"model": "H100", "memory_bytes": 80, "run": None}]
    rows = table_rows(devices)
    assert [(r["model_rows"], r["run_rows"]) for r in rows] == [(2, 2), (0, 0), (3, 1), (0, 1), (0, 1)]
    assert [r["device"] for r in rows] == devices
    assert table_rows([]) == []
    assert [util_level(u) for u in (None, 0.0, 24.9, 25.0, 74.0, 75.0, 240.0)] == ["un", "u0", "u0", "u1", "u2", "u3", "u3"]


def queries(client: Client, url: str) -> int:
    with CaptureQueriesContext(connection) as ctx:
        assert client.get(url).status_code == 200
    return len(ctx.captured_queries)


@pytest.mark.parametrize("url", ["/nodes/", "/nodes/?partial=1"])
def test_no_query_per_node_or_device(cast: Any, pool: NodePool, url: str) -> None:
    client = Client()
    client.force_login(cast.alice)
    hold(gpu_node(pool, "g0", [1.0, 2.0]), cast.digits, [0])
    few = queries(client, url)
    for i in range(1, 6):
        node = gpu_node(pool, f"g{i}", [float(i)] * 8)
        hold(node, cast.digits if i % 2 else cast.tinylm, list(range(i)))
    gpu_node(NodePool.objects.create(name="spare"), "s1", [None] * 4, state="lost")
    assert queries(client, url) == few, "a query per node, device or run?"


def test_a_big_node_costs_a_fraction_of_what_it_did(cast: Any, pool: NodePool) -> None:
    """Every row repeated its model, its run and a bar (4 KB a node of 8 GPUs, 409 KB for 100): now
    the squares and a row of readings per device, the rest once."""
    for i in range(10):
        hold(gpu_node(pool, f"a100-{i:03d}", [float(10 * d) for d in range(8)]), cast.digits, list(range(8)), name=f"sweep {i} lr=0.1")
    size = len(page(cast.alice, "/nodes/?partial=1").encode())
    assert size < 10 * 2200, f"{size} bytes for 10 nodes of 8 GPUs"
