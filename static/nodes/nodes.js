// The Nodes page: times in the viewer's zone, the pools kept current (states, heartbeat ages,
// readings), and the drain / undrain buttons (admins only) that POST to the nodes API.
(function () {
  "use strict";
  var errorBox = document.getElementById("node-error");
  var stamp = document.getElementById("nodes-updated");
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
  var poller = null;
  var lastHtml = null;
  function swap(html) {
    var doc = new DOMParser().parseFromString(html, "text/html");
    var fresh = doc.getElementById("node-pools");
    var current = document.getElementById("node-pools");
    if (!fresh || !current) { throw new Error("not the nodes page"); }
    window.Trainyard.keepFocus(document.getElementById("content") || document.body, function () {
      current.replaceWith(document.importNode(fresh, true));
    });
    localizeTimes(document.getElementById("node-pools"));
  }
  // One listener for the page: the buttons are replaced with every refresh.
  document.addEventListener("click", function (event) {
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
  localizeTimes(document);
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
