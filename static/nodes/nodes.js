// The Nodes page: times in the viewer's zone, the pools kept current (states, heartbeat ages,
// readings) without folding up the device tables someone opened, the fleet map's squares (their
// details on hover and on focus, the arrow keys between them), and the drain / undrain buttons
// (admins only) that POST to the nodes API.
(function () {
  "use strict";
  var errorBox = document.getElementById("node-error");
  var stamp = document.getElementById("nodes-updated");
  var tip = document.getElementById("device-tip");
  // The server writes each <time> in its own zone, named; this writes it in the viewer's, named
  // too ("Nov 25, 2026, 3:54:30 AM GMT+1"), so no time on the page is a bare clock reading.
  var WHEN = { year: "numeric", month: "short", day: "numeric", hour: "numeric", minute: "2-digit", second: "2-digit",
               timeZoneName: "short" };
  function localizeTimes(scope) {
    scope.querySelectorAll("time[datetime]").forEach(function (t) {
      t.textContent = new Date(t.getAttribute("datetime")).toLocaleString([], WHEN);
    });
  }
  function stampNow() {
    if (stamp) { stamp.textContent = "Updated " + new Date().toLocaleTimeString([], { timeZoneName: "short" }) + "."; }
  }
  function csrf() {
    var m = document.cookie.match(/(?:^|; )csrftoken=([^;]+)/);
    return m ? decodeURIComponent(m[1]) : "";
  }
  function fail(message) {
    errorBox.textContent = message;
    errorBox.hidden = false;
  }
  function clean(el) { return el ? el.textContent.replace(/\s+/g, " ").trim() : ""; }

  // --- a square's device, read from its node's table -------------------------------------------
  // The table is the page's one copy of each device's readings and run (the squares only say
  // which device and whether it is held), so a square's details are read from its row.
  function covering(row, selector) {
    // A model or run cell spans the rows of the devices that share it: the nearest one above.
    for (var r = row; r; r = r.previousElementSibling) {
      var cell = r.querySelector(selector);
      if (cell) { return cell; }
    }
    return null;
  }
  function deviceOf(square) {
    var row = document.getElementById(square.getAttribute("href").slice(1));
    if (!row) { return null; }
    var readings = row.querySelectorAll("td:not(.model):not(.run)");
    var run = covering(row, "td.run");
    var link = run && run.querySelector("a");
    return {
      row: row, name: clean(row.querySelector("th")), held: square.classList.contains("held"),
      model: clean(covering(row, "td.model")), utilization: clean(readings[0]), power: clean(readings[1]),
      run: run, runLabel: link ? clean(link) : clean(run), runMore: link ? clean(run.querySelector("a ~ .muted")) : ""
    };
  }
  function sentence(d) {
    var who = d.held ? "in use by " + d.runLabel + (d.runMore ? " (" + d.runMore + ")" : "") : "free";
    return d.name + " " + who + ". " + d.model + ". Utilization " + d.utilization + ", power " + d.power + ".";
  }
  // What a screen reader says for a square: the server wrote "gpu3 in use"; the rest is here.
  function describeSquares(scope) {
    scope.querySelectorAll(".devmap a").forEach(function (square) {
      var d = deviceOf(square);
      if (d && square.firstElementChild) { square.firstElementChild.textContent = sentence(d); }
    });
  }

  // --- the details box, on hover and on focus --------------------------------------------------
  // Hoverable (the pointer may move onto it, to its run's link), dismissed with Escape, and gone
  // when neither the square nor the box has the pointer or the focus (WCAG 1.4.13).
  var tipFor = null;
  var hideTimer = null;
  function line(parent, label, value) {
    var p = document.createElement("div");
    if (label) {
      var b = document.createElement("span");
      b.className = "muted";
      b.textContent = label + " ";
      p.appendChild(b);
    }
    if (typeof value === "string") { p.appendChild(document.createTextNode(value)); } else { p.appendChild(value); }
    parent.appendChild(p);
  }
  function showTip(square) {
    var d = deviceOf(square);
    if (!tip || !d) { return; }
    window.clearTimeout(hideTimer);
    tip.replaceChildren();
    var head = document.createElement("strong");
    head.textContent = d.name + (d.held ? " · in use" : " · free");
    line(tip, "", head);
    line(tip, "", d.model);
    line(tip, "Utilization", d.utilization);
    line(tip, "Power", d.power);
    if (d.held && d.run) {
      var run = document.createElement("span");
      d.run.childNodes.forEach(function (n) { run.appendChild(n.cloneNode(true)); });
      // A pointer convenience: the keyboard reaches the same link in the device table (Enter).
      run.querySelectorAll("a").forEach(function (a) { a.tabIndex = -1; });
      line(tip, "Run", run);
    }
    tip.style.left = "0px";  // measured where the page's edge does not squeeze it
    tip.hidden = false;
    var box = square.getBoundingClientRect();
    var width = tip.offsetWidth;
    var left = Math.max(8, Math.min(box.left, document.documentElement.clientWidth - width - 8));
    tip.style.left = (left + window.scrollX) + "px";
    tip.style.top = (box.bottom + window.scrollY + 6) + "px";
    tipFor = square.getAttribute("href");
  }
  function hideTip() {
    window.clearTimeout(hideTimer);
    if (tip) { tip.hidden = true; }
    tipFor = null;
  }
  function hideSoon() {
    window.clearTimeout(hideTimer);
    hideTimer = window.setTimeout(hideTip, 300);
  }
  function squareOf(el) { return el && el.closest ? el.closest(".devmap a") : null; }

  // --- one Tab stop per node's squares, the arrow keys between them -----------------------------
  var current = {};  // node id -> the href of the square that is its strip's Tab stop
  function rove(scope) {
    scope.querySelectorAll(".devmap").forEach(function (strip) {
      var squares = strip.querySelectorAll("a");
      var keep = current[strip.closest("[data-node]").dataset.node];
      var chosen = (keep && strip.querySelector('a[href="' + keep + '"]')) || squares[0];
      squares.forEach(function (a) { a.tabIndex = a === chosen ? 0 : -1; });
    });
  }
  function choose(square) {
    current[square.closest("[data-node]").dataset.node] = square.getAttribute("href");
    square.parentElement.querySelectorAll("a").forEach(function (a) { a.tabIndex = a === square ? 0 : -1; });
  }
  function neighbour(square, key) {
    var squares = Array.prototype.slice.call(square.parentElement.querySelectorAll("a"));
    var i = squares.indexOf(square);
    if (key === "ArrowRight") { return squares[i + 1]; }
    if (key === "ArrowLeft") { return squares[i - 1]; }
    if (key === "Home") { return squares[0]; }
    if (key === "End") { return squares[squares.length - 1]; }
    if (key !== "ArrowDown" && key !== "ArrowUp") { return null; }
    // The same place on the next (or previous) node that has devices: a column of the map.
    var strips = Array.prototype.slice.call(document.querySelectorAll("#node-pools .devmap"));
    var step = key === "ArrowDown" ? 1 : -1;
    for (var j = strips.indexOf(square.parentElement) + step; j >= 0 && j < strips.length; j += step) {
      var others = strips[j].querySelectorAll("a");
      if (others.length) { return others[Math.min(i, others.length - 1)]; }
    }
    return null;
  }

  // --- a square leads to its row --------------------------------------------------------------
  function pick(id) {
    document.querySelectorAll("#node-pools tr.picked").forEach(function (r) { r.classList.remove("picked"); });
    var row = id && document.getElementById(id);
    if (row && row.closest("#node-pools table")) { row.classList.add("picked"); }
  }

  // --- the refresh ----------------------------------------------------------------------------
  var poller = null;
  var lastHtml = null;
  var swapping = false;
  function enhance(scope) {
    localizeTimes(scope);
    describeSquares(scope);
    rove(scope);
  }
  function swap(html) {
    var doc = new DOMParser().parseFromString(html, "text/html");
    var fresh = doc.getElementById("node-pools");
    var current = document.getElementById("node-pools");
    if (!fresh || !current) { throw new Error("not the nodes page"); }
    // The server writes every table closed; the ones opened here stay open.
    current.querySelectorAll("details[open]").forEach(function (d) {
      var again = d.id && fresh.querySelector("#" + CSS.escape(d.id));
      if (again) { again.open = true; }
    });
    var copy = document.importNode(fresh, true);
    swapping = true;
    try {
      window.Trainyard.keepFocus(document.getElementById("content") || document.body, function () {
        current.replaceWith(copy);
        enhance(copy);  // in the page: a square's row is found by its id
      });
    } finally {
      swapping = false;
    }
    pick(window.location.hash.slice(1));
    // A box left open over a square shows that square's new readings, or goes if it went.
    if (tipFor) {
      var square = document.querySelector('#node-pools .devmap a[href="' + tipFor + '"]');
      if (square) { showTip(square); } else { hideTip(); }
    }
  }

  document.addEventListener("mouseover", function (event) {
    var square = squareOf(event.target);
    if (square) { showTip(square); } else if (tip && tip.contains(event.target)) { window.clearTimeout(hideTimer); }
  });
  function over(el) { return Boolean(el && (squareOf(el) || (tip && tip.contains(el)))); }
  document.addEventListener("mouseout", function (event) {
    if (!over(event.target) || over(event.relatedTarget)) { return; }
    var focused = squareOf(document.activeElement);
    if (focused && focused.getAttribute("href") === tipFor) { return; }  // the keyboard is still there
    hideSoon();
  });
  document.addEventListener("focusin", function (event) {
    var square = squareOf(event.target);
    if (!square) { return; }
    choose(square);
    if (!swapping) { showTip(square); }
  });
  document.addEventListener("focusout", function (event) {
    if (!swapping && squareOf(event.target) && !(tip && tip.matches(":hover"))) { hideTip(); }
  });
  document.addEventListener("keydown", function (event) {
    if (event.key === "Escape" && tip && !tip.hidden) { hideTip(); return; }
    var square = squareOf(event.target);
    if (!square || event.altKey || event.ctrlKey || event.metaKey || event.shiftKey) { return; }
    var next = neighbour(square, event.key);
    if (next) {
      event.preventDefault();
      next.focus();
    }
  });

  // One listener for the page: the squares and buttons are replaced with every refresh.
  document.addEventListener("click", function (event) {
    var square = squareOf(event.target);
    if (square) {
      // The link goes to the device's row: its table opens first (the browser then scrolls to it).
      var row = document.getElementById(square.getAttribute("href").slice(1));
      var folded = row && row.closest("details");
      if (folded) { folded.open = true; }
      pick(row && row.id);
      return;
    }
    var button = event.target.closest ? event.target.closest("button[data-action]") : null;
    if (!button) { return; }
    // Draining is not undone by a stray click on a busy fleet page: ask first.
    if (button.dataset.confirm && !window.confirm(button.dataset.confirm)) { return; }
    button.disabled = true;
    fetch("/api/v1/nodes/" + button.dataset.node + "/" + button.dataset.action + "/", {
      method: "POST", credentials: "same-origin",
      headers: {"X-CSRFToken": csrf(), "Accept": "application/json", "Content-Type": "application/json"}, body: "{}"
    }).then(function (resp) {
      if (resp.ok) {
        errorBox.hidden = true;
        if (poller) { poller.refresh(); } else { location.reload(); }
        return;
      }
      return resp.json().then(function (body) {
        fail((body && body.error && body.error.message) || ("HTTP " + resp.status));
      }, function () { fail("HTTP " + resp.status); }).then(function () { button.disabled = false; });
    }, function (err) {
      fail("The server did not answer: " + err);
      button.disabled = false;
    });
  });
  var pools = document.getElementById("node-pools");
  if (pools) { enhance(pools); }
  // Arrived by a link to a device's row (a square's address): its table opens, once; a refresh
  // later leaves the table as the user left it.
  var arrived = window.location.hash && document.getElementById(window.location.hash.slice(1));
  if (arrived && arrived.closest("#node-pools details")) {
    arrived.closest("details").open = true;
    arrived.scrollIntoView({ block: "center" });
  }
  pick(window.location.hash.slice(1));
  stampNow();
  if (window.Trainyard && window.Trainyard.poll) {
    poller = window.Trainyard.poll({
      url: function () { return window.location.pathname + "?partial=1"; },
      active: function () { return true; },  // heartbeat ages move on every node
      onText: function (html) {
        if (html && html !== lastHtml) { swap(html); }
        lastHtml = html;
        stampNow();
      }
    });
  }
})();
