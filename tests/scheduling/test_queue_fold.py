"""The queue page with a long line: a pool lists its first runs, says how many more wait, and
still lists the viewer's own runs further back at their true places; ?all=1 lists every run."""

from __future__ import annotations

import re
from typing import Any

import pytest

from apps.nodes.models import NodePool
from apps.runs.models import Run
from apps.scheduling.views import QUEUE_PAGE_ROWS
from tests.pages import page_html
from tests.scheduling.test_django_scheduling import make


@pytest.fixture
def pool(db: Any) -> NodePool:
    return NodePool.objects.create(name="local")


def _line(cast: Any, pool: NodePool, mine_at: set[int], length: int) -> dict[int, Run]:
    """`length` runs queued in order (no pass has run: the order is submission's), vision's (alice's
    team) at the positions in `mine_at`, nlp's (bob's) elsewhere, two devices each at even places."""
    return {position: make(cast, pool, team="vision" if position in mine_at else "nlp", dpn=2 if position % 2 == 0 else 1)
            for position in range(1, length + 1)}


def _page(user: Any, path: str) -> str:
    return page_html(user, path)


def _pool(html: str, name: str) -> str:
    return html.split(f'<section class="card queue-pool" data-pool="{name}">', 1)[1].split("</section>", 1)[0]


def _positions(section: str) -> list[int]:
    return [int(p) for p in re.findall(r'<tr class="[^"]*" data-position="(\d+)"', section)]


def test_a_long_queue_shows_its_head_how_many_more_and_my_runs_further_back(cast: Any, pool: NodePool) -> None:
    assert QUEUE_PAGE_ROWS == 50
    runs = _line(cast, pool, mine_at={3, 60, 62}, length=63)
    section = _pool(_page(cast.alice, "/queue/?partial=1"), "local")

    # The head, then only alice's own runs: nlp's at 61 and 63 are folded away, not listed.
    assert _positions(section) == [*range(1, 51), 60, 62]
    assert f'data-run="{runs[60].pk}"' in section and f'data-run="{runs[62].pk}"' in section
    beyond = [runs[p] for p in range(51, 64)]
    devices = sum(r.nodes * r.devices_per_node for r in beyond)
    fold = re.search(r'<tr class="fold">(.*?)</tr>', section, re.S)
    assert fold is not None, section
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", fold.group(1))).strip()
    assert text == f"… 13 more waiting runs ({devices} devices), 2 of them yours, below … Show all 63", text
    assert '<a href="/queue/?pool=local&amp;all=1"' in fold.group(1)
    # The fold sits between the head and alice's runs further back.
    assert section.index('data-position="50"') < fold.start() < section.index('data-position="60"')
    # The totals and alice's place stay those of the whole line.
    total = sum(r.nodes * r.devices_per_node for r in runs.values())
    assert f"63 waiting runs needing {total} devices" in section
    mine = section.split(f'data-run="{runs[60].pk}"', 1)[1].split("</tr>", 1)[0]
    assert "<td>60</td>" in mine and "Ahead of it: 59 runs" in mine

    # Bob, of the other team, finds his own runs further back and none of alice's.
    bobs = _pool(_page(cast.bob, "/queue/?partial=1"), "local")
    assert _positions(bobs) == [*range(1, 51), 51, 52, 53, 54, 55, 56, 57, 58, 59, 61, 63]
    assert "11 of them yours" in bobs and f'data-run="{runs[60].pk}"' not in bobs


def test_an_administrator_who_may_see_every_run_still_gets_the_short_page(cast: Any, pool: NodePool) -> None:
    """The admin sees every run's details, but only runs they submitted are theirs to follow."""
    runs = _line(cast, pool, mine_at={3, 60}, length=63)
    Run.objects.filter(pk=runs[61].pk).update(submitted_by=cast.admin)
    section = _pool(_page(cast.admin, "/queue/?partial=1"), "local")
    assert _positions(section) == [*range(1, 51), 61]
    assert "1 of them yours" in section and f'data-run="{runs[3].pk}"' in section  # details of the head: all visible


def test_show_all_lists_every_run_of_the_pool(cast: Any, pool: NodePool) -> None:
    _line(cast, pool, mine_at={60}, length=63)
    section = _pool(_page(cast.alice, "/queue/?pool=local&all=1"), "local")
    assert _positions(section) == list(range(1, 64))
    assert 'class="fold"' not in section and "Show all" not in section
    assert '<a href="/queue/?pool=local">Show the first 50 and your own</a>' in section


def test_a_queue_no_longer_than_the_head_is_shown_whole(cast: Any, pool: NodePool) -> None:
    longer = NodePool.objects.create(name="longer")
    _line(cast, pool, mine_at=set(), length=QUEUE_PAGE_ROWS)
    _line(cast, longer, mine_at=set(), length=QUEUE_PAGE_ROWS + 1)
    html = _page(cast.alice, "/queue/?partial=1")
    whole = _pool(html, "local")
    assert _positions(whole) == list(range(1, 51)) and 'class="fold"' not in whole and "Show all" not in whole
    # The same rows as with ?all=1: nothing changes for a line this short.
    assert whole == _pool(_page(cast.alice, "/queue/?partial=1&all=1"), "local")
    folded = _pool(html, "longer")
    assert _positions(folded) == list(range(1, 51)) and "… 1 more waiting run (1 device) …" in folded


def test_the_partial_refresh_keeps_the_pool_and_all_it_was_asked_for(cast: Any, pool: NodePool) -> None:
    other = NodePool.objects.create(name="other")
    _line(cast, pool, mine_at=set(), length=55)
    _line(cast, other, mine_at=set(), length=2)
    assert 'data-src="/queue/?partial=1&amp;pool=local&amp;all=1"' in _page(cast.alice, "/queue/?pool=local&all=1")
    assert 'data-src="/queue/?partial=1&amp;pool=local"' in _page(cast.alice, "/queue/?pool=local")
    assert 'data-src="/queue/?partial=1"' in _page(cast.alice, "/queue/")
    partial = _page(cast.alice, "/queue/?partial=1&all=1&pool=local")
    assert "<html" not in partial and 'data-pool="other"' not in partial
    assert _positions(_pool(partial, "local")) == list(range(1, 56))
