"""What the UX audit of run submission found: a value the recipe would refuse on its first line
is refused at submission (API, form, sweep, forecast); a sweep's cost counts its trials; the
form offers the project's secrets by name; the secrets page states its naming rule."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from cryptography.fernet import Fernet
from django.test import Client, override_settings

from apps.jobtemplates.models import JobTemplate
from apps.jobtemplates.recipes import recipe_param_schema
from apps.runs.models import Run
from apps.vault.services import secret_set
from tests.runs.factories import GOOD_TAGS, body, field_block, form_data, local_pool, make_sweep_template, make_template

SECRET_VALUE = "value-that-must-never-show-7Qz"


@pytest.fixture
def digits(cast: Any) -> JobTemplate:
    """digits-classifier with the shipped recipe's own schema (x-divisible included)."""
    local_pool("2.0")
    schema = recipe_param_schema(module="digits_classifier")
    assert schema is not None
    return make_template(schema=schema)


@pytest.fixture
def vault_keys() -> Iterator[None]:
    with override_settings(TRAINYARD_SECRET_KEYS=[Fernet.generate_key().decode()]):
        yield


def page_client(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


# --- 1. batch_size must split over world size × grad_accum ----------------------------------------


def test_api_refuses_grad_accum_that_does_not_divide_batch_size(cast: Any, digits: JobTemplate) -> None:
    response = cast.client(cast.alice).post("/api/v1/runs/", body(cast, params={"grad_accum": 3}), format="json")
    assert response.status_code == 400, response.json()
    fields = response.json()["error"]["fields"]
    expected = "batch_size (64) must be divisible by world size × grad_accum (1 × 3 = 3; world size = nodes × devices_per_node)"
    assert fields["params.grad_accum"] == [expected] and fields["params.batch_size"] == [expected]
    assert Run.objects.count() == 0
    ok = cast.client(cast.alice).post("/api/v1/runs/", body(cast, params={"grad_accum": 4}), format="json")
    assert ok.status_code == 201, ok.json()


def test_the_world_size_is_the_one_the_submission_asks_for(cast: Any, digits: JobTemplate) -> None:
    client = cast.client(cast.alice)
    params = {"batch_size": 63, "grad_accum": 3}
    assert client.post("/api/v1/runs/", body(cast, params=params), format="json").status_code == 201
    two = client.post("/api/v1/runs/", body(cast, params=params, resources={"nodes": 2}), format="json")
    assert two.status_code == 400
    assert "(2 × 3 = 6; world size = nodes × devices_per_node)" in two.json()["error"]["fields"]["params.grad_accum"][0]
    # A bad size is named as such, and the rule is still checked for what any world size needs.
    bad_size = client.post("/api/v1/runs/", body(cast, params={"grad_accum": 3}, resources={"nodes": 9}), format="json")
    fields = bad_size.json()["error"]["fields"]
    assert "resources.nodes" in fields and fields["params.grad_accum"] == ["batch_size (64) must be divisible by grad_accum (3)"]
    assert Run.objects.count() == 1


def test_a_value_out_of_bounds_is_named_once_not_twice(cast: Any, digits: JobTemplate) -> None:
    response = cast.client(cast.alice).post("/api/v1/runs/", body(cast, params={"grad_accum": 100}), format="json")
    assert response.json()["error"]["fields"]["params.grad_accum"] == ["must be ≤ 64 (got 100)"]
    assert "params.batch_size" not in response.json()["error"]["fields"]


def test_form_refuses_it_inline_and_keeps_what_was_typed(cast: Any, digits: JobTemplate) -> None:
    response = page_client(cast.alice).post("/runs/new/", form_data(cast, p_grad_accum="3", name="keep me"))
    assert response.status_code == 400
    html = response.content.decode()
    assert "Nothing was queued." in html
    assert "batch_size (64) must be divisible by world size × grad_accum (1 × 3 = 3" in field_block(html, "p_grad_accum")
    assert 'value="3"' in field_block(html, "p_grad_accum") and 'value="keep me"' in html
    assert Run.objects.count() == 0


def test_form_with_another_bad_field_still_names_the_rule(cast: Any, digits: JobTemplate) -> None:
    response = page_client(cast.alice).post("/runs/new/", form_data(cast, p_grad_accum="3", p_steps="lots"))
    html = response.content.decode()
    assert "must be of type integer" in field_block(html, "p_steps")
    assert "must be divisible by world size × grad_accum (1 × 3 = 3" in field_block(html, "p_grad_accum")


def test_sweep_trial_that_breaks_the_rule_is_named_in_the_space(cast: Any, digits: JobTemplate) -> None:
    make_sweep_template()
    sweep = {"template": "digits-classifier", "space": {"grad_accum": [1, 3]}, "params": {"steps": 10}}
    response = cast.client(cast.alice).post("/api/v1/runs/", body(cast, template="sweep", params=sweep), format="json")
    assert response.status_code == 400
    assert "must be divisible by world size × grad_accum (1 × 3 = 3" in response.json()["error"]["fields"]["params.space.grad_accum"][0]
    assert Run.objects.count() == 0


def test_cli_submit_and_dry_run_name_the_rule(cast: Any, digits: JobTemplate, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    # The CLI's HTTP goes through Django's test client (as in tests/cli/test_cli_output.py).
    from trainyard import cli

    from tests.cli.test_cli_output import DjangoTransport

    client = DjangoTransport(cast.alice)
    monkeypatch.setattr(cli, "_client", lambda args: client)
    tags = [f"--tag={k}={v}" for k, v in GOOD_TAGS.items()]
    for extra, sentence in (([], "(1 × 3 = 3; world size = nodes × devices_per_node)"),
                            (["--dry-run"], "(1 × 3 = 3; world size = nodes × devices_per_node)")):
        capsys.readouterr()
        code = cli.main(["submit", "digits-classifier", "--project", "vision/digits", "--param", "grad_accum=3", *tags, *extra])
        err = capsys.readouterr().err
        assert code == 6 and "params.grad_accum" in err and sentence in err, err
    assert Run.objects.count() == 0


def test_forecast_refuses_what_the_submission_refuses(cast: Any, digits: JobTemplate) -> None:
    # The forecast resolves resources first, so the rule is checked at the world size asked for.
    forecast = cast.client(cast.alice).post("/api/v1/queue/forecast/", body(cast, params={"grad_accum": 3}), format="json")
    submitted = cast.client(cast.alice).post("/api/v1/runs/", body(cast, params={"grad_accum": 3}), format="json")
    assert forecast.status_code == submitted.status_code == 400
    assert forecast.json()["error"]["fields"]["params.grad_accum"] == submitted.json()["error"]["fields"]["params.grad_accum"]
    assert "(1 × 3 = 3; world size = nodes × devices_per_node)" in forecast.json()["error"]["fields"]["params.grad_accum"][0]


# --- 2. a sweep costs its trials × one trial ------------------------------------------------------


def trials(cast: Any, params: dict[str, Any], template: str = "sweep") -> Any:
    return cast.client(cast.alice).post("/api/v1/runs/trials/", {"template": template, "params": params}, format="json")


def test_trials_endpoint_counts_as_the_submission_does(cast: Any, digits: JobTemplate) -> None:
    make_sweep_template()
    assert trials(cast, {}).json() == {"trials": 4, "sweep": True}  # the default space: 2 × 2
    assert trials(cast, {"space": {"lr": [0.1, 0.2, 0.3], "hidden": [32, 64]}, "max_runs": 6}).json()["trials"] == 6
    assert trials(cast, {"strategy": "random", "space": {"lr": {"min": 0.001, "max": 0.1}}, "max_runs": 7}).json()["trials"] == 7
    too_big = trials(cast, {"space": {"lr": [0.1, 0.2, 0.3], "hidden": [32, 64]}})
    assert too_big.status_code == 400
    assert too_big.json()["error"]["fields"]["params.max_runs"] == ["the grid has 6 points, more than max_runs 4"]
    assert trials(cast, {"space": {}}).json()["error"]["fields"]["params.space"]
    # A range past a float's overflowed while sampling: a 500 here and on submission alike.
    huge = {"strategy": "random", "space": {"hidden": {"min": 8, "max": 10**400}}}
    [problem] = trials(cast, huge).json()["error"]["fields"]["params.space.hidden"]
    assert problem.startswith("a range must lie within ±1e+307 (got 8 to 100000000000…(401 digits))")
    submitted_huge = cast.client(cast.alice).post("/api/v1/runs/", body(cast, template="sweep", params=huge), format="json")
    assert submitted_huge.status_code == 400 and "params.space.hidden" in submitted_huge.json()["error"]["fields"]
    assert trials(cast, {}, template="digits-classifier").json() == {"trials": 1, "sweep": False}
    assert trials(cast, {}, template="nope").status_code == 400
    assert cast.client(None).post("/api/v1/runs/trials/", {"template": "sweep"}, format="json").status_code in (401, 403)
    submitted = cast.client(cast.alice).post("/api/v1/runs/", body(cast, template="sweep", params={"params": {"steps": 5}}),
                                             format="json")
    assert len(submitted.json()["children"]) == 4


def test_sweep_page_shows_trials_times_one_trial_and_how_trials_start(cast: Any, digits: JobTemplate) -> None:
    make_sweep_template()
    html = page_client(cast.alice).get("/runs/new/?template=sweep").content.decode()
    # 2.00 $/device-hour × 1 device × 1800 s = $1.00 a trial; the default space has 4 points.
    assert '<strong id="expected-cost">$4.00</strong>' in html
    assert '<span id="cost-breakdown">(4 trials × $1.00)</span>' in html
    assert 'data-trials-url="/api/v1/runs/trials/" data-trials="4"' in html and "data-forecast" not in html
    start = re.search(r'<p id="expected-start"[^>]*>(.*?)</p>', html, re.S)
    assert start and "queue one by one" in start.group(1) and "each shows its own estimated start" in start.group(1)
    assert 'href="/queue/"' in start.group(1)


def test_sweep_page_after_an_error_counts_the_posted_space(cast: Any, digits: JobTemplate) -> None:
    make_sweep_template()
    data = form_data(cast, template="sweep", p_space='{"lr": [0.1, 0.2, 0.3]}', p_max_runs="3", tag_dataset="")
    html = page_client(cast.alice).post("/runs/new/", data).content.decode()
    assert '<span id="cost-breakdown">(3 trials × $1.00)</span>' in html and '<strong id="expected-cost">$3.00</strong>' in html
    broken = page_client(cast.alice).post("/runs/new/", {**data, "p_space": "{"}).content.decode()
    assert '<strong id="expected-cost">?</strong>' in broken and "(? trials × $1.00)" in broken


def test_a_single_run_keeps_its_own_cost_and_forecast(cast: Any, digits: JobTemplate) -> None:
    html = page_client(cast.alice).get("/runs/new/").content.decode()
    assert '<strong id="expected-cost">$1.00</strong> (the pool\'s price × devices × this run\'s max runtime)' in html
    assert 'data-forecast="/api/v1/queue/forecast/"' in html and "cost-breakdown" not in html


# --- 3. secrets: asked for from the form, and a name rule that says itself ------------------------


def test_form_offers_the_projects_secret_names_and_submits_them(cast: Any, digits: JobTemplate, vault_keys: None) -> None:
    secret_set(project=cast.digits, name="HF_TOKEN", value=SECRET_VALUE, user=cast.alice)
    secret_set(project=cast.digits, name="WANDB_KEY", value=SECRET_VALUE, user=cast.alice)
    secret_set(project=cast.tinylm, name="NLP_ONLY", value=SECRET_VALUE, user=cast.bob)
    client = page_client(cast.alice)
    html = client.get("/runs/new/").content.decode()
    assert '<input type="checkbox" name="secrets" value="HF_TOKEN">' in html
    assert '<input type="checkbox" name="secrets" value="WANDB_KEY">' in html
    assert "NLP_ONLY" not in html and SECRET_VALUE not in html
    assert f'href="/projects/{cast.digits.pk}/secrets/"' in html
    response = client.post("/runs/new/", form_data(cast, secrets="HF_TOKEN"))
    assert response.status_code == 302, response.content.decode()[:2000]
    assert Run.objects.get().secrets == ["HF_TOKEN"]


def test_form_names_a_secret_the_project_lacks_and_keeps_the_ticks(cast: Any, digits: JobTemplate, vault_keys: None) -> None:
    secret_set(project=cast.digits, name="HF_TOKEN", value=SECRET_VALUE, user=cast.alice)
    response = page_client(cast.alice).post("/runs/new/", {**form_data(cast), "secrets": ["HF_TOKEN", "GONE_NOW"]})
    assert response.status_code == 400
    html = response.content.decode()
    field = re.search(r'<fieldset class="secrets[^"]*" id="secrets-field".*?</fieldset>', html, re.S)
    assert field and "field-error" in field.group(0) and "has no secret named GONE_NOW" in field.group(0)
    assert 'value="HF_TOKEN" checked' in field.group(0)
    assert Run.objects.count() == 0


def test_form_without_secrets_says_so(cast: Any, digits: JobTemplate) -> None:
    html = page_client(cast.alice).get("/runs/new/").content.decode()
    assert "This project has no secrets yet." in html and 'name="secrets"' not in html


def test_secrets_page_states_the_name_rule_by_the_field(cast: Any) -> None:
    html = page_client(cast.alice).get(f"/projects/{cast.digits.pk}/secrets/").content.decode()
    rule = "Upper-case letters (A-Z), digits and _, starting with a letter; at most 64 characters, e.g. HF_TOKEN."
    name_input = re.search(r'<input id="s-name"[^>]*>', html, re.S)
    assert name_input and f'title="{rule}"' in name_input.group(0) and 'aria-describedby="s-name-rule"' in name_input.group(0)
    assert 'pattern="[A-Z][A-Z0-9_]{0,63}"' in name_input.group(0) and 'maxlength="64"' in name_input.group(0)
    assert re.search(rf'id="s-name-rule">Name: {re.escape(rule)}', html)
    assert f'href="/runs/new/?project={cast.digits.pk}"' in html
