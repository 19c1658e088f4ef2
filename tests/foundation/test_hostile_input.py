"""Hostile input is a 400 that names the limit or the field, never a 500 (issue 27, part 3):
JSON nested 100,000 levels deep, bodies over the upload limit, date-times whose UTC offset
PostgreSQL cannot hold or that leave the years 1-9999."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote, urlencode

import pytest
from django.core.cache import cache
from django.test import Client, override_settings
from rest_framework.exceptions import ValidationError

from apps.core.api.parsers import JSONParser
from apps.core.jsonlimits import JSON_MAX_DEPTH, json_depth
from tests.runs.factories import body, local_pool, make_sweep_template, make_template

DEEP = 100_000


def nested(depth: int, leaf: str = "1") -> str:
    return "[" * depth + leaf + "]" * depth


def post_raw(client: Client, path: str, text: str) -> Any:
    return client.post(path, data=text, content_type="application/json", HTTP_ACCEPT="application/json")


@pytest.fixture(autouse=True)
def _fresh_cache() -> Iterator[None]:
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def templates(cast: Any) -> None:
    local_pool("2.0")
    make_template()
    make_sweep_template()


def test_depth_is_counted_on_the_raw_text_outside_strings() -> None:
    assert json_depth(b'{"a": [1, {"b": "[[[[{{"}], "c": "\\"]"}') == 3
    assert json_depth('"just a string"') == 0 and json_depth(b"42") == 0
    assert json_depth(nested(DEEP)) == DEEP  # no recursion: this is what json.loads died on


@pytest.mark.parametrize("path", ["/api/v1/runs/", "/api/v1/queue/forecast/", "/api/v1/runs/trials/",
                                  "/api/v1/projects/", "/api/v1/agent/heartbeat/", "/api/v1/agent/metrics/"])
def test_json_nested_too_deep_is_a_400_naming_the_limit(cast: Any, templates: None, path: str) -> None:
    client = Client()
    client.force_login(cast.alice)
    text = json.dumps(body(cast, template="sweep", params="PARAMS")).replace('"PARAMS"', nested(DEEP))
    response = post_raw(client, path, text)
    assert response.status_code == 400, response.content[:300]
    error = response.json()["error"]
    assert error["code"] == "too_deep"
    assert error["message"] == f"body: JSON nested {DEEP + 1} levels deep; the limit is {JSON_MAX_DEPTH} levels of arrays and objects"
    assert error["fields"] == {"body": [error["message"].removeprefix("body: ")]}


def test_json_at_the_limit_reaches_the_view(cast: Any, templates: None) -> None:
    client = Client()
    client.force_login(cast.alice)
    text = json.dumps({"template": "sweep", "params": "PARAMS"}).replace('"PARAMS"', nested(JSON_MAX_DEPTH - 1))
    response = post_raw(client, "/api/v1/runs/trials/", text)
    # The view answers (params must be an object): the depth itself was fine.
    assert response.status_code == 400 and response.json()["error"]["fields"] == {"params": ["must be an object"]}


def test_drf_parser_refuses_depth_too(cast: Any, templates: None) -> None:
    """A view reached without the middleware (APIRequestFactory, a future mount) is covered by the parser."""
    with pytest.raises(ValidationError) as err:
        JSONParser().parse(io.BytesIO(nested(DEEP).encode()))
    assert err.value.detail == {"body": [f"JSON nested {DEEP} levels deep; the limit is {JSON_MAX_DEPTH} levels of arrays and objects"]}


@pytest.mark.parametrize("form_format", ["multipart", "urlencoded"])
def test_api_form_field_with_deep_json_is_a_400(cast: Any, templates: None, form_format: str) -> None:
    """DRF's JSONField json.loads a `params` sent as form data: the form parsers check it first."""
    client = Client()
    client.force_login(cast.alice)
    fields = {"project": str(cast.digits.pk), "template": "digits-classifier", "params": nested(DEEP)}
    if form_format == "multipart":
        response = client.post("/api/v1/runs/", fields, HTTP_ACCEPT="application/json")
    else:
        response = client.post("/api/v1/runs/", urlencode(fields), content_type="application/x-www-form-urlencoded",
                               HTTP_ACCEPT="application/json")
    assert response.status_code == 400, response.content[:300]
    assert response.json()["error"]["fields"] == {"params": [f"JSON nested {DEEP} levels deep; the limit is {JSON_MAX_DEPTH} "
                                                             "levels of arrays and objects"]}


