"""Ids typed with characters that str.isdigit() accepts but int() refuses ("³"), that int()
reads as another number ("٣" is 3), or past the largest 64-bit key: every place that takes an id answers 400 or 404 naming the
field, never a 500 and never another object. Schemathesis found the first as a 500 on
/api/v1/webhooks/?project=³, on POST /api/v1/code-snapshots/, and (with more examples)
on /api/v1/webhook-deliveries/?endpoint=535947406157218709504.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from apps.core.text import is_id
from apps.webhooks.services import webhook_sign, webhook_verify
from tests.runs.factories import body, local_pool, make_template

ODD = ["³", "٣", "1²", "535947406157218709504"]  # the last: past a 64-bit key (an overflow in FK filters)


@pytest.mark.parametrize("text,expected", [("41", True), ("0", True), ("³", False), ("٣", False), ("", False),
                                           ("-1", False), ("4 1", False), ("1e3", False),
                                           (str(2**63 - 1), True), (str(2**63), False), ("9" * 5000, False)])
def test_is_id_takes_ascii_digits_only(text: str, expected: bool) -> None:
    assert is_id(text) is expected


@pytest.mark.parametrize("odd", ODD)
@pytest.mark.parametrize("path", [
    "/api/v1/webhooks/?project={}",
    "/api/v1/webhook-deliveries/?endpoint={}",
    "/api/v1/runs/?parent={}",
    "/api/v1/runs/?search={}",
    "/api/v1/templates/digits-classifier/?version={}",
])
def test_odd_digits_in_query_ids_are_a_4xx(cast: Any, odd: str, path: str) -> None:
    response = cast.client(cast.alice).get(path.format(odd))
    assert response.status_code in (200, 400, 404), response.content
    if response.status_code == 200:  # search and the like: an odd id matches nothing, not run 3
        assert response.json()["results"] == []


@pytest.mark.parametrize("odd", ODD)
def test_odd_digits_as_a_project_in_a_body_name_the_field(cast: Any, odd: str) -> None:
    upload = SimpleUploadedFile("code.tar.gz", b"not really a tarball")
    response = cast.client(cast.alice).post("/api/v1/code-snapshots/", {"project": odd, "git_commit": "abc", "file": upload})
    assert response.status_code == 400
    assert "project" in response.json()["error"]["fields"]


@pytest.mark.parametrize("odd", ODD)
def test_odd_digits_in_the_finance_ledger_filters_name_the_field(cast: Any, odd: str) -> None:
    response = cast.client(cast.carol).get(f"/api/v1/finance/spend/?run={odd}")
    assert response.status_code in (200, 400), response.content
    ledger = cast.client(cast.carol).get(f"/api/v1/finance/ledger.csv?run={odd}&project={odd}")
    assert ledger.status_code == 400, ledger.content


@pytest.mark.parametrize("odd", ODD)
def test_odd_digits_as_an_init_run_name_the_field(cast: Any, odd: str) -> None:
    local_pool()
    make_template()
    response = cast.client(cast.alice).post("/api/v1/runs/", body(cast, init_run=odd), format="json")
    assert response.status_code == 400, response.content
    assert "init_run" in response.json()["error"]["fields"]


@pytest.mark.parametrize("odd", ODD)
def test_a_webhook_timestamp_of_odd_digits_fails_verification_without_a_crash(odd: str) -> None:
    signed = webhook_sign(secret="s", timestamp=3, body=b"{}")
    assert webhook_verify(secret="s", timestamp=odd, body=b"{}", signature=signed, now=3.0) is False
    assert webhook_verify(secret="s", timestamp="3", body=b"{}", signature=signed, now=3.0) is True


@pytest.mark.parametrize("odd", ODD)
def test_odd_ids_on_the_runs_pages_are_a_4xx_or_no_match(cast: Any, client: Any, odd: str) -> None:
    client.force_login(cast.alice)
    assert client.get(f"/runs/?project={odd}&q={odd}").status_code == 200
    assert client.get(f"/runs/overview/?project={odd}").status_code == 404


# --- NUL characters: PostgreSQL text and jsonb cannot hold them (a DataError, so a 500, there) ---

@pytest.mark.parametrize("path", ["/api/v1/runs/?search=a%00b", "/api/v1/runs/?tag=%00", "/api/v1/webhooks/?event_type=x%00"])
def test_a_nul_in_a_query_parameter_is_a_400_naming_it(cast: Any, path: str) -> None:
    response = cast.client(cast.alice).get(path)
    assert response.status_code == 400, response.content
    (field,) = response.json()["error"]["fields"]
    assert field == path.split("?")[1].split("=")[0]
    assert "NUL" in response.json()["error"]["message"]


def test_a_nul_in_a_page_query_is_a_400_too(cast: Any, client: Any) -> None:
    client.force_login(cast.alice)
    response = client.get("/runs/?q=a%00b")
    assert response.status_code == 400 and b"q: must not contain a NUL" in response.content


def test_a_nul_in_a_json_body_is_a_400_naming_the_field_and_stores_nothing(cast: Any) -> None:
    from apps.runs.models import Run

    local_pool()
    make_template()
    response = cast.client(cast.alice).post("/api/v1/runs/", body(cast, name="a\x00b", tags={"task": "x\x00"}), format="json")
    assert response.status_code == 400, response.content
    assert list(response.json()["error"]["fields"]) in (["name"], ["tags.task"])
    assert not Run.objects.exists()
