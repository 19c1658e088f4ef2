"""Issue 23: the environment lineage an agent sends for each attempt and node (POST
/api/v1/agent/lineage/) is stored once, packages once per distinct set; a replay is a 200, a
different report a 409 that changes nothing; bad sizes are field errors. The run page, the run's
environment API (tenant-scoped) and the comparison show it, apart from what the job reported."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

import pytest
from django.test import Client

from apps.runs.models import Assignment, Attempt, Run
from apps.tracking.models import AttemptEnvironment, PackageSet
from tests.tracking.conftest import Reporting, make_attempt, make_node, make_reporting

PACKAGES = ["Django==5.2.19", "numpy==2.1.0", "torch==2.5.1"]


def environment(hostname: str = "gpu-a", **extra: Any) -> dict[str, Any]:
    return {"hostname": hostname, "node_rank": 0,
            "devices": [{"kind": "gpu", "index": 0, "model": "NVIDIA H100 80GB HBM3", "uuid": "GPU-1234"}],
            "gpu_driver": "550.54.15", "cuda_driver": "12.4",
            "python": {"version": "3.11.7", "implementation": "CPython", "executable": "/venv/bin/python"},
            "platform": "Linux-6.8-x86_64", "seed": 7, "params": {"seed": 7, "lr": 0.1},
            "torch": {"version": "2.5.1", "cuda": "12.4", "cudnn": 90100, "cuda_available": True, "devices": ["NVIDIA H100"]},
            **extra}


def body(attempt: Attempt, *, packages: list[str] | None = None, env: dict[str, Any] | None = None, rank: int = 0,
         sha: str | None = None) -> dict[str, Any]:
    pkgs = sorted(PACKAGES if packages is None else packages)
    return {"attempt_id": attempt.pk, "number": attempt.number, "node_rank": rank,
            "environment": environment() if env is None else env, "packages": pkgs,
            "packages_sha256": sha or hashlib.sha256("\n".join(pkgs).encode()).hexdigest()}


def post(rep: Reporting, data: Any, *, secret: str | None = None) -> Any:
    return Client().post("/api/v1/agent/lineage/", data=json.dumps(data), content_type="application/json",
                         HTTP_AUTHORIZATION=f"Node {secret or rep.secret}")


def test_first_report_is_stored_and_a_replay_changes_nothing(reporting: Reporting) -> None:
    first = post(reporting, body(reporting.attempt))
    assert first.status_code == 201, first.content
    assert first.json()["stored"] is True
    again = post(reporting, body(reporting.attempt))
    assert again.status_code == 200 and again.json() == {"stored": False, "id": first.json()["id"]}
    record = AttemptEnvironment.objects.get()
    assert (record.attempt_id, record.node_rank, record.hostname) == (reporting.attempt.pk, 0, reporting.node.hostname)
    assert record.environment["torch"]["cudnn"] == 90100
    assert record.package_set.packages == sorted(PACKAGES)


def test_a_different_report_is_refused_and_the_first_stands(reporting: Reporting) -> None:
    assert post(reporting, body(reporting.attempt)).status_code == 201
    for changed in (body(reporting.attempt, packages=[*PACKAGES[:2], "torch==2.6.0"]),
                    body(reporting.attempt, env=environment(seed=8))):
        resp = post(reporting, changed)
        assert resp.status_code == 409, resp.content
        error = resp.json()["error"]
        assert error["code"] == "lineage_immutable" and "immutable" in error["message"], error
    record = AttemptEnvironment.objects.get()
    assert record.environment["seed"] == 7 and "torch==2.5.1" in record.package_set.packages
    assert PackageSet.objects.count() == 1, "a refused report leaves no package set behind"


def test_each_distinct_package_set_is_stored_once(cast: Any, reporting: Reporting) -> None:
    other = make_reporting(cast.digits, name="digits-b")
    assert post(reporting, body(reporting.attempt)).status_code == 201
    assert post(other, body(other.attempt, env=environment("gpu-b"))).status_code == 201
    assert PackageSet.objects.count() == 1
    third = make_reporting(cast.digits, name="digits-c")
    assert post(third, body(third.attempt, packages=["numpy==2.2.0"])).status_code == 201
    assert PackageSet.objects.count() == 2


@pytest.mark.parametrize("case,field", [
    ("too many packages", "packages"),
    ("long package", "packages[1]"),
    ("package not a string", "packages[0]"),
    ("big environment", "environment"),
    ("environment not an object", "environment"),
    ("wrong digest", "packages_sha256"),
    ("rank not held", "node_rank"),
    ("no number", "number"),
])
def test_bad_reports_are_field_errors(reporting: Reporting, case: str, field: str) -> None:
    data = body(reporting.attempt)
    if case == "too many packages":
        data = body(reporting.attempt, packages=[f"p{i}==1" for i in range(5001)])
    elif case == "long package":
        data = body(reporting.attempt, packages=["a==1", "b" * 200 + "==1"])
    elif case == "package not a string":
        data["packages"] = [{"name": "torch"}]
    elif case == "big environment":
        data = body(reporting.attempt, env=environment(notes="x" * 100_001))
    elif case == "environment not an object":
        data["environment"] = ["no"]
    elif case == "wrong digest":
        data["packages_sha256"] = "0" * 64
    elif case == "rank not held":
        data["node_rank"] = 1
    elif case == "no number":
        del data["number"]
    resp = post(reporting, data)
    assert resp.status_code == 400, resp.content
    assert field in resp.json()["error"]["fields"], resp.json()
    assert not AttemptEnvironment.objects.exists()


def test_a_huge_body_is_refused_with_its_limit(reporting: Reporting) -> None:
    resp = Client().post("/api/v1/agent/lineage/", data="x" * (2 * 1024 * 1024 + 1), content_type="application/json",
                         HTTP_AUTHORIZATION=f"Node {reporting.secret}")
    assert resp.status_code == 413 and "limit" in resp.json()["error"]["message"]


def test_a_stale_attempt_is_fenced_and_another_nodes_attempt_is_not_found(cast: Any, reporting: Reporting) -> None:
    make_attempt(reporting.run, reporting.node, number=2)
    resp = post(reporting, body(reporting.attempt))
    assert resp.status_code == 409 and resp.json()["error"]["code"] == "stale_attempt"
    stranger, secret = make_node()
    assert post(reporting, body(Attempt.objects.get(run=reporting.run, number=2)), secret=secret).status_code == 404
    assert post(reporting, body(reporting.attempt), secret="tyn_unknown").status_code in (401, 403)
    assert not AttemptEnvironment.objects.exists()


def test_a_finished_run_still_takes_its_lineage(reporting: Reporting) -> None:
    """An agent that was cut off sends the record after the run ended: it is still the attempt's."""
    Run.objects.filter(pk=reporting.run.pk).update(status="succeeded")
    assert post(reporting, body(reporting.attempt)).status_code == 201


