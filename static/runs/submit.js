// Changing project or template reloads the form for it; cost follows the resource inputs.
(function () {
  "use strict";
  var form = document.getElementById("submit-form");
  if (!form) { return; }
  form.querySelectorAll("[data-reload]").forEach(function (select) {
    select.addEventListener("change", function () {
      var params = new URLSearchParams();
      params.set("project", form.elements.project.value);
      params.set("template", form.elements.template.value);
      window.location.search = params.toString();
    });
  });
  function num(name) {
    var el = form.elements[name];
    var v = el ? parseFloat(el.value) : NaN;
    return isNaN(v) ? 0 : v;
  }
  function updateCost() {
    var pool = form.elements.res_pool;
    var out = document.getElementById("expected-cost");
    if (!pool || !out || pool.selectedIndex < 0) { return; }
    var price = parseFloat(pool.options[pool.selectedIndex].dataset.price || "0");
    var cost = price * num("res_nodes") * num("res_devices_per_node") * num("res_max_runtime_s") / 3600;
    out.textContent = cost.toFixed(2);
    showShare(cost);
  }
  // What share of the project's remaining budget (after what unfinished runs hold) the cost is.
  var budget = null;
  function percent(ratio) {
    var p = 100 * ratio;
    return p > 0 && p < 1 ? "under 1%" : Math.round(p) + "%";
  }
  function showShare(cost) {
    var share = document.getElementById("budget-share");
    if (!share || !budget) { return; }
    if (!budget.budget) {
      share.textContent = "This project has no budget.";
    } else {
      var left = parseFloat(budget.remaining) - parseFloat(budget.reserved);
      var text = "Budget '" + budget.budget.name + "' has $" + Math.max(left, 0).toFixed(2) + " left";
      if (parseFloat(budget.reserved) > 0) { text += " after $" + parseFloat(budget.reserved).toFixed(2) + " held by unfinished runs"; }
      text += left > 0 ? ": this run is at most " + percent(cost / left) + " of it." : ": runs are refused until the next period.";
      share.textContent = text;
      share.classList.toggle("over-budget", cost > left);
    }
    share.hidden = false;
  }
  var shareEl = document.getElementById("budget-share");
  if (shareEl && shareEl.dataset.project) {
    fetch("/api/v1/projects/" + encodeURIComponent(shareEl.dataset.project) + "/budget/", {credentials: "same-origin",
      headers: {"Accept": "application/json"}})
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (data) { budget = data; updateCost(); })
      .catch(function () { /* the share is a hint: the submission itself is checked */ });
  }
  ["res_pool", "res_nodes", "res_devices_per_node", "res_max_runtime_s"].forEach(function (name) {
    var el = form.elements[name];
    if (el) { el.addEventListener("input", updateCost); el.addEventListener("change", updateCost); }
  });
})();
