"""The CLI's human output and exit codes, fed the REAL API's answers: the client's HTTP exchange
goes through Django's test client as one of the cast, so every status, header and body the CLI
reads is what the server answers today, and the CLI cannot drift from the API unnoticed."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.db import transaction
from django.utils import timezone
from rest_framework.test import APIClient
from trainyard import _cli_reports, _config, cli
from trainyard.client import Client

from apps.accounts.services import api_token_create
from apps.billing.models import Budget, BudgetAlert, UsageEntry
from apps.billing.selectors import period_for
from apps.runs.models import Attempt, Checkpoint, Run
from apps.tracking.services import metric_points_store
from tests.runs.factories import GOOD_TAGS, local_pool, make_sweep_template, make_template
from tests.tracking.conftest import make_attempt, make_reporting, make_run

# A fixed UTC time, and what it reads as at UTC+05:30 (the TZ the tests below use).
AT_UTC = datetime(2026, 11, 24, 23, 9, 28, tzinfo=UTC)
AT_LOCAL = "2026-11-25 04:39:28"
TAGS = [f"--tag={k}={v}" for k, v in GOOD_TAGS.items()]


class DjangoTransport(Client):
    """The SDK's client with only its HTTP exchange swapped for Django's test client."""

    def __init__(self, user: Any, base: str = "http://testserver") -> None:
        super().__init__(base, token="ty_unused-the-test-client-authenticates")
        self.api = APIClient()
        self.api.force_authenticate(user)

    def _send(self, method: str, url: str, headers: dict[str, str], data: bytes | None) -> tuple[int, bytes]:
        path = url.removeprefix("http://testserver")
        # Django sends bytes as they are (its stubs say str): multipart uploads must not be re-encoded.
        response = self.api.generic(method, path, data or b"",  # type: ignore[arg-type]
                                    content_type=headers.get("Content-Type", "application/octet-stream"), HTTP_ACCEPT=headers["Accept"])
        return response.status_code, response.content


class TokenTransport(Client):
    """The SDK's client over Django's test client, authenticated only by the token it sends, as a
    stored login is: for the commands that build their own client from the config file."""

    def _send(self, method: str, url: str, headers: dict[str, str], data: bytes | None) -> tuple[int, bytes]:
        auth = {"HTTP_AUTHORIZATION": headers["Authorization"]} if "Authorization" in headers else {}
        response = APIClient().generic(method, url.removeprefix("http://testserver"), data or b"",  # type: ignore[arg-type]
                                       content_type=headers.get("Content-Type", "application/octet-stream"),
                                       HTTP_ACCEPT=headers["Accept"], **auth)
        return response.status_code, response.content


Run_ = Callable[..., tuple[int, str, str]]


@pytest.fixture
def as_user(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Callable[..., Run_]:
    """as_user(cast.alice)("show", "4") -> (exit code, stdout, stderr) of `trainyard show 4`."""

    def login(user: Any, base: str = "http://testserver") -> Run_:
        client = DjangoTransport(user, base)
        for module in (cli, _cli_reports):
            monkeypatch.setattr(module, "_client", lambda args: client)

        def run(*argv: str) -> tuple[int, str, str]:
            capsys.readouterr()
            code = cli.main(list(argv))
            out, err = capsys.readouterr()
            return code, out, err

        return run

    return login


@pytest.fixture
def india(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Local time is UTC+05:30 (a POSIX TZ: no tz database needed), so local and UTC differ."""
    monkeypatch.setenv("TZ", "IST-05:30")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.fixture
def templates(cast: Any) -> None:
    local_pool()
    make_template()
    make_sweep_template()


def submit(cast: Any, **changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"project": "vision/digits", "template": "digits-classifier", "params": {"steps": 20},
                            "tags": dict(GOOD_TAGS)} | changes
    response = cast.client(cast.alice).post("/api/v1/runs/", body, format="json")
    assert response.status_code == 201, response.json()
    return dict(response.json())


def with_metrics(project: Any, name: str, params: dict[str, Any]) -> Run:
    rep = make_reporting(project, name=name, params=params)
    with transaction.atomic():
        metric_points_store(run_id=rep.run.pk, attempt=1, rows=[(k, s, float(s) * m, 0, 1_700_000_000.0 + s)
                                                                for k, m in (("loss", -1), ("acc", 1)) for s in range(30)])
    return rep.run


