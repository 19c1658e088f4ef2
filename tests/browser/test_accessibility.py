"""The portal as someone with a screen reader or without a mouse meets it, in real Chromium.

Every page a user of each kind opens is read from the browser's own DOM (after its scripts ran):
each control and each link or button has a name, each page has one h1 and headings in order, a
main landmark and a skip link to it, header cells that say what their column is, a text
alternative for every chart, no element that reacts only to a mouse, and text that is readable
against its background (WCAG AA). Then the keyboard: Tab reaches the buttons that matter, Enter
and Space work them, a refused form ties each error to its field, and the parts of a page that
refresh themselves leave the focus where it was.

Plain DOM checks in page.evaluate: nothing is downloaded (no axe)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.browser import login, screenshot

pytestmark = [pytest.mark.browser, pytest.mark.live]

ROOT = Path(__file__).resolve().parents[2]

# The accessible name, as far as these pages need the algorithm: aria-labelledby, aria-label,
# a <label> (for= or around the control), the content of a link or button (an image's alt, a
# hidden part left out), then title. A placeholder is no label: it goes away as one types.
NAMES = r"""
window.__a11y = (() => {
  const hiddenInside = (el) => Boolean(el.closest('[hidden], [aria-hidden="true"], template, noscript'))
    || getComputedStyle(el).display === 'none' || el.getClientRects().length === 0 && !el.closest('details:not([open])');
  const textOf = (node) => {
    if (node.nodeType === Node.TEXT_NODE) return node.nodeValue;
    if (node.nodeType !== Node.ELEMENT_NODE) return '';
    if (node.getAttribute('aria-hidden') === 'true' || getComputedStyle(node).display === 'none') return '';
    if (node.getAttribute('aria-label')) return node.getAttribute('aria-label');
    if (node.tagName === 'IMG') return node.getAttribute('alt') || '';
    if (['INPUT', 'SELECT', 'TEXTAREA'].includes(node.tagName)) return '';
    return [...node.childNodes].map(textOf).join(' ');
  };
  const clean = (s) => (s || '').replace(/\s+/g, ' ').trim();
  const byIds = (ids) => clean(ids.split(/\s+/).map((id) => document.getElementById(id)).filter(Boolean).map(textOf).join(' '));
  const name = (el) => {
    if (el.getAttribute('aria-labelledby')) { const n = byIds(el.getAttribute('aria-labelledby')); if (n) return n; }
    if (clean(el.getAttribute('aria-label'))) return clean(el.getAttribute('aria-label'));
    if (['INPUT', 'SELECT', 'TEXTAREA'].includes(el.tagName)) {
      if (['submit', 'button', 'reset'].includes(el.type)) return clean(el.value) || clean(el.title);
      const labels = clean([...(el.labels || [])].map(textOf).join(' '));
      return labels || clean(el.title);
    }
    return clean(textOf(el)) || clean(el.title);
  };
  const describe = (el) => {
    const id = el.id ? '#' + el.id : '';
    const cls = typeof el.className === 'string' && el.className ? '.' + el.className.trim().split(/\s+/).join('.') : '';
    return `<${el.tagName.toLowerCase()}${id}${cls}> ${clean(el.outerHTML).slice(0, 140)}`;
  };
  return { hiddenInside, textOf, clean, byIds, name, describe };
})();
"""

# What a screen reader or keyboard user would trip over on the page as it is now.
AUDIT = r"""() => {
  const { hiddenInside, clean, byIds, name, describe } = window.__a11y;
  const problems = [];
  const say = (what, el) => problems.push(`${what}: ${describe(el)}`);
  const shown = (el) => !hiddenInside(el);

  // Every form control has a name of its own, not a placeholder.
  for (const el of document.querySelectorAll('input, select, textarea')) {
    if (el.type === 'hidden' || !shown(el)) continue;
    if (!name(el)) say('form control without a label', el);
  }
  // Every link and button says what it does.
  const actions = 'a[href], button, [role=button], [role=link], summary, input[type=submit], input[type=button]';
  for (const el of document.querySelectorAll(actions)) {
    if (!shown(el) || el.closest('.js-plotly-plot')) continue;
    if (!name(el)) say('link or button without a name', el);
  }
  // Each error is tied to its field: the field says it is invalid and points at the message.
  for (const el of document.querySelectorAll('[aria-invalid=true]')) {
    const ids = (el.getAttribute('aria-describedby') || '') + ' ' + (el.getAttribute('aria-errormessage') || '');
    if (!byIds(ids.trim())) say('invalid field whose error is not tied to it', el);
  }
  const described = new Set([...document.querySelectorAll('[aria-describedby]')]
    .flatMap((el) => el.getAttribute('aria-describedby').split(/\s+/)));
  for (const el of document.querySelectorAll('.errorlist, .form-error')) {
    if (!shown(el) || el.closest('#submit-errors')) continue;  // the summary on top is an alert of its own
    if (!el.id || !described.has(el.id)) say('error message no field points at', el);
  }
  // One h1, and no level skipped on the way down.
  const headings = [...document.querySelectorAll('h1, h2, h3, h4, h5, h6')].filter(shown);
  const h1s = headings.filter((h) => h.tagName === 'H1');
  if (h1s.length !== 1) problems.push(`${h1s.length} h1 elements: ${h1s.map((h) => clean(h.textContent)).join(' | ')}`);
  let level = 0;
  for (const h of headings) {
    const now = Number(h.tagName[1]);
    if (now > level + 1) say(`heading skips from h${level} to h${now}`, h);
    level = now;
  }
  // Landmarks, and a skip link first in the tab order that lands in the main one.
  const mains = document.querySelectorAll('main, [role=main]');
  if (mains.length !== 1) problems.push(`${mains.length} main landmarks`);
  if (!document.querySelector('body > header, [role=banner]')) problems.push('no header landmark');
  if (document.querySelector('.mainnav') && !document.querySelector('nav .mainnav, nav.mainnav')) problems.push('menu outside a nav');
  const first = document.querySelector('body a[href], body button, body input:not([type=hidden]), body select, body textarea');
  const target = first && first.getAttribute('href') && first.getAttribute('href').startsWith('#')
    ? document.getElementById(first.getAttribute('href').slice(1)) : null;
  if (!target || !target.matches('main, [role=main]')) {
    problems.push(`no skip link to the main content first (first is ${first ? describe(first) : 'nothing'})`);
  }
  else if (!/skip/i.test(name(first))) say('skip link that does not say so', first);
  // Header cells say what their column or row is.
  for (const th of document.querySelectorAll('th')) {
    if (shown(th) && !name(th)) say('empty table header cell', th);
  }
  // A chart is pictures to a screen reader: it needs a text alternative.
  for (const el of document.querySelectorAll('.chart, .js-plotly-plot')) {
    if (!shown(el) || el.parentElement.closest('.chart, .js-plotly-plot')) continue;
    const alt = clean(el.getAttribute('aria-label')) || byIds(el.getAttribute('aria-labelledby') || '')
      || byIds(el.getAttribute('aria-describedby') || '');
    if (!alt) say('chart without a text alternative', el);
  }
  // Nothing answers only to a mouse: a pointer cursor on an element a keyboard cannot reach.
  const native = 'a[href], button, input, select, textarea, summary, label, option, [tabindex], '
    + '[role=button], [role=link], [role=tab], [role=checkbox]';
  for (const el of document.querySelectorAll('body *')) {
    if (el.closest('.js-plotly-plot, svg') || !shown(el)) continue;
    const pointer = getComputedStyle(el).cursor === 'pointer' && getComputedStyle(el.parentElement).cursor !== 'pointer';
    if ((pointer || el.hasAttribute('onclick')) && !el.matches(native) && !el.closest('a[href], button, label, summary')) {
      say('clickable element a keyboard cannot reach', el);
    }
  }
  return problems;
}"""

# WCAG AA contrast of every piece of text against what is really behind it (backgrounds of the
# element and its ancestors, layered over white): 4.5:1, or 3:1 for large text.
CONTRAST = r"""() => {
  const { hiddenInside, clean, describe } = window.__a11y;
  const parse = (s) => {
    const m = /rgba?\(([^)]+)\)/.exec(s || '');
    if (!m) return null;
    const p = m[1].split(/[\s,/]+/).filter(Boolean).map(Number);
    return [p[0], p[1], p[2], p.length > 3 ? p[3] : 1];
  };
  const over = (top, under) => [0, 1, 2].map((i) => top[i] * top[3] + under[i] * (1 - top[3])).concat(1);
  const backdrop = (el) => {
    const layers = [];
    for (let e = el; e; e = e.parentElement) {
      const c = parse(getComputedStyle(e).backgroundColor);
      if (c && c[3] > 0) { layers.push(c); if (c[3] >= 1) break; }
    }
    return layers.reverse().reduce((under, top) => over(top, under), [255, 255, 255, 1]);
  };
  const lum = (c) => {
    const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
    return 0.2126 * f(c[0]) + 0.7152 * f(c[1]) + 0.0722 * f(c[2]);
  };
  const ratio = (a, b) => { const [x, y] = [lum(a), lum(b)].sort((p, q) => q - p); return (x + 0.05) / (y + 0.05); };
  const problems = [];
  const seen = new Set();
  for (const el of document.querySelectorAll('body *')) {
    if (['SCRIPT', 'STYLE', 'OPTION', 'SELECT', 'TEXTAREA'].includes(el.tagName)) continue;
    if (el.closest('svg, .js-plotly-plot, :disabled, [aria-disabled=true]') || hiddenInside(el)) continue;
    const text = [...el.childNodes].filter((n) => n.nodeType === Node.TEXT_NODE).map((n) => n.nodeValue).join('');
    if (!clean(text)) continue;
    const style = getComputedStyle(el);
    if (style.visibility !== 'visible' || Number(style.opacity) === 0) continue;
    const rect = el.getBoundingClientRect();
    if (rect.width <= 1 || rect.height <= 1) continue;  // clipped away (a skip link until it is focused)
    const bg = backdrop(el);
    const fg = over(parse(style.color), bg);
    const size = parseFloat(style.fontSize), bold = Number(style.fontWeight) >= 700;
    const need = size >= 24 || (bold && size >= 18.66) ? 3 : 4.5;
    const got = ratio(fg, bg);
    const key = `${style.color}|${bg}|${need}`;
    if (got < need && !seen.has(key)) {
      seen.add(key);
      problems.push(`contrast ${got.toFixed(2)} < ${need} (${style.color} on rgb(${bg.slice(0, 3).map(Math.round)})): ${describe(el)}`);
    }
  }
  return problems;
}"""


def _open(page: Any, url: str) -> None:
    response = page.goto(url)
    assert response is not None and response.status == 200, f"{url}: {response and response.status}"
    page.wait_for_load_state("networkidle")
    page.evaluate(NAMES)


def _audit(page: Any, label: str) -> list[str]:
    problems = [*page.evaluate(AUDIT), *page.evaluate(CONTRAST)]
    if problems:
        screenshot(page, f"a11y-{label}")
    return [f"{label} ({page.url}): {p}" for p in problems]


def _ids(live_stack: Any) -> dict[str, Any]:
    runs = [int(r[0]) for r in live_stack.query("SELECT id FROM runs_run ORDER BY id LIMIT 3", ())]
    assert len(runs) == 3, "seed_demo made fewer than three runs"
    project = int(live_stack.query("SELECT id FROM tenants_project WHERE slug = ?", ("digits",))[0][0])
    return {"runs": runs, "project": project}


def _alice_pages(ids: dict[str, Any]) -> dict[str, str]:
    project, runs = ids["project"], ids["runs"]
    return {
        "home": "/",
        "runs": "/runs/",
        "run": f"/runs/{runs[0]}/",
        "submit": "/runs/new/",
        "compare": "/compare/?runs=" + ",".join(map(str, runs)),
        "queue": "/queue/",
        "project": f"/projects/{project}/",
        "budgets": "/budgets/",
        "tokens": "/account/tokens/",
        "secrets": f"/projects/{project}/secrets/",
    }


def test_every_page_names_its_parts_for_a_screen_reader(live_stack: Any, browser_page: Any) -> None:
    page, ids = browser_page, _ids(live_stack)
    problems: list[str] = []
    _open(page, live_stack.url + "/login/")
    problems += _audit(page, "sign-in")

    login(page, live_stack, "alice")
    for label, path in _alice_pages(ids).items():
        _open(page, live_stack.url + path)
        problems += _audit(page, label)

    page.context.clear_cookies()
    login(page, live_stack, "admin")
    _open(page, live_stack.url + "/audit/")
    problems += _audit(page, "audit")

    page.context.clear_cookies()
    login(page, live_stack, "carol")
    for label, path in {"finance": "/finance/", "finance-budgets": "/budgets/"}.items():
        _open(page, live_stack.url + path)
        problems += _audit(page, label)
    assert not problems, "\n" + "\n".join(problems)


# Where the keyboard is, and whether one can see it there.
FOCUSED = r"""() => {
  const el = document.activeElement;
  if (!el || el === document.body) return { what: 'nothing (body)', ring: false, onScreen: false };
  const style = getComputedStyle(el), box = el.getBoundingClientRect();
  const ring = (style.outlineStyle !== 'none' && parseFloat(style.outlineWidth) >= 1) || style.boxShadow !== 'none';
  return { what: window.__a11y.describe(el), ring, onScreen: box.bottom > 0 && box.top < window.innerHeight && box.width > 1 };
}"""

# The buttons and fields each page is for: Tab must get to every one of them.
MAIN_CONTROLS = {
    "home": ["main a[href^='/projects/']"],
    "runs": ["#run-filters button[type=submit]", "#compare-selected"],
    "run": ["#x-axis"],
    "submit": ["#submit-run"],
    "compare": ["#summary-table th button"],
    "queue": ["#queue-filter button[type=submit]"],
    "project": ["main a.button.primary"],
    "tokens": ["button[value=create]"],
    "secrets": ["#secret-form button[type=submit]"],
    "audit": ["main form button[type=submit]"],
    "finance": ["#filters button[type=submit]", "#budgets button[type=submit]", "#quotas button[type=submit]"],
}


def _tab_to(page: Any, selectors: list[str], limit: int = 400) -> list[str]:
    """Press Tab until each selector's element has had the focus; every stop must show a ring."""
    missing, problems, wraps = list(selectors), [], 0
    for _ in range(limit):
        if not missing:
            break
        page.keyboard.press("Tab")
        where = page.evaluate(FOCUSED)
        if where["what"] == "nothing (body)":  # past the last control, on the browser's own; next round
            wraps += 1
            if wraps > 1:
                break
            continue
        if not where["ring"]:
            problems.append(f"focus is not visible on {where['what']}")
        missing = [s for s in missing if not page.evaluate("s => document.activeElement.matches(s)", s)]
    problems += [f"Tab never reaches {s}" for s in missing]
    return problems


