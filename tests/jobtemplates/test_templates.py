from __future__ import annotations

import io

import pytest
from django.core.management import call_command

from apps.audit.models import AuditEvent
from apps.core.errors import Conflict, FieldError
from apps.jobtemplates.models import JobTemplate
from apps.jobtemplates.services import template_new_version, template_publish, template_update
from apps.runs.models import Run
from tests.runs.factories import body, local_pool, make_template


@pytest.fixture
def digits(cast):
    local_pool()
    return make_template()


def test_published_template_is_immutable_and_edits_make_new_versions(cast, digits):
    with pytest.raises(ValueError, match="immutable"):
        digits.title = "changed"
        digits.save()
    with pytest.raises(Conflict):
        template_update(template=digits, title="changed")
    draft = template_new_version(template=JobTemplate.objects.get(pk=digits.pk), title="Digits v2")
    assert (draft.version, draft.published, draft.title) == (2, False, "Digits v2")
    draft = template_update(template=draft, description="edited while a draft")
    published = template_publish(template=draft)
    assert published.published and published.published_at is not None
    assert JobTemplate.objects.get(pk=digits.pk).title == "Digits Classifier"
    assert AuditEvent.objects.filter(action="template.publish", object_id=str(draft.pk)).exists()


def test_invalid_schema_refused(cast):
    with pytest.raises(FieldError, match="param_schema"):
        make_template("broken", schema={"type": "object", "properties": {"x": {"type": "no-such-type"}}})


def test_runs_keep_their_version(cast, digits):
    client = cast.client(cast.alice)
    first = client.post("/api/v1/runs/", body(cast), format="json")
    assert first.status_code == 201, first.json()
    v2 = template_new_version(template=digits, publish=True, title="Digits v2")
    second = client.post("/api/v1/runs/", body(cast), format="json").json()
    assert first.json()["template_version"] == 1 and second["template_version"] == 2
    assert Run.objects.get(pk=first.json()["id"]).template_id == digits.pk
    assert Run.objects.get(pk=second["id"]).template_id == v2.pk
    pinned = client.post("/api/v1/runs/", body(cast, template_version=1), format="json").json()
    assert pinned["template_version"] == 1


def test_engineers_see_only_published(cast, digits):
    template_new_version(template=digits, title="Draft v2")
    make_template("secret-draft", publish=False)
    client = cast.client(cast.alice)
    listed = client.get("/api/v1/templates/").json()["results"]
    assert [(t["slug"], t["version"]) for t in listed] == [("digits-classifier", 1)]
    assert client.get("/api/v1/templates/secret-draft/").status_code == 404
    assert client.get("/api/v1/templates/digits-classifier/?version=2").status_code == 404
    detail = client.get("/api/v1/templates/digits-classifier/").json()
    assert detail["version"] == 1 and detail["defaults"]["steps"] == 300
    assert detail["param_schema"]["properties"]["lr"]["maximum"] == 1.0 and detail["resources"]["pool"] == "local"
    assert client.get("/api/v1/templates/digits-classifier/?version=x").status_code == 400
    # Staff see drafts; submitting still uses the latest published version.
    staff = cast.client(cast.admin).get("/api/v1/templates/").json()["results"]
    assert {(t["slug"], t["version"]) for t in staff} == {("digits-classifier", 2), ("secret-draft", 1)}
    assert cast.client(None).get("/api/v1/templates/").status_code in (401, 403)


def test_draft_template_cannot_be_submitted(cast):
    local_pool()
    make_template("drafty", publish=False)
    response = cast.client(cast.alice).post("/api/v1/runs/", body(cast, template="drafty"), format="json")
    assert response.status_code == 400 and "template" in response.json()["error"]["fields"]


def test_seeding_is_idempotent_and_publishes_shipped_templates(cast):
    out = io.StringIO()
    call_command("seed_demo", stdout=out)
    first = set(JobTemplate.objects.values_list("slug", "version", "published"))
    call_command("seed_demo", stdout=io.StringIO())
    assert set(JobTemplate.objects.values_list("slug", "version", "published")) == first
    slugs = {slug for slug, _, published in first if published}
    assert {"sweep", "custom"} <= slugs
    assert "digits-classifier" in slugs  # the recipe ships with the repo
    digits = JobTemplate.objects.get(slug="digits-classifier")
    assert digits.entrypoint == "python -m recipes.digits_classifier" and digits.total_steps_param == "steps"
    if JobTemplate.objects.filter(slug="ddp-train").exists():
        ddp = JobTemplate.objects.get(slug="ddp-train")
        assert (ddp.resources["nodes"], ddp.resources["devices_per_node"], ddp.resources["pool"]) == (2, 1, "local")


def test_malformed_cross_parameter_rule_refused(cast):
    schema = {"type": "object", "properties": {"batch_size": {"type": "integer"}},
              "x-divisible": [{"param": "batch_size", "by": ["gpus"]}]}
    with pytest.raises(FieldError, match="param_schema.*'gpus' is neither a parameter"):
        make_template("bad-rule", schema=schema)


def test_a_recipe_whose_schema_changed_is_seeded_as_a_new_version(cast):
    # A database seeded before the recipe declared x-divisible: the next seeding publishes a new
    # version with the rule, and the old version (which runs point at) stays as it was.
    from apps.jobtemplates.recipes import recipe_param_schema, seed_templates

    current = recipe_param_schema(module="digits_classifier")
    assert current is not None and current["x-divisible"] == [{"param": "batch_size", "by": ["world_size", "grad_accum"]}]
    before = {key: value for key, value in current.items() if key != "x-divisible"}
    old = make_template(schema=before, source_hash="0" * 64)
    seed_templates(users={}, teams={}, stdout=io.StringIO())
    latest = JobTemplate.objects.filter(slug="digits-classifier", published=True).order_by("-version").first()
    assert latest is not None and latest.version == old.version + 1 and latest.param_schema == current
    assert "x-divisible" not in JobTemplate.objects.get(pk=old.pk).param_schema
    seed_templates(users={}, teams={}, stdout=io.StringIO())
    assert JobTemplate.objects.filter(slug="digits-classifier").count() == 2


@pytest.mark.parametrize(("policy", "message"), [
    ({"keep_last": -1}, "keep_last must be a whole number from 0 to 1000, got -1"),
    ({"every_steps": "100"}, "every_steps must be a whole number"),
    ({"keep_best": "val_loss"}, "keep_best must be 'metric:min' or 'metric:max'"),
    ({"keep_lats": 3}, "unknown key 'keep_lats'"),
    ([], "must be an object"),
])
def test_checkpoint_policy_refused_naming_the_key_and_limit(cast, policy, message):
    with pytest.raises(FieldError, match="checkpoint_policy") as caught:
        make_template("policy", checkpoint_policy=policy)
    assert message in str(caught.value)
    draft = make_template("policy-ok", publish=False)
    with pytest.raises(FieldError, match="checkpoint_policy"):
        template_update(template=draft, checkpoint_policy=policy)
    assert JobTemplate.objects.get(pk=draft.pk).checkpoint_policy != policy


def test_shipped_recipes_keep_the_best_checkpoint(cast):
    call_command("seed_demo", stdout=io.StringIO())
    digits = JobTemplate.objects.get(slug="digits-classifier")
    assert digits.checkpoint_policy["keep_best"] == "val_loss:min" and digits.checkpoint_policy["keep_last"] == 3
