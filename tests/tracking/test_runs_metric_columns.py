"""The runs table's metric columns (issue 29): chosen keys (`cols=`), each cell the run's last value
and its best (min of a loss, max of the rest), sortable by the column's heading (best first, then
the other way), and filterable by a metric condition (`mf=val_accuracy >= 0.9`) on the last value.
tests/tracking/test_browser.py::test_runs_list_metric_columns_sort_and_filter draws it."""

from __future__ import annotations

import re
from typing import Any

from django.test import Client

from apps.runs.models import RunStatus
from apps.tracking.services import metric_points_store
from tests.tracking.conftest import make_run


def _client(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _order(html: str) -> list[int]:
    return [int(pk) for pk in re.findall(r'<tr data-run="(\d+)"', html)]


def _runs(cast: Any) -> tuple[Any, Any, Any]:
    made = []
    for name, accs, losses in (("steady", [0.5, 0.8, 0.9], [1.0, 0.5, 0.3]), ("peaked", [0.6, 0.95, 0.7], [0.9, 0.2, 0.6]),
                               ("weak", [0.3, 0.4, 0.5], [2.0, 1.5, 1.2])):
        run = make_run(cast.digits, name=name, status=RunStatus.SUCCEEDED, family="cols")
        rows = [("val_accuracy", s, a, 0, 1_700_000_000.0 + s) for s, a in enumerate(accs)]
        rows += [("loss", s, v, 0, 1_700_000_000.0 + s) for s, v in enumerate(losses)]
        metric_points_store(run_id=run.pk, attempt=1, rows=rows)
        made.append(run)
    return made[0], made[1], made[2]


def test_metric_columns_show_last_and_best_and_sort_by_the_heading(cast: Any) -> None:
    steady, peaked, weak = _runs(cast)
    client = _client(cast.alice)
    html = client.get("/runs/?family=cols&cols=val_accuracy,loss").content.decode()
    assert 'data-key="val_accuracy"' in html and "last · max" in html and "last · min" in html
    row = re.search(rf'<tr data-run="{peaked.pk}".*?</tr>', html, re.S).group(0)  # type: ignore[union-attr]
    cells = re.findall(r'<td class="mono metric-cell">(.*?)</td>', row, re.S)
    assert [re.sub(r"<[^>]+>", "", c) for c in cells] == ["0.7000 · 0.9500", "0.6000 · 0.2000"], cells
    # The heading sorts best first: val_accuracy high first by its best, loss low first.
    link = re.search(r'data-key="val_accuracy"[^>]*><a href="\?([^"]+)"', html).group(1).replace("&amp;", "&")  # type: ignore[union-attr]
    assert "sort=-best%3Aval_accuracy" in link and link.count("sort=") == 1
    assert _order(client.get(f"/runs/?{link}").content.decode()) == [peaked.pk, steady.pk, weak.pk]
    sorted_page = client.get("/runs/?family=cols&cols=val_accuracy,loss&sort=-best:val_accuracy").content.decode()
    assert 'aria-sort="descending"' in sorted_page and "sort=best%3Aval_accuracy" in sorted_page  # a second click: the other way
    assert _order(client.get("/runs/?family=cols&sort=best:loss").content.decode()) == [peaked.pk, steady.pk, weak.pk]
    assert _order(client.get("/runs/?family=cols&sort=-metric:val_accuracy").content.decode()) == [steady.pk, peaked.pk, weak.pk]


def test_metric_filter_keeps_runs_by_their_last_value_and_names_a_bad_one(cast: Any) -> None:
    steady, peaked, weak = _runs(cast)
    client = _client(cast.alice)
    html = client.get("/runs/?family=cols&mf=val_accuracy >= 0.6").content.decode()
    assert sorted(_order(html)) == sorted([steady.pk, peaked.pk]) and 'data-key="val_accuracy"' in html
    both = client.get("/runs/?family=cols&mf=val_accuracy>0.6, loss<0.5").content.decode()
    assert _order(both) == [steady.pk]
    # The partial the page refreshes from keeps the filter.
    assert _order(client.get("/runs/?family=cols&mf=loss<1&partial=1").content.decode()) == _order(
        client.get("/runs/?family=cols&mf=loss<1").content.decode())
    bad = client.get("/runs/?family=cols&mf=accuracy is high")
    assert bad.status_code == 200
    text = bad.content.decode()
    assert "metric filter: &#x27;accuracy is high&#x27; is not KEY OP NUMBER" in text and 'aria-invalid="true"' in text
    # Another team's runs stay out whatever the filter.
    assert not set(_order(_client(cast.bob).get("/runs/?mf=val_accuracy>0").content.decode())) & {steady.pk, peaked.pk, weak.pk}
