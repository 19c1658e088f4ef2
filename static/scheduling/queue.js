// Queue page: draw each pool's utilization and fragmentation charts, and refresh the pools'
// part of the page every few seconds (the server renders it; this only swaps it in).
(function () {
  "use strict";
  var REFRESH_MS = 7000;
  var root = document.getElementById("queue-pools");
  if (!root || !window.Trainyard) { return; }

  function history(pool) {
    var el = document.getElementById("hist-" + pool);
    try { return el ? JSON.parse(el.textContent) : []; } catch (e) { return []; }
  }

  // The same form as the samples' times (UTC, "Z"), however Plotly reads a zone.
  function iso(ms) { return new Date(ms).toISOString(); }

  function draw() {
    if (typeof Plotly === "undefined") { return; }
    root.querySelectorAll("[data-chart]").forEach(function (div) {
      var rows = history(div.dataset.pool);
      var at = rows.map(function (r) { return r.at; });
      var layout = { margin: { l: 40, r: 10, t: 30, b: 30 }, height: 240, legend: { orientation: "h" },
                     xaxis: { type: "date", tickformat: "%H:%M" } };
      // A young pool has a few samples seconds apart: show at least ten minutes, so the axis does
      // not count milliseconds, and mark the points, since one sample draws no line.
      var times = at.map(function (t) { return Date.parse(t); }).filter(function (t) { return !isNaN(t); });
      if (times.length) {
        var last = Math.max.apply(null, times);
        var first = Math.min.apply(null, times);
        if (last - first < 10 * 60 * 1000) { layout.xaxis.range = [iso(last - 10 * 60 * 1000), iso(last + 30 * 1000)]; }
      }
      var mode = rows.length < 3 ? "lines+markers" : "lines";
      // Samples are counts held until the next one: steps, not slopes between them.
      var step = { shape: "hv" };
      var traces;
      if (div.dataset.chart === "utilization") {
        layout.title = { text: "Devices (last 24 h)", font: { size: 13 } };
        var most = Math.max.apply(null, [1].concat(rows.map(function (r) { return Math.max(r.total_devices || 0, r.queued_devices || 0); })));
        if (most <= 8) { layout.yaxis = { dtick: 1, rangemode: "tozero" }; }
        traces = [
          { x: at, y: rows.map(function (r) { return r.used_devices; }), name: "used", type: "scatter", mode: mode, stackgroup: "d", line: step },
          { x: at, y: rows.map(function (r) { return r.free_devices - r.stranded_devices; }), name: "free, usable", type: "scatter", mode: mode, stackgroup: "d", line: step },
          { x: at, y: rows.map(function (r) { return r.stranded_devices; }), name: "free, stranded", type: "scatter", mode: mode, stackgroup: "d", line: step },
          { x: at, y: rows.map(function (r) { return r.queued_devices; }), name: "wanted by queue", type: "scatter", mode: mode, line: { dash: "dot", shape: "hv" } }
        ];
      } else {
        layout.title = { text: "Fragmentation", font: { size: 13 } };
        traces = [
          { x: at, y: rows.map(function (r) { return r.free_devices ? r.stranded_devices / r.free_devices : 0; }), name: "stranded share of free", type: "scatter", mode: mode, line: step },
          { x: at, y: rows.map(function (r) { return r.largest_free_block; }), name: "largest free block", type: "scatter", mode: mode, line: step, yaxis: "y2" }
        ];
        // Two scales: a share on the left, a device count on the right (room kept for its ticks).
        layout.margin.r = 50;
        layout.yaxis = { tickformat: ".0%", rangemode: "tozero", title: { text: "share", font: { size: 11 } } };
        layout.yaxis2 = { overlaying: "y", side: "right", rangemode: "tozero", tickformat: "d",
                          title: { text: "devices", font: { size: 11 } } };
        // Whole devices: on a small pool let every tick be one, or "d" rounds 0.5 to a second "1".
        var biggest = Math.max.apply(null, [1].concat(rows.map(function (r) { return r.largest_free_block || 0; })));
        if (biggest <= 8) { layout.yaxis2.dtick = 1; layout.yaxis2.range = [0, biggest]; }
        layout.margin.l = 55;
      }
      if (!rows.length) {
        // A pool with no node online takes no samples: say why the chart is empty.
        var why = div.dataset.nodesReady === "0" ? "no node online in this pool" : "no samples yet";
        layout.annotations = [{ text: why, showarrow: false, xref: "paper", yref: "paper", x: 0.5, y: 0.5 }];
        // Empty axes of their own would read 00:00 00:00 ... and -100% to 400%: pin them.
        var now = Date.now();
        layout.xaxis.range = [iso(now - 10 * 60 * 1000), iso(now)];
        layout.yaxis = Object.assign(layout.yaxis || {}, { range: [0, 1], rangemode: "tozero" });
        if (layout.yaxis2) { layout.yaxis2.range = [0, 1]; }
      }
      Plotly.react(div, traces, layout, { displayModeBar: false, responsive: true });
    });
  }

  // What the page says about refreshing, and when it last did: a failed refresh keeps the last
  // good view, whose "in 40 seconds" and "last pass 5 seconds ago" were true only back then.
  var note = document.getElementById("queue-refresh");
  var noteText = note ? note.textContent : "";
  var refreshedAt = Date.now();

  var lastHtml = null;

  // The note is a polite live region: it is spoken when what it says changes (a refresh failed,
  // or works again), so it is written only then, not on every tick.
  function say(text, failed) {
    if (!note) { return; }
    if (note.textContent !== text) { note.textContent = text; }
    note.classList.toggle("refresh-failed", failed);
  }

  function clock(ms) { return new Date(ms).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" }); }

  function swap(html) {
    if (html === lastHtml) { return; }
    // Keep an open "rules" section open across refreshes, and the focus where it was.
    var open = {};
    root.querySelectorAll("section[data-pool] details[open]").forEach(function (d) { open[d.closest("section").dataset.pool] = true; });
    window.Trainyard.keepFocus(root, function () {
      root.innerHTML = html;
      root.querySelectorAll("section[data-pool] details").forEach(function (d) { if (open[d.closest("section").dataset.pool]) { d.open = true; } });
    });
    lastHtml = html;
    // The estimates in the one time format, the viewer's zone named (static/core/times.js).
    if (window.trainyardLocalizeTimes) { window.trainyardLocalizeTimes(root); }
    draw();
  }

  draw();
  // The queue moves all the time, so every tick counts as active; poll leaves a hidden tab alone
  // and waits longer after each failure, so a portal that is down is not asked every 7 seconds.
  window.Trainyard.poll({
    url: function () { return root.dataset.src; },
    active: function () { return true; },
    activeMs: REFRESH_MS,
    idleMs: REFRESH_MS,
    onText: swap,
    onOk: function () {
      refreshedAt = Date.now();
      root.dataset.refreshedAt = String(refreshedAt);
      say(noteText, false);
    },
    onError: function () {
      // The same words on every failure: the live region speaks once, not at each retry.
      say("Not refreshed since " + clock(refreshedAt) + " (signed out, or the portal cannot be reached): " +
          "showing what was current then. Trying again, less often while this lasts.", true);
    }
  });
})();
