// The runs card on the home and project pages: while any run is running or waiting, fetch the
// card again every few seconds so progress, places in line and estimated starts stay current.
(function () {
  "use strict";
  var REFRESH_MS = 5000;
  var card = document.getElementById("runs-panel");
  if (!card || !card.dataset.src) { return; }
  var busy = false;

  function active() { return card.querySelectorAll(".runs-active tbody tr").length > 0; }

  function refresh() {
    if (busy || document.hidden) { return; }
    busy = true;
    fetch(card.dataset.src, { credentials: "same-origin", headers: { "X-Requested-With": "fetch" } })
      .then(function (resp) { if (!resp.ok) { throw new Error(resp.status); } return resp.status === 204 ? "" : resp.text(); })
      .then(function (html) {
        if (html) { card.innerHTML = html; }
        card.dataset.refreshedAt = String(Date.now());
        // Once nothing is running or waiting there is nothing to watch: stop asking.
        if (!active()) { window.clearInterval(timer); }
      })
      .catch(function () { /* keep the last good view; the next tick retries */ })
      .finally(function () { busy = false; });
  }

  var timer = active() ? window.setInterval(refresh, REFRESH_MS) : null;
})();
