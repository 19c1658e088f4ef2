"""Issue 29: a run's log searched on the server (`GET /api/v1/runs/{id}/logs/?q=`, a clear 400
for a query past the limit) and downloaded whole as a text/plain attachment
(`GET /api/v1/runs/{id}/logs/download/`); another tenant's run is a 404 for both."""

from __future__ import annotations

from typing import Any

from apps.runs.models import Attempt, LogChunk, Run
from apps.tracking import log_selectors
from tests.tracking.conftest import make_run


def _logged(cast: Any, texts: list[str], *, attempts: int = 1) -> Run:
    run = make_run(cast.digits)
    made = [Attempt.objects.create(run=run, number=n + 1) for n in range(attempts)]
    LogChunk.objects.bulk_create([LogChunk(run=run, attempt=made[min(i * attempts // len(texts), attempts - 1)], seq=i, text=t)
                                  for i, t in enumerate(texts)])
    return run


def test_search_returns_only_the_matching_lines_case_insensitively(cast: Any) -> None:
    run = _logged(cast, ["step 1 loss=2.3\nloading data\n", "step 2 loss=1.9\nWARNING: slow disk\n", "done\n"])
    body = cast.client(cast.alice).get(f"/api/v1/runs/{run.pk}/logs/", {"q": "Loss="}).json()
    assert body["q"] == "Loss=" and body["matches"] == 2 and body["more"] is False
    assert [c["text"] for c in body["chunks"]] == ["step 1 loss=2.3\n", "step 2 loss=1.9\n"]
    assert body["next"] == body["chunks"][-1]["id"]
    # A text found nowhere: an empty page, not an error; % and _ are plain characters.
    assert cast.client(cast.alice).get(f"/api/v1/runs/{run.pk}/logs/", {"q": "100%_"}).json()["chunks"] == []
    # Without q the page is the unfiltered one, as before.
    assert len(cast.client(cast.alice).get(f"/api/v1/runs/{run.pk}/logs/").json()["chunks"]) == 3


def test_search_follows_with_a_cursor(cast: Any) -> None:
    run = _logged(cast, [f"line {i} match\nother {i}\n" for i in range(7)])
    api = cast.client(cast.alice)
    seen, after, pages = [], 0, 0
    while True:
        body = api.get(f"/api/v1/runs/{run.pk}/logs/", {"q": "match", "after": after, "limit": 3}).json()
        seen += [c["text"] for c in body["chunks"]]
        after, pages = body["next"], pages + 1
        if not body["more"]:
            break
    assert seen == [f"line {i} match\n" for i in range(7)] and pages == 3


def test_a_search_page_stops_at_the_line_limit_and_says_there_is_more(cast: Any, monkeypatch: Any) -> None:
    monkeypatch.setattr(log_selectors, "LOG_SEARCH_LINES", 4)
    run = _logged(cast, ["x\nx\nx\n"] * 3)
    body = cast.client(cast.alice).get(f"/api/v1/runs/{run.pk}/logs/", {"q": "x"}).json()
    assert body["matches"] == 6 and len(body["chunks"]) == 2 and body["more"] is True
    rest = cast.client(cast.alice).get(f"/api/v1/runs/{run.pk}/logs/", {"q": "x", "after": body["next"]}).json()
    assert rest["matches"] == 3 and rest["more"] is False


def test_a_too_long_query_is_a_400_naming_q_and_the_limit(cast: Any) -> None:
    run = _logged(cast, ["hello\n"])
    response = cast.client(cast.alice).get(f"/api/v1/runs/{run.pk}/logs/", {"q": "a" * 201})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["fields"]["q"] == ["201 characters; the limit is 200"]
    assert cast.client(cast.alice).get(f"/api/v1/runs/{run.pk}/logs/", {"q": "a" * 200}).status_code == 200
    nul = cast.client(cast.alice).get(f"/api/v1/runs/{run.pk}/logs/", {"q": "a\x00b"})
    assert nul.status_code == 400 and "q" in nul.json()["error"]["fields"]


def test_download_streams_the_whole_log_as_a_text_attachment(cast: Any, monkeypatch: Any) -> None:
    monkeypatch.setattr(log_selectors, "LOG_DOWNLOAD_BATCH", 2)  # several round trips
    texts = ["first\n", "second\n", "third\n", "fourth\n", "fifth\n"]
    run = _logged(cast, texts, attempts=2)
    response = cast.client(cast.alice).get(f"/api/v1/runs/{run.pk}/logs/download/")
    assert response.status_code == 200 and response.streaming
    assert response["Content-Type"] == "text/plain; charset=utf-8"
    assert response["Content-Disposition"] == f'attachment; filename="run-{run.pk}-log.txt"'
    body = b"".join(response.streaming_content).decode()
    assert body == "first\nsecond\nthird\n\n[trainyard: attempt 2]\nfourth\nfifth\n"


def test_an_empty_log_downloads_as_an_empty_file(cast: Any) -> None:
    run = make_run(cast.digits)
    response = cast.client(cast.alice).get(f"/api/v1/runs/{run.pk}/logs/download/")
    assert response.status_code == 200 and b"".join(response.streaming_content) == b""


def test_another_tenant_gets_a_404_for_search_and_download(cast: Any) -> None:
    run = _logged(cast, ["secret line\n"])
    for user in (cast.bob, cast.outsider):
        api = cast.client(user)
        assert api.get(f"/api/v1/runs/{run.pk}/logs/", {"q": "secret"}).status_code == 404
        assert api.get(f"/api/v1/runs/{run.pk}/logs/download/").status_code == 404
    # A viewer of the team may read it.
    assert cast.client(cast.victor).get(f"/api/v1/runs/{run.pk}/logs/download/").status_code == 200
