// The runs card on the home and project pages: fetch the card again every few seconds while any
// run is running or waiting, so progress, places in line and estimated starts stay current, and
// now and then when none is, so a run submitted from another tab or by a script shows up. A
// hidden tab asks nothing; it catches up when it is shown again.
(function () {
  "use strict";
  var card = document.getElementById("runs-panel");
  if (!card || !card.dataset.src || !window.Trainyard) { return; }
  var lastHtml = null;

  window.Trainyard.poll({
    url: function () { return card.dataset.src; },
    active: function () { return card.querySelectorAll(".runs-active tbody tr").length > 0; },
    onText: function (html) {
      // 204 (""): no runs of yours (yet); a card kept hidden for that appears with the first one.
      if (html && html !== lastHtml) { window.Trainyard.keepFocus(card, function () { card.innerHTML = html; }); }
      lastHtml = html;
      if (html) { card.hidden = false; }
      card.dataset.refreshedAt = String(Date.now());
    }
  });
})();