# --- errors ---------------------------------------------------------------------------------------


def test_a_wrong_server_url_is_a_server_error_without_the_page(cast: Any, as_user: Any) -> None:
    trainyard = as_user(cast.alice, base="http://testserver/runs")
    code, out, err = trainyard("show", "1")
    assert code == 5, err
    assert "HTTP 404 from http://testserver/runs/api/v1/runs/1/: not the Trainyard API" in err
    assert "is --server the portal's root URL" in err and "<" not in err and "trainyard runs" not in err


def test_no_such_references_are_not_found_and_other_refusals_stay_refusals(cast: Any, templates: None, as_user: Any) -> None:
    trainyard = as_user(cast.alice)
    code, _, err = trainyard("submit", "digits-classifier", "--project", "nope/none", *TAGS)
    assert code == 4 and "no such project 'nope/none'" in err, err
    code, _, err = trainyard("submit", "nosuch", "--project", "vision/digits", *TAGS)
    assert code == 4 and "no such template 'nosuch'" in err, err
    code, _, err = trainyard("submit", "digits-classifier", "--project", "vision/digits", "--init-run", "99999", *TAGS)
    assert code == 4 and "no such run 99999" in err, err
    code, _, err = trainyard("runs", "--project", "nope/none")
    assert code == 4 and "no such project" in err, err
    # A missing run together with a bad value is a refusal: not everything wrong is "no such".
    code, _, err = trainyard("submit", "digits-classifier", "--project", "vision/digits", "--init-run", "99999",
                             "--param", "steps=0", *TAGS)
    assert code == 6 and "no such run 99999" in err and "steps" in err, err


def test_a_dry_run_is_refused_where_the_submission_would_be(cast: Any, templates: None, as_user: Any,
                                                           tmp_path: Any) -> None:
    trainyard = as_user(cast.alice)
    code, out, err = trainyard("submit", "digits-classifier", "--project", "vision/digits", *TAGS, "--dry-run")
    assert code == 0 and out.startswith("Would "), err
    code, _, err = trainyard("submit", "digits-classifier", "--project", "vision/digits", "--dry-run")
    assert code == 6 and "tags.task" in err, err
    code, _, err = trainyard("submit", "digits-classifier", "--project", "vision/digits", *TAGS, "--init-run", "abc", "--dry-run")
    assert code == 6 and "init_run: must be a run id" in err, err
    code, _, err = trainyard("submit", "--project", "vision/digits", *TAGS, "--code", str(tmp_path / "nowhere"), "--dry-run")
    assert code == 2 and "not a directory" in err, err
    assert not Run.objects.exists()


def test_not_found_names_what_was_asked_for(cast: Any, templates: None, as_user: Any) -> None:
    bobs = make_reporting(cast.tinylm, name="bob's").run
    trainyard = as_user(cast.alice)
    for argv in (["show", "99999"], ["show", str(bobs.pk)], ["checkpoints", "99999"], ["metrics", "99999", "loss"]):
        code, _, err = trainyard(*argv)
        assert code == 4, (argv, err)
        assert f"run {argv[1]} not found (or it belongs to another team)" in err and "`trainyard runs` lists" in err
        assert "Not found." not in err
    mine = submit(cast)["id"]
    code, _, err = trainyard("compare", str(mine), "99999")
    assert code == 4 and f"one of runs {mine}, 99999 not found" in err, err
    code, _, err = trainyard("budget", "vision/nope")
    assert code == 4 and "project vision/nope not found" in err and "team/project" in err, err


def test_timeout_wait_has_its_own_exit_code(cast: Any, templates: None, as_user: Any) -> None:
    # No node in the pool: the run stays queued and the wait runs out.
    code, _, err = as_user(cast.alice)("submit", "digits-classifier", "--project", "vision/digits", "--param", "steps=20", *TAGS,
                                       "--wait", "--poll", "0.01", "--timeout-wait", "0.01")
    assert code == 7, err
    assert "still queued after 0.01s; it goes on (not cancelled)" in err
    epilog = cli.build_parser().format_help()
    assert "7    --timeout-wait ran out; the run goes on" in epilog and "130  interrupted (Ctrl-C)" in epilog
    assert "local time" in epilog


# --- runs, show ---------------------------------------------------------------------------------


