"""A run no set of its pool's ready nodes can hold has no estimated start anywhere: the estimator,
the pass's stored fields, the queue API, the queue page and the forecast; each says what is
missing instead (issue 28: ddp-train asking 2 nodes in a pool of 1 was told "in two minutes")."""

from __future__ import annotations

from typing import Any

from django.test import Client
from django.utils import timezone

from apps.nodes.models import NodePool
from apps.scheduling.estimate import queue_estimates, unestimated
from apps.scheduling.model import ClusterState, Node, NodeState, Policy, PriorityClass, QueuedJob, RunningJob
from apps.scheduling.services import scheduling_pass
from tests.agents.server import register
from tests.runs.factories import body, local_pool, make_template
from tests.scheduling.test_django_scheduling import make, start

MISSING = "needs 2 nodes with 1 device each; pool local has 1 such ready node"


def _job(job_id: str, nodes: int = 1, dpn: int = 1, pool: str = "p", **fields: Any) -> QueuedJob:
    return QueuedJob(id=job_id, team="a", pool=pool, priority_class=PriorityClass.NORMAL, submitted_at=0.0, nodes=nodes,
                     devices_per_node=dpn, predicted_runtime=600.0, **fields)


def test_the_estimator_gives_no_start_to_a_shape_no_ready_nodes_can_hold() -> None:
    busy = RunningJob(id="r", team="a", pool="p", priority_class=PriorityClass.NORMAL, allocation=(("n1", 1),),
                      started_at=0.0, predicted_end=120.0)
    state = ClusterState(
        now=10.0,
        nodes=(Node("n1", "p", 1, 0), Node("n2", "p", 4, 4, NodeState.DRAINING)),
        running=(busy,),
        # Two nodes of one device (only one ready); four devices (only on a draining node); held for
        # budget; a pool without nodes; and one that fits once the running job ends.
        queued=(_job("two", nodes=2), _job("wide", dpn=4), _job("fits"), _job("broke", blocked_reason="budget"),
                _job("nowhere", pool="q")),
        policies={"p": Policy()},
    )
    assert unestimated(state) == {"two", "wide", "broke", "nowhere"}
    est = queue_estimates(state)
    for job_id in ("two", "wide", "broke", "nowhere"):
        assert (est[job_id].start, est[job_id].low, est[job_id].high) == (None, None, None), est[job_id]
    # The one that fits starts when the running job ends, as before.
    assert est["fits"].start == 120.0


def test_an_impossible_shape_has_no_estimate_in_the_api_the_page_or_the_stored_run(cast: Any) -> None:
    pool = NodePool.objects.create(name="local")
    register(pool, "n1")
    blocker = make(cast, pool)
    scheduling_pass()
    start(blocker)
    ddp = make(cast, pool, nodes=2, dpn=1)  # the ddp-train of the issue: 2 nodes, the pool has 1
    mine_behind = make(cast, pool)
    scheduling_pass()
    ddp.refresh_from_db()
    mine_behind.refresh_from_db()
    assert ddp.reason_code == "no_hardware" and MISSING in ddp.status_reason
    assert (ddp.estimated_start, ddp.estimated_start_low, ddp.estimated_start_high) == (None, None, None)
    # The run behind it, which only waits for the running one, is still estimated.
    assert mine_behind.estimated_start is not None

    # An estimate stored before the hardware went (a node left) is not shown either.
    ddp.estimated_start = ddp.estimated_start_low = ddp.estimated_start_high = timezone.now()
    ddp.save(update_fields=["estimated_start", "estimated_start_low", "estimated_start_high"])
    for user in (cast.alice, cast.bob):  # its own team, and another team's member
        entries = cast.client(user).get("/api/v1/queue/").json()["pools"][0]["queue"]
        entry = next(e for e in entries if e["position"] == ddp.queue_position)
        assert entry["reason"]["code"] == "no_hardware"
        assert entry["estimated_start"]["at"] is None and entry["estimated_start"]["low"] is None
        assert entry["estimated_start"]["none_because"] == "none: no set of this pool's ready nodes can hold it"
        # What is missing is no secret: every viewer reads it.
        assert MISSING in entry["reason"]["message"]
        waiting = next(e for e in entries if e["position"] == mine_behind.queue_position)
        assert waiting["estimated_start"]["at"] is not None and waiting["estimated_start"]["none_because"] is None

    client = Client()
    client.force_login(cast.bob)
    html = client.get("/queue/").content.decode()
    row = html.split(f'data-position="{ddp.queue_position}"', 1)[1].split("</tr>", 1)[0]
    cell = row.split('class="estimate"', 1)[1]
    assert "none: no set of this pool&#x27;s ready nodes can hold it" in cell and "data-at" not in cell
    assert MISSING in row


def test_the_cli_shows_no_time_for_it(cast: Any) -> None:
    from datetime import UTC, datetime

    from trainyard._cli_reports import _queue_rows

    pool = NodePool.objects.create(name="local")
    register(pool, "n1")
    ddp = make(cast, pool, nodes=2, dpn=1)
    scheduling_pass()
    data = cast.client(cast.alice).get("/api/v1/queue/").json()["pools"][0]
    [row] = _queue_rows(data, datetime.now(UTC))
    assert row[0] == 1 and str(ddp.pk) in row[3]
    assert MISSING in row[6] and row[7] == "not estimated"


def test_the_forecast_of_an_impossible_shape_says_what_is_missing_and_no_time(cast: Any) -> None:
    pool = local_pool()
    make_template()
    register(pool, "n1", slots=1)
    answer = cast.client(cast.alice).post("/api/v1/queue/forecast/", body(cast, resources={"nodes": 2}), format="json")
    assert answer.status_code == 200, answer.content
    data = answer.json()
    assert not data["starts_now"] and data["reason"]["code"] == "no_hardware"
    assert data["estimated_start"] == {"at": None, "low": None, "high": None,
                                       "none_because": "none: no set of this pool's ready nodes can hold it"}
    assert MISSING in data["reason"]["message"]
    assert data["summary"].startswith("Would not start in pool local as it stands: The job " + MISSING)
    assert "no start can be estimated until that changes" in data["summary"] and "in line" not in data["summary"]
