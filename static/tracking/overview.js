// The runs card on the home and project pages: fetch the card again every few seconds while any
// run is running or waiting, so progress, places in line and estimated starts stay current, and
// now and then when none is, so a run submitted from another tab or by a script shows up. A
// hidden tab asks nothing; it catches up when it is shown again.
(function () {
  "use strict";
  var ACTIVE_MS = 5000;
  var IDLE_MS = 15000;
  var MAX_WAIT_MS = 120000;  // after failures ask ever less often, up to this
  var card = document.getElementById("runs-panel");
  if (!card || !card.dataset.src) { return; }
  var busy = false;
  var timer = null;
  var failures = 0;
  var lastAt = Date.now();
  var lastHtml = null;

  function active() { return card.querySelectorAll(".runs-active tbody tr").length > 0; }

  function schedule() {
    window.clearTimeout(timer);
    timer = null;
    if (document.visibilityState === "hidden") { return; }
    var wait = active() ? ACTIVE_MS : IDLE_MS;
    if (failures) { wait = Math.min(MAX_WAIT_MS, wait * Math.pow(2, failures)); }
    timer = window.setTimeout(refresh, wait);
  }

  function refresh() {
    window.clearTimeout(timer);
    timer = null;
    if (busy || document.visibilityState === "hidden") { return; }
    busy = true;
    // The card has an ETag: an unchanged one costs the server a 304 (the browser revalidates).
    fetch(card.dataset.src, { credentials: "same-origin", headers: { "X-Requested-With": "fetch" } })
      .then(function (resp) {
        if (!resp.ok || resp.redirected) { throw new Error(String(resp.status)); }
        return resp.status === 204 ? "" : resp.text();
      })
      .then(function (html) {
        // 204: no runs of yours (yet); a card kept hidden for that appears with the first one.
        if (html && html !== lastHtml) { card.innerHTML = html; }
        lastHtml = html;
        if (html) { card.hidden = false; }
        failures = 0;
        lastAt = Date.now();
        card.dataset.refreshedAt = String(lastAt);
      })
      .catch(function () { failures += 1; })  // keep the last good view; the next tick retries
      .finally(function () { busy = false; schedule(); });
  }

  document.addEventListener("visibilitychange", function () {
    if (document.visibilityState === "hidden") { window.clearTimeout(timer); timer = null; return; }
    if (Date.now() - lastAt >= ACTIVE_MS) { refresh(); } else { schedule(); }
  });
  schedule();
})();