def test_runs_show_local_times_order_descending_and_say_when_empty(cast: Any, templates: None, as_user: Any, india: None) -> None:
    trainyard = as_user(cast.alice)
    code, out, err = trainyard("runs")
    assert code == 0 and out == "" and "no runs yet" in err
    code, out, err = trainyard("runs", "--family", "nope")
    assert code == 0 and out == "" and "no runs match these filters" in err
    first, second = submit(cast)["id"], submit(cast)["id"]
    Run.objects.filter(pk=first).update(created_at=AT_UTC)
    code, out, _ = trainyard("runs", "--ordering", "-id")
    assert code == 0
    lines = out.splitlines()
    assert lines[1].startswith(str(second)) and lines[2].startswith(str(first))
    assert AT_LOCAL in lines[2] and "2026-11-24T23:09:28" not in out
    code, out, _ = trainyard("runs", "--ordering", "id", "--limit", "1")
    assert code == 0 and out.splitlines()[1].startswith(str(first))
    with pytest.raises(SystemExit) as exited:
        trainyard("runs", "--limit", "-1")
    assert exited.value.code == 2


def test_show_a_sweep_and_a_child(cast: Any, templates: None, as_user: Any, india: None) -> None:
    sweep = submit(cast, template="sweep", params={"template": "digits-classifier", "strategy": "grid",
                                                   "space": {"lr": [0.001, 0.01]}, "params": {"steps": 10}, "max_runs": 2})
    child = sweep["children"][0]
    Run.objects.filter(pk=child).update(created_at=AT_UTC, cancel_requested_at=AT_UTC + timedelta(minutes=5))
    trainyard = as_user(cast.alice)
    code, out, _ = trainyard("show", str(sweep["id"]))
    assert code == 0
    shown = dict(line.split(None, 1) if not line.startswith(("submitted by", "estimated start", "queue position"))
                 else (line[:16].strip(), line[16:].strip()) for line in out.splitlines())
    assert shown["progress"].strip() == "0/2 runs"
    assert shown["children"].strip() == f"{child}, {sweep['children'][1]} (2 runs)"
    assert shown["family"].strip() == "digits-mlp"
    assert shown["tags"].strip() == "candidate=baseline, dataset=digits, family=digits-mlp, owner=alice, task=classification"
    assert '"lr"' in shown["params"] and "strategy=grid" in shown["params"] and "{" not in shown["tags"]
    code, out, _ = trainyard("show", str(child))
    assert code == 0
    assert f"parent            run {sweep['id']} (a sweep)" in out
    assert f"created           {AT_LOCAL}" in out and "cancel requested  2026-11-25 04:44:28" in out
    assert "progress          0/10 steps" in out and "params            amp=false, arch=mlp, classes=[0, 1, 2], hidden=128" in out


def test_show_a_fine_tune_with_cost_energy_and_attempts(cast: Any, as_user: Any, india: None) -> None:
    source = make_reporting(cast.digits, name="source")
    ckpt = Checkpoint.objects.create(run=source.run, attempt=source.attempt, step=400, file_name="c.pt", size=1, sha256="a" * 64)
    tuned = make_reporting(cast.digits, name="tuned", init_checkpoint=ckpt, energy_j=42.0)
    Attempt.objects.filter(pk=tuned.attempt.pk).update(started_at=AT_UTC)
    code, out, _ = as_user(cast.alice)("show", str(tuned.run.pk))
    assert code == 0
    assert f"starts from       run {source.run.pk} checkpoint {ckpt.pk} (step 400)" in out
    assert "energy            0.0117 Wh\n" in out and "e-05" not in out
    # The attempt is still running: its cost grows with the clock, so only the shape is fixed.
    assert re.search(r"^cost +\d+\.\d{4} \(2\.0000 per device-hour\)$", out, re.M), out
    attempts = out.split("ATTEMPT")[1]
    assert AT_LOCAL in attempts and "T23:09" not in attempts
    # Without a portal-side init checkpoint, the start point the job itself reported.
    reported = make_reporting(cast.digits, name="reported")
    Attempt.objects.filter(pk=reported.attempt.pk).update(lineage={"init_run_id": "7", "init_checkpoint_step": 400})
    code, out, _ = as_user(cast.alice)("show", str(reported.run.pk))
    assert code == 0 and "starts from       run 7 (step 400)" in out


# --- nodes, checkpoints, keys -------------------------------------------------------------------