def _two_attempts_on_two_nodes(rep: Reporting) -> tuple[str, str]:
    """Attempt 1 on rep.node, attempt 2 on another node, each with its record."""
    assert post(rep, body(rep.attempt, env=environment("host-one"))).status_code == 201
    node_b, secret_b = make_node()
    second = make_attempt(rep.run, node_b, number=2)
    resp = post(rep, body(second, env=environment("host-two"), packages=["numpy==2.1.0"]), secret=secret_b)
    assert resp.status_code == 201, resp.content
    return rep.node.hostname, node_b.hostname


def test_two_attempts_on_different_nodes_keep_separate_records(cast: Any, reporting: Reporting) -> None:
    host_a, host_b = _two_attempts_on_two_nodes(reporting)
    rows = AttemptEnvironment.objects.order_by("attempt__number").values_list("attempt__number", "hostname")
    assert list(rows) == [(1, host_a), (2, host_b)]
    data = cast.client(cast.alice).get(f"/api/v1/runs/{reporting.run.pk}/environment/").json()
    assert [(e["attempt"], e["hostname"], e["packages_count"]) for e in data["environments"]] == [(1, host_a, 3), (2, host_b, 1)]
    first = data["environments"][0]
    assert first["fields"]["torch_cuda"] == "12.4" and first["fields"]["cudnn"] == "90100"
    assert first["devices"][0]["uuid"] == "GPU-1234" and first["packages"] == sorted(PACKAGES)
    client = Client()
    client.force_login(cast.alice)
    html = client.get(f"/runs/{reporting.run.pk}/").content.decode()
    section = html[html.index('id="environment"'):]
    section = section[:section.index("</section>")]
    assert host_a in section and host_b in section
    for text in ("NVIDIA H100 80GB HBM3", "GPU-1234", "550.54.15", "12.4 / 90100", "3.11.7 (CPython)", "2.5.1", "3 packages"):
        assert text in section, text
    assert "torch==2.5.1" in section, "the package list is on the page, folded"


