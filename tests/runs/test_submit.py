from __future__ import annotations

import pytest

from apps.audit.models import AuditEvent
from apps.core.errors import ServiceError
from apps.jobtemplates.models import TemplateKind
from apps.nodes.models import Device, DeviceKind, Node
from apps.runs.models import Attempt, Checkpoint, Run, RunStatus
from apps.runs.services import submit
from tests.runs.factories import DIGITS_SCHEMA, GOOD_TAGS, body, local_pool, make_template


@pytest.fixture
def digits(cast):
    local_pool()
    return make_template()


def post(cast, user, data):
    return cast.client(user).post("/api/v1/runs/", data, format="json")


BAD = [
    ("wrong type", {"params": {"steps": "many"}}, "params.steps", "must be of type integer"),
    ("above maximum", {"params": {"lr": 5}}, "params.lr", "must be ≤ 1.0 (got 5)"),
    ("exclusive minimum", {"params": {"lr": 0}}, "params.lr", "must be > 0"),
    ("below minimum", {"params": {"steps": 0}}, "params.steps", "must be ≥ 1 (got 0)"),
    ("enum", {"params": {"arch": "rnn"}}, "params.arch", "must be one of"),
    ("array item", {"params": {"classes": [1, 12]}}, "params.classes.1", "must be ≤ 9"),
    ("unknown key", {"params": {"learning_rate": 0.1}}, "params.learning_rate", "unknown parameter"),
    ("params not an object", {"params": [1, 2]}, "params", "must be an object"),
    ("missing tag", {"tags": {k: v for k, v in GOOD_TAGS.items() if k != "dataset"}}, "tags.dataset", "required"),
    ("bad candidate", {"tags": {**GOOD_TAGS, "candidate": "maybe"}}, "tags.candidate", "must be one of baseline"),
    ("long tag value", {"tags": {**GOOD_TAGS, "note": "x" * 201}}, "tags.note", "at most 200 characters"),
    ("bad tag key", {"tags": {**GOOD_TAGS, "Bad Key!": "x"}}, "tags.Bad Key!", "key must be"),
    ("bad priority", {"priority": "asap"}, "priority", "must be one of urgent, normal, low"),
    ("too many devices", {"resources": {"devices_per_node": 64}}, "resources.devices_per_node", "must be ≤ 4 (got 64)"),
    ("too many nodes", {"resources": {"nodes": 3}}, "resources.nodes", "must be ≤ 2 (got 3)"),
    ("unknown pool", {"resources": {"pool": "moon"}}, "resources.pool", "no such pool 'moon'"),
    ("unknown resource", {"resources": {"gpus": 2}}, "resources.gpus", "unknown resource"),
    ("runtime", {"resources": {"max_runtime_s": 10**9}}, "resources.max_runtime_s", "must be ≤"),
    ("unknown template", {"template": "nope"}, "template", "no such template 'nope'"),
    ("name too long", {"name": "n" * 300}, "name", "200"),
]


@pytest.mark.parametrize(("label", "changes", "field", "text"), BAD, ids=[b[0] for b in BAD])
def test_bad_submission_is_400_naming_the_field_and_queues_nothing(cast, digits, label, changes, field, text):
    before = Run.objects.count()
    response = post(cast, cast.alice, body(cast, **changes))
    assert response.status_code == 400, response.json()
    error = response.json()["error"]
    assert field in error["fields"], error
    assert text in " ".join(error["fields"][field]), error
    assert Run.objects.count() == before


def test_all_errors_reported_at_once(cast, digits):
    response = post(cast, cast.alice, body(cast, params={"lr": 9, "steps": -1}, priority="x", tags={}))
    fields = response.json()["error"]["fields"]
    assert {"params.lr", "params.steps", "priority", "tags.task", "tags.family"} <= set(fields)


def test_other_teams_project_reads_as_absent(cast, digits):
    for project in (cast.tinylm.pk, "nlp/tiny-lm", 999999, "nonsense"):
        response = post(cast, cast.alice, body(cast, project=project))
        assert response.status_code == 400
        [problem] = response.json()["error"]["fields"]["project"]
        assert problem.startswith(f"no such project {str(project)!r} in your teams")
    assert Run.objects.count() == 0


def test_viewer_is_forbidden_and_anonymous_unauthorized(cast, digits):
    assert post(cast, cast.victor, body(cast)).status_code == 403
    assert post(cast, None, body(cast)).status_code in (401, 403)
    assert Run.objects.count() == 0