def test_nodes_count_another_teams_runs(cast: Any, as_user: Any) -> None:
    alices = make_reporting(cast.digits, name="alice's")
    bobs = make_run(cast.tinylm, name="bob's")
    make_attempt(bobs, alices.node)
    code, out, _ = as_user(cast.bob)("nodes")
    assert code == 0
    row = next(line for line in out.splitlines() if line.startswith(str(alices.node.pk) + " "))
    assert row.rstrip().endswith(f"{bobs.pk},(another team's run)"), row
    code, out, _ = as_user(cast.alice)("nodes")
    row = next(line for line in out.splitlines() if line.startswith(str(alices.node.pk) + " "))
    assert row.rstrip().endswith(f"{alices.run.pk},(another team's run)"), row


def test_checkpoints_say_their_state_and_size(cast: Any, as_user: Any, india: None) -> None:
    rep = make_reporting(cast.digits, name="ckpts")
    run, attempt = rep.run, rep.attempt
    kept = Checkpoint.objects.create(run=run, attempt=attempt, step=300, file_name="c300.pt", size=5_000_000, sha256="a" * 64,
                                     stored_path="ckpts/c300.pt")
    Checkpoint.objects.create(run=run, attempt=attempt, step=100, file_name="c100.pt", size=70, sha256="b" * 64,
                              stored_path="ckpts/c100.pt", deleted_at=timezone.now())
    Checkpoint.objects.create(run=run, attempt=attempt, step=200, file_name="c200.pt", size=2048, sha256="c" * 64)
    Checkpoint.objects.filter(pk=kept.pk).update(created_at=AT_UTC)
    trainyard = as_user(cast.alice)
    code, out, _ = trainyard("checkpoints", str(run.pk))
    assert code == 0
    rows = {line.split()[1]: line for line in out.splitlines()[1:]}
    assert "70 B" in rows["100"] and "deleted by retention" in rows["100"] and " no " in rows["100"]
    assert "2.0 KiB" in rows["200"] and "not uploaded" in rows["200"] and " no " in rows["200"]
    assert "4.8 MiB" in rows["300"] and "kept" in rows["300"] and " yes " in rows["300"] and AT_LOCAL in rows["300"]
    assert "True" not in out and "False" not in out and "STATE" in out
    empty = make_reporting(cast.digits, name="none").run
    code, out, err = trainyard("checkpoints", str(empty.pk))
    assert code == 0 and out == "" and f"run {empty.pk} has no checkpoints yet" in err
    code, out, err = trainyard("keys", str(empty.pk))
    assert code == 0 and out == "" and f"run {empty.pk} has logged no metrics yet" in err


# --- metrics, compare ---------------------------------------------------------------------------


def test_an_unknown_metric_is_not_found_with_or_without_json(cast: Any, as_user: Any) -> None:
    run = with_metrics(cast.digits, "m", {"lr": 0.1})
    trainyard = as_user(cast.alice)
    for extra in ([], ["--json"]):
        code, out, err = trainyard("metrics", str(run.pk), "nosuch", *extra)
        assert code == 4 and out == "", (extra, err)
        assert f"run {run.pk} has no metric 'nosuch' (its metrics: acc, loss)" in err
        assert f"`trainyard keys {run.pk}`" in err and "--keys" not in err
    code, out, _ = trainyard("metrics", str(run.pk), "loss")
    assert code == 0 and "MEAN" in out


def test_compare_shows_both_ends_json_values_and_refuses_unknown_keys(cast: Any, as_user: Any) -> None:
    a = with_metrics(cast.digits, "a", {"lr": 0.1, "amp": True})
    b = with_metrics(cast.digits, "b", {"lr": 0.2, "amp": False})
    trainyard = as_user(cast.alice)
    code, out, _ = trainyard("compare", str(a.pk), str(b.pk), "--keys", "acc")
    assert code == 0
    rows = {line.split("  ")[0].strip(): line.split()[-2:] for line in out.splitlines()[1:]}
    assert rows["param amp *"] == ["true", "false"]
    assert rows["acc (last)"] == ["29", "29"] and rows["acc (min)"] == ["0", "0"] and rows["acc (max)"] == ["29", "29"]
    assert "False" not in out and "True" not in out
    for extra in ([], ["--json"]):
        code, out, err = trainyard("compare", str(a.pk), str(b.pk), "--keys", "nosuch", *extra)
        assert code == 4 and out == "", err
        assert "have no metric 'nosuch' (their metrics: acc, loss)" in err
    code, _, err = trainyard("compare", str(a.pk), str(a.pk))
    assert code == 2 and "give at least two different runs" in err


