"""The queue page keeping itself current in Chromium: when its refreshes fail, the status line says
since when the page is old, it asks less often while the failures last and not at all while the
tab is hidden, and once a refresh works again it says so and the fresh copy (charts included) is
in place. The page and its partial are the real view's, answered through the Django test client;
only the failures are made up (a 500 for the partial's address)."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.staticfiles import finders
from django.test import Client

from apps.nodes.models import NodePool
from tests.agents.server import register
from tests.fixtures.browser import page_in_new_context
from tests.scheduling.test_django_scheduling import make

pytestmark = [pytest.mark.browser]

ORIGIN = "http://queue.test"
NOTE = "document.getElementById('queue-refresh').textContent"
# The page's own idea of whether anyone is looking, switched from the test.
VISIBILITY = """(state) => {
  Object.defineProperty(document, 'visibilityState', { configurable: true, get: () => state });
  document.dispatchEvent(new Event('visibilitychange'));
}"""


@pytest.fixture
def pool(db: Any) -> NodePool:
    return NodePool.objects.create(name="local")


def test_the_status_line_says_when_refreshes_fail_and_when_they_work_again(cast: Any, pool: NodePool, chromium: Any) -> None:
    register(pool, "n1")
    make(cast, pool, team="nlp")
    make(cast, pool, team="vision")
    web = Client()
    web.force_login(cast.alice)

    def render(path: str) -> str:
        response = web.get(path)
        assert response.status_code == 200
        return response.content.decode()

    # Rendered here rather than in the route handler: Playwright calls that from a context of its
    # own, where Django would open a second connection that cannot see this test's rows.
    page_path, partial_path = "/queue/?pool=local&all=1", "/queue/?partial=1&pool=local&all=1"
    bodies = {page_path: render(page_path), partial_path: render(partial_path)}
    failing = {"now": False}
    partials: list[str] = []

    def serve(route: Any) -> None:
        path = route.request.url[len(ORIGIN):]
        if path.startswith("/queue/?partial=1"):
            partials.append(path)
            if failing["now"]:
                route.fulfill(status=500, content_type="text/html", body="<h1>Server Error (500)</h1>")
                return
        if path in bodies:
            route.fulfill(status=200, content_type="text/html; charset=utf-8", body=bodies[path])
        elif path.startswith("/static/") and (found := finders.find(path[len("/static/"):].split("?")[0])):
            route.fulfill(status=200, path=str(found))
        else:
            route.fulfill(status=404, body="")

    with page_in_new_context(chromium) as page:
        page.route(f"{ORIGIN}/**", serve)
        page.clock.install()
        page.goto(ORIGIN + page_path)
        page.wait_for_function("() => document.getElementById('util-local').classList.contains('js-plotly-plot')")
        assert page.inner_text("#queue-refresh") == "Refreshes every 7 seconds."

        failing["now"] = True
        page.clock.run_for(8000)
        page.wait_for_function(f"() => {NOTE}.startsWith('Not refreshed since')")
        note = page.inner_text("#queue-refresh")
        assert "showing what was current then" in note, note
        assert "refresh-failed" in (page.get_attribute("#queue-refresh", "class") or "")
        assert page.locator("#queue-pools tr[data-position]").count() == 2, "a failed refresh must keep the last good view"
        assert partials == [partial_path], partials

        # After a failure the next try waits longer than the usual 7 seconds.
        page.clock.run_for(8000)
        page.wait_for_timeout(300)
        assert len(partials) == 1, partials

        # Nobody looking: nothing is fetched, however long.
        page.evaluate(VISIBILITY, "hidden")
        page.clock.run_for(120_000)
        page.wait_for_timeout(300)
        assert len(partials) == 1, partials

        # Back in view, with the portal answering again and a new run in the line: the page
        # catches up at once, says it refreshes again, and draws the fresh copy's charts.
        failing["now"] = False
        added = make(cast, pool, team="vision")
        bodies[partial_path] = render(partial_path)
        page.evaluate("document.getElementById('util-local').dataset.old = '1'")
        page.evaluate(VISIBILITY, "visible")
        page.wait_for_function(f"() => {NOTE} === 'Refreshes every 7 seconds.'")
        assert "refresh-failed" not in (page.get_attribute("#queue-refresh", "class") or "")
        assert page.locator(f'#queue-pools tr[data-run="{added.pk}"]').count() == 1
        page.wait_for_function("() => { const c = document.getElementById('util-local');"
                               " return !c.dataset.old && c.classList.contains('js-plotly-plot'); }")
        assert len(partials) == 2, partials

        # And the usual 7 seconds again.
        before = page.get_attribute("#queue-pools", "data-refreshed-at")
        page.clock.run_for(8000)
        page.wait_for_function("(before) => document.getElementById('queue-pools').dataset.refreshedAt !== before", arg=before)
        assert len(partials) == 3, partials