def _skip_to_main(page: Any) -> list[str]:
    """The first Tab lands on a visible skip link, and Enter on it takes the keyboard into <main>."""
    page.keyboard.press("Tab")
    where = page.evaluate(FOCUSED)
    if not page.evaluate("document.activeElement.matches('a.skip-link')"):
        return [f"the first Tab lands on {where['what']}, not a skip link"]
    problems = [] if where["onScreen"] and where["ring"] else [f"the focused skip link is not visible: {where}"]
    page.keyboard.press("Enter")
    if not page.evaluate("document.activeElement.matches('main')"):
        problems.append(f"Enter on the skip link leaves the focus on {page.evaluate(FOCUSED)['what']}")
    return problems


def test_tab_reaches_every_main_control_and_shows_where_it_is(live_stack: Any, browser_page: Any) -> None:
    page, ids = browser_page, _ids(live_stack)
    problems: list[str] = []

    # Sign-in puts the cursor in the username; from there Tab goes on to the password and the button.
    _open(page, live_stack.url + "/login/")
    assert page.evaluate("document.activeElement.id") == "id_username"
    problems += [f"sign-in: {p}" for p in _tab_to(page, ["#id_password", "button[type=submit]"])]

    login(page, live_stack, "alice")
    for label, path in _alice_pages(ids).items():
        _open(page, live_stack.url + path)
        problems += [f"{label}: {p}" for p in _skip_to_main(page) + _tab_to(page, MAIN_CONTROLS.get(label, []))]

    page.context.clear_cookies()
    login(page, live_stack, "admin")
    _open(page, live_stack.url + "/audit/")
    problems += [f"audit: {p}" for p in _skip_to_main(page) + _tab_to(page, MAIN_CONTROLS["audit"])]

    page.context.clear_cookies()
    login(page, live_stack, "carol")
    _open(page, live_stack.url + "/finance/")
    problems += [f"finance: {p}" for p in _skip_to_main(page) + _tab_to(page, MAIN_CONTROLS["finance"])]
    assert not problems, "\n" + "\n".join(problems)