def test_compare_open_prints_the_url_and_json_when_asked(cast: Any, as_user: Any) -> None:
    trainyard = as_user(cast.alice)
    code, out, _ = trainyard("compare", "3", "5", "--open")
    assert code == 0 and out == "http://testserver/compare/?runs=3,5\n"
    # --json promises one JSON document on stdout, --open included.
    code, out, _ = trainyard("compare", "3", "5", "--open", "--json")
    assert code == 0 and json.loads(out) == {"url": "http://testserver/compare/?runs=3,5"}


# --- budget -------------------------------------------------------------------------------------


def budgets(cast: Any) -> Budget:
    budget = Budget.objects.create(team=cast.vision, project=cast.digits, amount=Decimal("100.00"))
    BudgetAlert.objects.create(budget=budget, period=period_for(at=timezone.now()).key, threshold=50, spent=Decimal("51"),
                               amount=budget.amount)
    BudgetAlert.objects.filter(budget=budget).update(created_at=AT_UTC)
    Budget.objects.create(team=cast.nlp, amount=Decimal("40.00"), action="stop_running")
    spend(cast)
    return budget


def spend(cast: Any) -> None:
    """vision/digits spends 12.50 this period; nlp/tiny-lm has never spent anything."""
    spender = make_reporting(cast.digits, name="spender")
    now = timezone.now()
    UsageEntry.objects.create(attempt=spender.attempt, run=spender.run, project=cast.digits, team=cast.vision, pool=spender.run.pool,
                              template=spender.run.template, period_start=now - timedelta(minutes=1), period_end=now,
                              cost=Decimal("12.5"))


def test_budget_reads_well(cast: Any, as_user: Any, india: None) -> None:
    budgets(cast)
    code, out, _ = as_user(cast.alice)("budget", "vision/digits")
    assert code == 0
    assert "budget     100.00 USD (the project's own)" in out
    assert "alerts at  50%, 80%, 100%" in out and "at 100%    block new runs" in out
    assert "spent      12.50 USD" in out and "remaining  87.50 USD" in out and "used       12.5% of the budget" in out
    # A 50% alert from a lower amount is not crossed at this one: never "used 12.5%" beside it (issue 29).
    assert "50% crossed" not in out
    Budget.objects.filter(pk=cast.digits.budgets.get().pk).update(amount=Decimal("20.00"))
    code, out, _ = as_user(cast.alice)("budget", "vision/digits")
    assert code == 0 and f"alert      50% crossed at {AT_LOCAL}" in out
    assert "[50" not in out and "block_new" not in out


def test_budget_for_finance_comes_from_the_finance_api(cast: Any, as_user: Any) -> None:
    budgets(cast)
    carol = as_user(cast.carol)
    code, out, err = carol("budget", "vision/digits")
    assert code == 0, err
    assert "project    vision/digits" in out and "source     the finance API" in out
    assert "budget     100.00 (the project's own)" in out and "spent      12.50\n" in out and "remaining  87.50\n" in out
    assert "used       12.5% of the budget" in out
    code, out, err = carol("budget", "nlp/tiny-lm")
    assert code == 0, err
    assert "budget     40.00 (team nlp's, shared by its projects)" in out and "spent      0.00 (the whole team)" in out
    assert "at 100%    block new runs and stop running ones" in out
    code, _, err = carol("budget", "robotics/arm")
    assert code == 4 and "project robotics/arm not found" in err
    # Neither a member nor finance: the finance API refuses, and the answer is the lookup's.
    code, _, err = as_user(cast.outsider)("budget", "vision/digits")
    assert code == 4 and "project vision/digits not found" in err