def test_submit_fills_defaults_and_run_fields(cast, digits):
    response = post(cast, cast.alice, body(cast, name="first", tags={**GOOD_TAGS, "owner": "mallory", "team-note": "hi"}))
    assert response.status_code == 201, response.json()
    data = response.json()
    run = Run.objects.get(pk=data["id"])
    assert run.status == RunStatus.QUEUED and run.queued_at is not None
    assert run.params == {"steps": 20, "lr": 0.003, "hidden": 128, "arch": "mlp", "amp": False, "classes": [0, 1, 2]}
    assert run.tags["owner"] == "alice" and run.tags["team-note"] == "hi" and run.family == "digits-mlp"
    assert (run.total_steps, run.entrypoint, run.pool.name, run.nodes, run.devices_per_node) == (
        20, "python -m recipes.digits_classifier", "local", 1, 1)
    assert run.checkpoint_policy == {"every_steps": 50, "keep_last": 2} and run.max_runtime_s == 1800
    assert run.submitted_by == cast.alice
    assert AuditEvent.objects.filter(action="run.submit", object_id=str(run.pk), actor=cast.alice).exists()
    assert data["params"]["lr"] == 0.003 and data["status"] == "queued" and data["lineage"]["template"]["version"] == 1
    # Project by slug works too.
    assert post(cast, cast.alice, body(cast, project="vision/digits")).status_code == 201


def test_devices_limited_by_largest_node_in_pool(cast, digits):
    pool = local_pool()
    node = Node.objects.create(pool=pool, hostname="n1", agent_uid="u1")
    for index in range(2):
        Device.objects.create(node=node, index=index, kind=DeviceKind.CPU)
    response = post(cast, cast.alice, body(cast, resources={"devices_per_node": 3}))
    assert response.status_code == 400
    assert "the most devices of any node in pool local" in response.json()["error"]["fields"]["resources.devices_per_node"][0]
    assert post(cast, cast.alice, body(cast, resources={"devices_per_node": 2})).status_code == 201


def test_admission_checks_refuse_inside_the_transaction(cast, digits, monkeypatch):
    seen = []

    def refuse_big(*, run, project, user):
        seen.append((run.pk, project.pk, user.username))
        if run.params["steps"] > 100:
            raise ServiceError("quota: 2 of 2 devices in use by vision", code="quota_exceeded")

    monkeypatch.setattr(submit, "ADMISSION_CHECKS", [refuse_big])
    assert post(cast, cast.alice, body(cast)).status_code == 201
    response = post(cast, cast.alice, body(cast, params={"steps": 500}))
    assert response.status_code == 400 and response.json()["error"]["code"] == "quota_exceeded"
    assert Run.objects.count() == 1 and seen[0] == (None, cast.digits.pk, "alice")


def _finished_run_with_checkpoint(cast, template):
    run = Run.objects.create(project=cast.digits, template=template, pool=local_pool(), entrypoint="x", status=RunStatus.SUCCEEDED)
    attempt = Attempt.objects.create(run=run, number=1)
    for step in (10, 20):
        Checkpoint.objects.create(run=run, attempt=attempt, step=step, file_name=f"ckpt-{step:010d}.pt", size=1, sha256=f"{step:064d}")
    return run


def test_finetune_resolves_init_run_to_latest_checkpoint(cast, digits):
    make_template("finetune", TemplateKind.FINETUNE, DIGITS_SCHEMA)
    source = _finished_run_with_checkpoint(cast, digits)
    client = cast.client(cast.alice)
    missing = client.post("/api/v1/runs/", body(cast, template="finetune"), format="json")
    assert missing.status_code == 400 and "init_run" in missing.json()["error"]["fields"]
    response = client.post("/api/v1/runs/", body(cast, template="finetune", init_run=str(source.pk)), format="json")
    assert response.status_code == 201, response.json()
    run = Run.objects.get(pk=response.json()["id"])
    assert run.init_checkpoint is not None and run.init_checkpoint.step == 20
    lineage = response.json()["lineage"]["init_checkpoint"]
    assert (lineage["run"], lineage["step"], lineage["sha256"]) == (source.pk, 20, f"{20:064d}")
    # In params works too, when the schema does not own the key; a specific checkpoint as well.
    first = source.checkpoints.get(step=10)
    response = client.post("/api/v1/runs/", body(cast, template="finetune", params={"init_run": source.pk},
                                                 init_checkpoint=str(first.pk)), format="json")
    assert Run.objects.get(pk=response.json()["id"]).init_checkpoint == first
    empty = Run.objects.create(project=cast.digits, template=digits, pool=local_pool(), entrypoint="x")
    response = client.post("/api/v1/runs/", body(cast, template="finetune", init_run=str(empty.pk)), format="json")
    assert response.json()["error"]["fields"]["init_run"] == [f"run {empty.pk} has no checkpoint to start from"]


def test_init_run_of_another_team_is_absent(cast, digits):
    make_template("evaluate", TemplateKind.EVALUATE, DIGITS_SCHEMA)
    theirs = Run.objects.create(project=cast.tinylm, template=digits, pool=local_pool(), entrypoint="x")
    response = post(cast, cast.alice, body(cast, template="evaluate", init_run=str(theirs.pk)))
    assert response.json()["error"]["fields"]["init_run"] == [f"no such run {theirs.pk}"]