def test_another_tenants_run_environment_is_a_404(cast: Any, reporting: Reporting) -> None:
    assert post(reporting, body(reporting.attempt)).status_code == 201
    url = f"/api/v1/runs/{reporting.run.pk}/environment/"
    assert cast.client(cast.alice).get(url).status_code == 200
    assert cast.client(cast.bob).get(url).status_code == 404
    assert cast.client(cast.outsider).get(url).status_code == 404


def test_the_job_reported_lineage_stays_apart(cast: Any, reporting: Reporting) -> None:
    Attempt.objects.filter(pk=reporting.attempt.pk).update(lineage={"dataset": "synthetic"})
    assert post(reporting, body(reporting.attempt)).status_code == 201
    data = cast.client(cast.alice).get(f"/api/v1/runs/{reporting.run.pk}/environment/").json()
    assert data["reported"] == {"dataset": "synthetic"} and "dataset" not in data["environments"][0]["environment"]


def _diff_rows(html: str) -> dict[tuple[str, str], list[str]]:
    table = html[html.index('id="environment-diff"'):]
    table = table[:table.index("</section>")]
    rows = {}
    for kind, name, cells in re.findall(r'<tr class="differs" data-kind="(\w+)" data-name="([^"]+)">(.*?)</tr>', table, re.S):
        rows[(kind, name)] = re.findall(r'<td class="mono">(.*?)</td>', cells)
    return rows


def test_compare_shows_what_differs_between_the_runs_environments(cast: Any) -> None:
    a = make_reporting(cast.digits, name="env-a")
    b = make_reporting(cast.digits, name="env-b")
    assert post(a, body(a.attempt)).status_code == 201
    assert post(b, body(b.attempt, packages=["Django==5.2.19", "numpy==2.2.0", "torch==2.5.1"])).status_code == 201
    client = Client()
    client.force_login(cast.alice)
    html = client.get(f"/compare/?runs={a.run.pk},{b.run.pk}").content.decode()
    rows = _diff_rows(html)
    assert rows[("environment", "host")] == [a.node.hostname, b.node.hostname]
    assert rows[("package", "numpy")] == ["2.1.0", "2.2.0"]
    assert ("package", "torch") not in rows and ("environment", "torch") not in rows, "what matches is not listed as a difference"
    assert "Same in all:" in html and "cuDNN" in html
    data = cast.client(cast.alice).get(f"/api/v1/compare/?runs={a.run.pk},{b.run.pk}").json()["environment"]
    assert data["packages"] == [{"name": "numpy", "values": ["2.1.0", "2.2.0"], "differs": True}]
    host = next(f for f in data["fields"] if f["name"] == "host")
    assert host["differs"] and host["values"] == [a.node.hostname, b.node.hostname]
    assert [x["attempt"] for x in data["attempts"]] == [1, 1]


def test_compare_says_same_when_environments_match_and_uses_the_latest_attempt(cast: Any) -> None:
    a = make_reporting(cast.digits, name="same-a")
    b = make_reporting(cast.digits, name="same-b")
    # Both ran on one node (the host is part of the environment) ...
    Assignment.objects.filter(attempt=b.attempt).update(node=a.node)
    assert post(a, body(a.attempt)).status_code == 201
    assert post(a, body(b.attempt)).status_code == 201
    client = Client()
    client.force_login(cast.alice)
    html = client.get(f"/compare/?runs={a.run.pk},{b.run.pk}").content.decode()
    assert 'id="environment-same"' in html and not _diff_rows(html)
    # ... until b's second attempt runs elsewhere with another torch: the comparison follows it.
    node, secret = make_node()
    second = make_attempt(b.run, node, number=2)
    assert post(a, body(second, packages=["Django==5.2.19", "numpy==2.1.0", "torch==2.6.0"]), secret=secret).status_code == 201
    rows = _diff_rows(client.get(f"/compare/?runs={a.run.pk},{b.run.pk}").content.decode())
    assert rows[("package", "torch")] == ["2.5.1", "2.6.0"] and rows[("environment", "host")] == [a.node.hostname, node.hostname]


def test_runs_without_records_say_so(cast: Any) -> None:
    a = make_reporting(cast.digits, name="none-a")
    b = make_reporting(cast.digits, name="none-b")
    client = Client()
    client.force_login(cast.alice)
    assert "None of these runs has an environment record." in client.get(f"/compare/?runs={a.run.pk},{b.run.pk}").content.decode()
    assert 'id="environment-none"' in client.get(f"/runs/{a.run.pk}/").content.decode()