def test_budget_takes_a_project_id_for_finance_as_for_members(cast: Any, as_user: Any) -> None:
    budgets(cast)
    digits, tinylm = str(cast.digits.pk), str(cast.tinylm.pk)
    code, out, err = as_user(cast.alice)("budget", digits)
    assert code == 0 and "budget     100.00 USD (the project's own)" in out and "finance" not in out, err
    carol = as_user(cast.carol)
    code, out, err = carol("budget", f" {digits} ")
    assert code == 0, err
    assert "project    vision/digits" in out and "source     the finance API" in out
    assert "budget     100.00 (the project's own)" in out and "spent      12.50\n" in out and "remaining  87.50\n" in out
    code, out, err = carol("budget", digits, "--json")
    assert code == 0 and json.loads(out)["project"] == {"id": cast.digits.pk, "full_slug": "vision/digits"}, err
    # The finance API pairs ids with names only in its ledger: a project that never spent is
    # not found by id there (by name it is), and an id of no project is not found either.
    code, out, err = carol("budget", tinylm)
    assert code == 4 and out == "", err
    assert f"project {tinylm} not found: the finance API knows a project's id only once it has spent something" in err
    assert "give it as team/project, e.g. vision/digits" in err
    code, out, err = carol("budget", "nlp/tiny-lm")
    assert code == 0 and "budget     40.00 (team nlp's, shared by its projects)" in out, err
    code, _, err = carol("budget", "99999")
    assert code == 4 and "project 99999 not found" in err, err
    # Neither a member nor finance: the finance API refuses, and the answer is the lookup's.
    code, _, err = as_user(cast.outsider)("budget", digits)
    assert code == 4 and f"project {digits} not found (or it belongs to another team)" in err, err


def test_budget_for_finance_of_a_project_that_spends_without_a_budget(cast: Any, as_user: Any) -> None:
    spend(cast)
    member = as_user(cast.alice)("budget", "vision/digits")
    assert member[0] == 0 and re.search(r"^budget +none set$", member[1], re.M), member
    for ref in ("vision/digits", str(cast.digits.pk)):
        code, out, err = as_user(cast.carol)("budget", ref)
        assert code == 0, (ref, err)
        assert re.search(r"^budget +none set$", out, re.M) and re.search(r"^spent +12\.50$", out, re.M), out
        assert "remaining" not in out and "used" not in out


# --- logout -------------------------------------------------------------------------------------


def test_logout_revokes_the_stored_token_and_only_on_its_server(cast: Any, monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str], tmp_path: Any) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.setattr(cli, "Client", TokenTransport)
    token, key = api_token_create(user=cast.alice, name="cli")
    path = _config.config_save(server="http://testserver", token=key, username="alice")

    def logout(*argv: str) -> tuple[int, str]:
        capsys.readouterr()
        code = cli.main(["logout", *argv])
        return code, capsys.readouterr().err

    # --server is a check: the stored token is never sent to another server.
    code, err = logout("--server", "http://elsewhere:8000")
    assert code == 2 and "logged in to http://testserver, not http://elsewhere:8000" in err, err
    token.refresh_from_db()
    assert token.revoked_at is None and path.exists()

    code, err = logout("--server", "http://testserver/")
    assert code == 0 and "revoked the token on http://testserver" in err, err
    token.refresh_from_db()
    assert token.revoked_at is not None and not path.exists()

    # A copy of the file whose token was revoked meanwhile: nothing to do on the server, no warning.
    _config.config_save(server="http://testserver", token=key, username="alice")
    code, err = logout()
    assert code == 0 and "the token no longer works on http://testserver (already revoked)" in err, err
    assert "warning" not in err and not path.exists()


# --- progress -----------------------------------------------------------------------------------


def test_a_sweep_waits_in_runs(cast: Any, templates: None, as_user: Any) -> None:
    code, _, err = as_user(cast.alice)(
        "submit", "sweep", "--project", "vision/digits", "--param", "template=digits-classifier", "--param", "strategy=grid",
        "--param", 'space={"lr": [0.001, 0.01]}', "--param", 'params={"steps": 10}', "--param", "max_runs=2", *TAGS,
        "--wait", "--poll", "0.01", "--timeout-wait", "0.01")
    assert code == 7, err
    assert "0/2 runs" in err and "steps" not in err.split("submitted run")[1].split("still")[0]



def test_queue_prints_the_accuracy_of_long_waits_and_requeues(cast: Any, templates: None, as_user: Any) -> None:
    # With no estimate scored yet every bucket still says so, as the queue page does.
    code, _out, err = as_user(cast.alice)("queue")
    assert code == 0
    assert "No estimates to check yet" in err
    for label in ("Waited over 10 minutes", "Waited over 1 hour", "Requeued"):
        assert f"  {label}" in err, err
