// One time format on every page (issue 29): a server-rendered <time class="when" datetime="...">
// (written "2026-11-26 21:30 UTC" for pages read without scripts) is rewritten in the viewer's
// zone, named, as the run page, nodes page and bell write theirs: "Nov 26, 2026, 9:30:00 PM UTC".
(function () {
  "use strict";
  var WHEN = { year: "numeric", month: "short", day: "numeric", hour: "numeric", minute: "2-digit", second: "2-digit",
               timeZoneName: "short" };
  function localize(scope) {
    (scope || document).querySelectorAll("time.when[datetime]").forEach(function (t) {
      var at = new Date(t.getAttribute("datetime"));
      if (isNaN(at.getTime())) { return; }
      if (!t.title) { t.title = t.getAttribute("datetime"); }
      t.textContent = at.toLocaleString([], WHEN);
    });
  }
  window.trainyardLocalizeTimes = localize;
  if (document.readyState === "loading") { document.addEventListener("DOMContentLoaded", function () { localize(); }); }
  else { localize(); }
})();
