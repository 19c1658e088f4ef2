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
  }
  ["res_pool", "res_nodes", "res_devices_per_node", "res_max_runtime_s"].forEach(function (name) {
    var el = form.elements[name];
    if (el) { el.addEventListener("input", updateCost); el.addEventListener("change", updateCost); }
  });
})();