def test_enter_and_space_work_the_controls_and_a_refused_form_says_why(live_stack: Any, browser_page: Any) -> None:
    page, ids = browser_page, _ids(live_stack)
    login(page, live_stack, "alice")

    # Compare: a column sorts from the keyboard, and the header says which way.
    _open(page, live_stack.url + "/compare/?runs=" + ",".join(map(str, ids["runs"])))
    assert page.locator("#summary-table th button").count() > 0, "the summary's columns sort only with a mouse"
    page.focus("#summary-table th[data-col=run] button")
    page.keyboard.press("Enter")
    assert page.get_attribute("#summary-table th[data-col=run]", "aria-sort") == "ascending"
    assert page.evaluate("document.activeElement.closest('th') && document.activeElement.closest('th').dataset.col") == "run"
    page.keyboard.press("Space")
    assert page.get_attribute("#summary-table th[data-col=run]", "aria-sort") == "descending"

    # Runs list: "Compare selected" stays reachable while too few runs are ticked (it says why
    # instead of going nowhere), Space ticks, and Enter compares.
    _open(page, live_stack.url + "/runs/")
    assert page.get_attribute("#compare-selected", "aria-disabled") == "true", "a disabled button is skipped by Tab"
    assert page.get_attribute("#selected-count", "aria-live") == "polite"
    page.focus("#compare-selected")
    page.keyboard.press("Enter")
    assert "/runs/" in page.url and "Select 2–50 runs." in page.inner_text("#selected-count")
    for n in (0, 1):
        page.focus(f"#run-rows input[name=runs] >> nth={n}")
        page.keyboard.press("Space")
    assert page.inner_text("#selected-count").startswith("2 selected")
    page.focus("#compare-selected")
    page.keyboard.press("Enter")
    page.wait_for_url("**/compare/?runs=*")

    # A refused run: the summary takes the focus and links to each refused field, which says it is
    # invalid and reads its own message as its description.
    _open(page, live_stack.url + "/runs/new/?template=digits-classifier")
    page.fill("#id_p_lr", "5")
    page.focus("#submit-run")
    page.keyboard.press("Enter")
    page.wait_for_selector("#submit-errors")
    page.evaluate(NAMES)
    lr = page.evaluate("""() => { const f = document.getElementById('id_p_lr');
        return { invalid: f.getAttribute('aria-invalid'), said: window.__a11y.byIds(f.getAttribute('aria-describedby') || '') }; }""")
    assert lr["invalid"] == "true" and "must be ≤ 1 (got 5)" in lr["said"], lr
    problems = [f"refused submit: {p}" for p in page.evaluate(AUDIT)]
    assert page.evaluate("document.activeElement.id") == "submit-errors"
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.getAttribute('href')") == "#id_p_lr"
    page.keyboard.press("Enter")
    assert page.evaluate("document.activeElement.id") == "id_p_lr"
    screenshot(page, "a11y-submit-refused")

    # Finance: a refused budget comes back with the cursor in the bad field, its error tied to it.
    page.context.clear_cookies()
    login(page, live_stack, "carol")
    _open(page, live_stack.url + "/finance/")
    page.fill("[aria-label='new budget amount']", "lots")
    page.focus("#budgets tr:has([aria-label='new budget amount']) button")
    page.keyboard.press("Enter")
    page.wait_for_selector("#budgets [aria-invalid=true]")
    page.wait_for_function("document.activeElement.getAttribute('aria-invalid') === 'true'")
    page.evaluate(NAMES)
    assert page.evaluate("window.__a11y.byIds(document.activeElement.getAttribute('aria-describedby') || '')"), (
        "the refused budget's field does not read its error"
    )
    problems += [f"refused budget: {p}" for p in page.evaluate(AUDIT)]
    assert not problems, "\n" + "\n".join(problems)


