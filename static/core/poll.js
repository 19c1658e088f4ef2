// Keeping part of a page current: fetch it again every few seconds while something on it moves
// (`active`), now and then when nothing does (something may arrive from another tab or a script),
// never while the tab is hidden (it catches up when shown again), and ever less often after
// failures (server down, signed out). The home card and the runs list share it, and every page
// that swaps in a fresh copy of a part of itself keeps the focus with keepFocus. A page that says
// how current it is passes `onError(error, failures)` and `onOk()`: told after each failed fetch
// and after each good one.
(function () {
  "use strict";
  window.Trainyard = window.Trainyard || {};
  window.Trainyard.poll = function (options) {
    var activeMs = options.activeMs || 5000;
    var idleMs = options.idleMs || 15000;
    var maxWaitMs = options.maxWaitMs || 120000;
    var timer = null;
    var busy = false;
    var failures = 0;
    var lastAt = Date.now();

    function schedule() {
      window.clearTimeout(timer);
      timer = null;
      if (document.visibilityState === "hidden") { return; }  // nobody is looking: ask when someone is
      var wait = options.active() ? activeMs : idleMs;
      if (failures) { wait = Math.min(maxWaitMs, wait * Math.pow(2, failures)); }
      timer = window.setTimeout(refresh, wait);
    }

    function refresh() {
      window.clearTimeout(timer);
      timer = null;
      if (busy || document.visibilityState === "hidden") { return; }
      busy = true;
      // The fragments carry an ETag and say no-cache: the browser revalidates, and an unchanged
      // one costs the server a 304.
      fetch(options.url(), { credentials: "same-origin", headers: { "X-Requested-With": "fetch" } })
        .then(function (resp) {
          if (!resp.ok || resp.redirected) { throw new Error(String(resp.status)); }  // a redirect: signed out
          return resp.status === 204 ? "" : resp.text();
        })
        .then(function (text) {
          options.onText(text);
          failures = 0;
          lastAt = Date.now();
          if (options.onOk) { options.onOk(); }
        })
        .catch(function (error) {
          failures += 1;  // keep the last good view; the next tick retries
          if (options.onError) { options.onError(error, failures); }
        })
        .finally(function () { busy = false; schedule(); });
    }

    document.addEventListener("visibilitychange", function () {
      if (document.visibilityState === "hidden") { window.clearTimeout(timer); timer = null; return; }
      // Back in view after a while: what the page shows may be minutes old.
      if (Date.now() - lastAt >= activeMs) { refresh(); } else { schedule(); }
    });
    schedule();
    return { refresh: refresh };
  };

  // Swapping in a fresh copy of part of the page must not take the keyboard's place away: the
  // focused element is replaced by its double, and without this the focus falls back to <body>
  // (the next Tab starts from the top, and a screen reader loses its place). `swap` replaces
  // what it likes inside `scope`; the focus then goes to the same element in the new copy: found
  // by its id, a <summary> by its <details>' place, a link by its address, a field by its name
  // and value, else the element in the same place among the focusable ones.
  var FOCUSABLE = "a[href], button, input, select, textarea, summary, [tabindex]";
  function sameOne(el) {
    if (el.id) { return "#" + CSS.escape(el.id); }
    if (el.tagName === "SUMMARY" && el.parentElement.id) { return "#" + CSS.escape(el.parentElement.id) + " > summary"; }
    var tag = el.tagName.toLowerCase();
    if (el.getAttribute("href")) { return tag + '[href="' + CSS.escape(el.getAttribute("href")) + '"]'; }
    if (el.name) { return tag + '[name="' + CSS.escape(el.name) + '"][value="' + CSS.escape(el.value || "") + '"]'; }
    return null;
  }
  window.Trainyard.keepFocus = function (scope, swap) {
    var before = document.activeElement;
    var inside = Boolean(before && before !== document.body && scope && scope.contains(before));
    var key = inside ? sameOne(before) : null;
    var place = inside ? Array.prototype.indexOf.call(scope.querySelectorAll(FOCUSABLE), before) : -1;
    var result = swap();
    if (inside && !before.isConnected) {
      var again = (key && scope.querySelector(key)) || (place >= 0 ? scope.querySelectorAll(FOCUSABLE)[place] : null);
      if (again) { again.focus({ preventScroll: true }); }
    }
    return result;
  };
})();
