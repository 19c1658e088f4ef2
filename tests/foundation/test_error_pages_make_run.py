"""`make run`'s defaults, live (issue 26 acceptance 5): the stack started as `make run` starts it
(portal.launch) answers an unknown URL with the portal's page and no URL patterns, still serves
its static files with DEBUG off, and answers a 50 MB POST to the API with the JSON 413."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.fixtures.services import free_port
from tests.foundation.test_make_run import _launch, _stop_everything

# Real processes, and nothing that differs by database (make run always uses its SQLite file).
pytestmark = [pytest.mark.live, pytest.mark.process]

FIFTY_MB = 50 * 1000 * 1000


def _get(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=60) as answer:
            return answer.status, answer.headers.get("Content-Type", ""), answer.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.headers.get("Content-Type", ""), err.read().decode()


def test_make_run_shows_no_url_list_and_answers_a_50_mb_post_with_a_json_413(tmp_path: Path) -> None:
    var = tmp_path / "var"
    port = free_port()
    launcher, out = _launch(var, port)
    try:
        out.wait_for("Trainyard is up", 240)
        base = f"http://127.0.0.1:{port}"

        status, kind, html = _get(f"{base}/no/such/page/")
        assert status == 404 and kind.startswith("text/html") and "Page not found" in html
        assert "URLconf" not in html and "api/v1/" not in html and "Traceback" not in html

        status, kind, text = _get(f"{base}/api/v1/no-such-thing/")
        assert status == 404 and kind == "application/json" and json.loads(text)["error"]["code"] == "not_found"

        # DEBUG off: the pages still get their CSS and scripts.
        assert _get(f"{base}/static/css/app.css")[0] == 200
        status, _, login = _get(f"{base}/login/")
        assert status == 200 and "/static/css/app.css" in login

        # urllib sends the whole body, then reads the answer, on a connection it asks to close:
        # the server must read what it refuses, or the client sees a reset instead of the 413.
        body = b'{"blob": "' + b"x" * (FIFTY_MB - 12) + b'"}'
        request = urllib.request.Request(f"{base}/api/v1/runs/", data=body, method="POST",
                                         headers={"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=120)
        assert refused.value.code == 413 and refused.value.headers["Content-Type"] == "application/json"
        error = json.loads(refused.value.read())["error"]
        assert error["status"] == 413 and error["code"] == "too_large"
        assert error["message"] == f"body: request body is {len(body):,} bytes; the limit is 2,621,440 bytes (2.5 MiB)"
    finally:
        _stop_everything(launcher, var)