def test_parts_that_refresh_themselves_leave_the_focus_where_it_was(live_stack: Any, browser_page: Any) -> None:
    """The queue, the runs list, the home card and the run page swap in fresh copies of parts of
    themselves. A keyboard user on a link or a fold in such a part stays there (the focus must
    not fall back to <body>), and the change that matters is said by a polite status line."""
    page = browser_page
    token = live_stack.token("alice")
    body = {
        "project": "vision/digits",
        "template": "digits-classifier",
        "params": {},
        "tags": {"task": "digits", "dataset": "sklearn-digits", "candidate": "baseline", "family": "a11y"},
    }
    # No worker in this stack: both stay queued until cancelled below.
    followed, carded = (live_stack.api("POST", "/api/v1/runs/", body, token=token, expect=201)["id"] for _ in range(2))
    out = live_stack.manage("shell", "-c", (ROOT / "tests" / "tracking" / "run_page_setup.py").read_text())
    folded = json.loads(out.stdout.strip().splitlines()[-1])["checkpoints"]
    page.clock.install()  # time flows as usual; run_for skips ahead to the next refresh
    login(page, live_stack, "alice")
    # What has the focus: a link by its address, anything else by its id or its parent's (a <summary>).
    focused = "() => { const a = document.activeElement; return [a.tagName, a.getAttribute('href') || a.id || a.parentElement.id]; }"

    # The queue: the fold that says how a pool decides, opened from the keyboard, stays open and focused.
    page.goto(live_stack.url + "/queue/")
    assert page.get_attribute("#queue-refresh", "role") == "status"
    page.focus("#rules-local > summary")
    page.keyboard.press("Enter")
    page.clock.run_for(8000)
    page.wait_for_function("document.getElementById('queue-pools').dataset.refreshedAt")
    assert page.evaluate(focused) == ["SUMMARY", "rules-local"], "the queue's refresh took the focus away"
    assert page.evaluate("document.getElementById('rules-local').open")

    # The runs list: a run's link keeps the focus across a refresh of the rows.
    page.goto(live_stack.url + "/runs/?family=a11y")
    assert page.get_attribute("#selected-count", "aria-live") == "polite"
    page.focus(f"#run-rows a[href='/runs/{carded}/']")
    before = page.get_attribute("#runs-updated", "data-updated-at")
    page.clock.run_for(16_000)
    page.wait_for_function(f"document.getElementById('runs-updated').dataset.updatedAt !== '{before}'")
    assert page.evaluate(focused) == ["A", f"/runs/{carded}/"], "the runs list's refresh took the focus away"

    # A run page following its run: the status change is said once, politely; the focus stays put.
    page.goto(live_stack.url + f"/runs/{followed}/")
    page.focus("#x-axis")
    live_stack.api("POST", f"/api/v1/runs/{followed}/cancel/", {}, token=token)
    page.clock.run_for(3000)
    page.wait_for_function("document.getElementById('run-announce').textContent.includes('cancelled')")
    assert page.get_attribute("#run-announce", "role") == "status"
    assert page.evaluate("document.activeElement.id") == "x-axis"

    # The home card: the run's link stays focused as the run moves from "waiting" to "finished lately".
    page.goto(live_stack.url + "/")
    page.focus(f"#runs-panel a[href='/runs/{carded}/']")
    live_stack.api("POST", f"/api/v1/runs/{carded}/cancel/", {}, token=token)
    page.clock.run_for(6000)
    page.wait_for_function("() => !document.querySelector('#runs-panel .runs-active')")
    assert page.evaluate(focused) == ["A", f"/runs/{carded}/"], "the home card's refresh took the focus away"

    # Checkpoints: unfolding the deleted ones from the keyboard redraws the card, not the focus.
    page.goto(live_stack.url + f"/runs/{folded}/")
    page.focus("#deleted-checkpoints > summary")
    page.keyboard.press("Enter")
    page.wait_for_function("() => document.querySelectorAll('#deleted-checkpoint-rows tr[data-step]').length === 300")
    assert page.evaluate(focused) == ["SUMMARY", "deleted-checkpoints"], "unfolding the checkpoints took the focus away"
