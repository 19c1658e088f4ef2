// Drain / undrain buttons (admins only): POST to the nodes API, then show the new state.
(function () {
  "use strict";
  var errorBox = document.getElementById("node-error");
  function csrf() {
    var m = document.cookie.match(/(?:^|; )csrftoken=([^;]+)/);
    return m ? decodeURIComponent(m[1]) : "";
  }
  function fail(message) {
    errorBox.textContent = message;
    errorBox.hidden = false;
  }
  document.querySelectorAll("button[data-action]").forEach(function (button) {
    button.addEventListener("click", function () {
      // Draining is not undone by a stray click on a busy fleet page: ask first.
      if (button.dataset.confirm && !window.confirm(button.dataset.confirm)) { return; }
      button.disabled = true;
      fetch("/api/v1/nodes/" + button.dataset.node + "/" + button.dataset.action + "/", {
        method: "POST", credentials: "same-origin",
        headers: {"X-CSRFToken": csrf(), "Accept": "application/json", "Content-Type": "application/json"}, body: "{}"
      }).then(function (resp) {
        if (resp.ok) { location.reload(); return; }
        return resp.json().then(function (body) {
          fail((body && body.error && body.error.message) || ("HTTP " + resp.status));
        }, function () { fail("HTTP " + resp.status); }).then(function () { button.disabled = false; });
      }, function (err) {
        fail("The server did not answer: " + err);
        button.disabled = false;
      });
    });
  });
})();
