// Runs list: keep the "Compare selected" button honest about how many runs are ticked, and keep
// the rows current. The server renders the rows again (the page's own address, so its filters,
// sort and page, with ?partial=1); this swaps them in and keeps the ticks, the focus (a box, a
// run's link, the pager) and the scroll position. Often while a run on the page is queued or
// running, now and then when nothing on it moves (a run submitted elsewhere may arrive), never
// while the tab is hidden.
(function () {
  "use strict";
  var PARTS = ["runs-found", "run-rows", "runs-pager"];
  var form = document.getElementById("compare-form");
  if (!form || !window.Trainyard) { return; }
  var button = document.getElementById("compare-selected");
  var note = document.getElementById("selected-count");
  var stamp = document.getElementById("runs-updated");
  var kept = document.getElementById("kept-selection");
  // The ticks live here, not only in the rows: a ticked run can leave the page (it finished and
  // the list shows only running ones) and should still go to the comparison.
  var selected = new Set();
  var lastHtml = null;

  function boxes() { return form.querySelectorAll('#run-rows input[name="runs"]'); }

  // Ticked runs no longer in the rows go with the form as hidden fields; returns how many.
  function keepAway() {
    var shown = new Set(Array.prototype.map.call(boxes(), function (b) { return b.value; }));
    var away = Array.from(selected).filter(function (id) { return !shown.has(id); });
    kept.replaceChildren.apply(kept, away.map(function (id) {
      var input = document.createElement("input");
      input.type = "hidden";
      input.name = "runs";
      input.value = id;
      return input;
    }));
    return away.length;
  }

  function update() {
    var n = selected.size;
    var away = keepAway();
    // aria-disabled, not disabled: a disabled button drops out of the Tab order, and a keyboard
    // user would never learn why the comparison is not offered (the note it points at says).
    button.setAttribute("aria-disabled", String(n < 2 || n > 50));
    var text = n ? n + " selected" + (n < 2 ? " (pick at least 2)" : n > 50 ? " (at most 50)" : "") : "Select 2–50 runs.";
    if (away) { text += " · " + away + " of them no longer listed here"; }
    note.textContent = text;
  }

  function two(n) { return String(n).padStart(2, "0"); }

  function stampNow() {
    var now = new Date();
    stamp.textContent = "updated " + two(now.getHours()) + ":" + two(now.getMinutes()) + ":" + two(now.getSeconds());
    stamp.dataset.updatedAt = String(now.getTime());
  }

  function active() {
    var rows = document.getElementById("run-rows");
    return Boolean(rows) && Number(rows.dataset.active || "0") > 0;
  }

  function source() {
    var query = new URLSearchParams(window.location.search);
    query.set("partial", "1");
    return window.location.pathname + "?" + query.toString();
  }

  function swap(html) {
    var doc = new DOMParser().parseFromString(html, "text/html");
    if (!PARTS.every(function (id) { return doc.getElementById(id); })) { throw new Error("not the runs list"); }
    var table = document.getElementById("runs-table");
    var left = table.scrollLeft, x = window.scrollX, y = window.scrollY;
    window.Trainyard.keepFocus(document.getElementById("content") || document.body, function () {
      PARTS.forEach(function (id) { document.getElementById(id).replaceWith(document.importNode(doc.getElementById(id), true)); });
      boxes().forEach(function (b) { b.checked = selected.has(b.value); });
    });
    table.scrollLeft = left;
    window.scrollTo(x, y);
    update();
  }

  form.addEventListener("change", function (ev) {
    var box = ev.target;
    if (!box.matches('input[type="checkbox"][name="runs"]')) { return; }
    if (box.checked) { selected.add(box.value); } else { selected.delete(box.value); }
    update();
  });

  form.addEventListener("submit", function (ev) {
    if (button.getAttribute("aria-disabled") === "true") { ev.preventDefault(); }
  });

  // A page restored by the back button comes with its ticks.
  boxes().forEach(function (b) { if (b.checked) { selected.add(b.value); } });
  update();
  stampNow();
  window.Trainyard.poll({
    url: source,
    active: active,
    onText: function (html) {
      if (html !== lastHtml) { swap(html); }
      lastHtml = html;
      stampNow();
    }
  });
})();