@override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=10_000)
def test_json_over_the_size_limit_is_a_413_naming_the_limit(cast: Any, templates: None) -> None:
    client = Client()
    client.force_login(cast.alice)
    huge = json.dumps(body(cast, params={"steps": 20, "blob": "x" * 20_000}))
    response = post_raw(client, "/api/v1/runs/", huge)
    assert response.status_code == 413
    error = response.json()["error"]
    assert error["code"] == "too_large"
    assert error["message"] == f"body: request body is {len(huge):,} bytes; the limit is 10,000 bytes"


@override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=10_000)
def test_form_over_the_size_limit_names_the_limit(cast: Any, templates: None) -> None:
    client = Client()
    client.force_login(cast.alice)
    response = client.post("/runs/new/", {"project": cast.digits.pk, "template": "digits-classifier", "name": "x" * 20_000})
    assert response.status_code == 400
    assert "the limit is 10,000 bytes" in response.content.decode()


def test_form_field_with_deep_json_is_a_400_naming_field_and_limit(cast: Any, templates: None) -> None:
    """The new-run page takes JSON params in textareas (a sweep's space)."""
    client = Client()
    client.force_login(cast.alice)
    response = client.post("/runs/new/", {"project": cast.digits.pk, "template": "sweep", "p_space": nested(DEEP)})
    assert response.status_code == 400
    expected = f"p_space: JSON nested {DEEP} levels deep; the limit is {JSON_MAX_DEPTH} levels of arrays and objects"
    assert response.content.decode() == expected


# --- date-times -----------------------------------------------------------------------------

BAD_DATETIMES = {
    "2026-01-01T00:00:00+19:56": "UTC offset +19:56 is out of range: use one from -15:59 to +15:59, or Z",
    "2026-01-01T00:00:00-16:00": "UTC offset -16:00 is out of range: use one from -15:59 to +15:59, or Z",
    "9999-12-31T23:00:00-05:00": "out of range: it must fall within the years 0001 to 9999 in UTC",
    "0001-01-01T00:00:00+05:00": "out of range: it must fall within the years 0001 to 9999 in UTC",
}


@pytest.mark.parametrize(("who", "path"), [("alice", "/api/v1/runs/"), ("carol", "/api/v1/finance/budgets/"),
                                           ("carol", "/api/v1/finance/quotas/"), ("alice", "/api/v1/webhooks/")])
def test_updated_after_out_of_range_is_a_400_naming_the_field(cast: Any, who: str, path: str) -> None:
    client = cast.client(getattr(cast, who))
    for value, problem in BAD_DATETIMES.items():
        response = client.get(f"{path}?updated_after={quote(value)}")
        assert response.status_code == 400, (value, response.content[:300])
        assert response.json()["error"]["fields"] == {"updated_after": [problem]}, value
    for fine in ("2026-01-01T00:00:00+15:59", "2026-01-01T05:30:00+05:30", "0001-01-01T00:00:00Z", "9999-12-31T23:59:59Z"):
        assert client.get(f"{path}?updated_after={quote(fine)}").status_code == 200, fine
    for nonsense in ("0000-01-01T00:00:00Z", "10000-01-01T00:00:00Z"):
        assert "updated_after" in client.get(f"{path}?updated_after={quote(nonsense)}").json()["error"]["fields"]


def test_finance_since_and_until_out_of_range_name_the_field(cast: Any) -> None:
    client = cast.client(cast.carol)
    for name in ("since", "until"):
        response = client.get(f"/api/v1/finance/spend/?{name}={quote('2026-01-01T00:00:00+19:56')}")
        assert response.status_code == 400
        assert response.json()["error"]["fields"][name] == [BAD_DATETIMES["2026-01-01T00:00:00+19:56"]]
    assert client.get(f"/api/v1/finance/spend/?since={quote('2026-01-01T00:00:00+05:30')}").status_code == 200
