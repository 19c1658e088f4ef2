// Changing project or template reloads the form for it, keeping what was typed; cost and the
// expected start follow the resource inputs (the start from the server's forecast: the same
// scheduler and estimator the queue uses).
// A sweep costs up to its trial count times one trial; the count comes from the server, which
// expands the space exactly as the submission will.
(function () {
  "use strict";
  var form = document.getElementById("submit-form");
  if (!form) { return; }

  // A refused form: the summary on top gets a link to each field it refused, and the focus, so a
  // screen reader starts with what went wrong and a keyboard is one Enter from the first field.
  // Each field itself says it is invalid and has its message as its description (the template).
  var summary = document.getElementById("submit-errors");
  if (summary) {
    var links = document.createElement("ul");
    links.className = "error-links";
    form.querySelectorAll("[aria-invalid=true]").forEach(function (field) {
      var target = field.tagName === "FIELDSET" ? field.querySelector("input, select, textarea") : field;
      var label = field.tagName === "FIELDSET" ? field.querySelector("legend") : (field.labels || [])[0];
      if (!target || !target.id || !label) { return; }
      var words = label.cloneNode(true);
      words.querySelectorAll(".muted").forEach(function (n) { n.remove(); });
      var ids = (field.getAttribute("aria-describedby") || "").split(/\s+/).filter(function (id) { return /-error$/.test(id); });
      var message = ids.length && document.getElementById(ids[0]) ? document.getElementById(ids[0]).textContent.trim() : "";
      var item = document.createElement("li");
      var link = document.createElement("a");
      link.href = "#" + target.id;
      link.textContent = words.textContent.replace(/\s*\*\s*$/, "").trim() + (message ? ": " + message : "");
      item.appendChild(link);
      links.appendChild(item);
    });
    if (links.children.length) { summary.appendChild(links); }
    summary.setAttribute("tabindex", "-1");
    summary.focus();
  }
  // Another project or template: the form comes back for it with what was typed so far, posted as
  // the no-script "Load" buttons post it (action=reload queues nothing); the server keeps what applies.
  form.querySelectorAll("[data-reload]").forEach(function (select) {
    select.addEventListener("change", function () {
      var action = document.createElement("input");
      action.type = "hidden";
      action.name = "action";
      action.value = "reload";
      form.appendChild(action);
      form.submit();
      // The form's data is taken by now; a page restored by the Back button must not reload on Submit.
      action.remove();
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
    var nodes = num("res_nodes"), devices = num("res_devices_per_node"), seconds = num("res_max_runtime_s");
    var breakdown = document.getElementById("cost-breakdown");
    if (nodes < 1 || devices < 1 || seconds < 1) {
      // The server names the bad field on submit; a negative cost would only confuse.
      out.textContent = "?";
      if (breakdown) { breakdown.textContent = "(" + trialWords() + " × ?)"; }
      return;
    }
    var cost = price * nodes * devices * seconds / 3600;
    if (!breakdown) {
      out.textContent = "$" + cost.toFixed(2);
      showShare(cost);
      return;
    }
    breakdown.textContent = "(" + trialWords() + " × $" + cost.toFixed(2) + ")";
    if (trials === null) {
      out.textContent = "?";
      var share = document.getElementById("budget-share");
      if (share) { share.hidden = true; }  // a share of an unknown total would be stale
      return;
    }
    out.textContent = "$" + (cost * trials).toFixed(2);
    showShare(cost * trials);
  }
  // A sweep's trial count: null while the sweep's parameters do not make one.
  var trials = form.dataset.trialsUrl && /^\d+$/.test(form.dataset.trials || "") ? parseInt(form.dataset.trials, 10) : null;
  function trialWords() {
    return trials === null ? "? trials" : trials + (trials === 1 ? " trial" : " trials");
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
      // The API's figure: already net of what unfinished runs hold, never below 0 (overspent says by how much).
      var left = parseFloat(budget.remaining);
      var over = parseFloat(budget.overspent || "0");
      var text = "Budget '" + budget.budget.name + "' has $" + left.toFixed(2) + " left";
      if (over > 0) { text += " (overspent by $" + over.toFixed(2) + ")"; }
      if (parseFloat(budget.reserved) > 0) { text += " after $" + parseFloat(budget.reserved).toFixed(2) + " held by unfinished runs"; }
      var what = form.dataset.trialsUrl ? "this sweep" : "this run";
      text += left > 0 ? ": " + what + " is at most " + percent(cost / left) + " of it." : ": runs are refused until the next period.";
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

  // "If I submit this now, when does it start?" Asked again (debounced) whenever what decides it
  // changes: pool, size, max runtime, priority, and the steps the run will train for.
  var startEl = document.getElementById("expected-start");
  var forecastUrl = form.dataset.forecast;
  var stepsName = form.dataset.stepsParam ? "p_" + form.dataset.stepsParam : "";
  var timer = null;
  var asked = 0;
  function intOf(name) {
    var el = form.elements[name];
    if (!el || !/^\d+$/.test(el.value.trim())) { return null; }
    return parseInt(el.value, 10);
  }
  function forecastBody() {
    var resources = { pool: form.elements.res_pool ? form.elements.res_pool.value : undefined };
    ["nodes", "devices_per_node", "max_runtime_s"].forEach(function (key) {
      var v = intOf("res_" + key);
      if (v !== null) { resources[key] = v; }
    });
    var params = {};
    // Every numeric parameter that parses, so a value the schema refuses (lr=5) is named here
    // as the submission would name it, never forecast as "start at once" (issue 29).
    paramNumberInputs().forEach(function (el) {
      var text = el.value.trim();
      if (/^-?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$/.test(text)) { params[el.name.slice(2)] = Number(text); }
    });
    var steps = stepsName ? intOf(stepsName) : null;
    if (steps !== null) { params[form.dataset.stepsParam] = steps; }
    return { project: form.elements.project.value, template: form.elements.template.value,
             priority: form.elements.priority ? form.elements.priority.value : "normal", params: params, resources: resources };
  }
  function paramNumberInputs() {
    return Array.prototype.filter.call(form.querySelectorAll("input[type=number][name^='p_']"), function (el) { return !el.disabled; });
  }
  function showForecast(text, bad) {
    startEl.textContent = "Expected start: " + text;
    startEl.classList.toggle("over-budget", !!bad);
  }
  function askForecast() {
    var mine = ++asked;
    var token = form.elements.csrfmiddlewaretoken ? form.elements.csrfmiddlewaretoken.value : "";
    fetch(forecastUrl, { method: "POST", credentials: "same-origin",
                         headers: { "Content-Type": "application/json", "Accept": "application/json", "X-CSRFToken": token },
                         body: JSON.stringify(forecastBody()) })
      .then(function (r) { return r.json().then(function (data) { return { ok: r.ok, data: data }; }); })
      .then(function (res) {
        if (mine !== asked) { return; }  // a newer question is on its way
        if (res.ok) { showForecast(res.data.summary, res.data.refused || (res.data.reason && res.data.reason.code === "budget")); return; }
        var fields = (res.data.error && res.data.error.fields) || {};
        var first = Object.keys(fields)[0];
        showForecast(first ? "cannot say yet: " + first + " " + [].concat(fields[first]).join("; ") : "cannot say right now.", true);
      })
      .catch(function () { if (mine === asked) { showForecast("cannot say right now (see the queue).", false); } });
  }
  function scheduleForecast() {
    window.clearTimeout(timer);
    timer = window.setTimeout(askForecast, 400);
  }
  if (startEl && forecastUrl) {
    ["res_pool", "res_nodes", "res_devices_per_node", "res_max_runtime_s", "priority", stepsName].forEach(function (name) {
      var el = name ? form.elements[name] : null;
      if (el) { el.addEventListener("input", scheduleForecast); el.addEventListener("change", scheduleForecast); }
    });
    paramNumberInputs().forEach(function (el) {
      if (el.name !== stepsName) { el.addEventListener("input", scheduleForecast); el.addEventListener("change", scheduleForecast); }
    });
    askForecast();
  }

  // Sweeps: ask the server how many trials the space makes whenever the sweep's parameters change.
  var trialsUrl = form.dataset.trialsUrl;
  var trialsAsked = 0;
  var trialsTimer = null;
  function sweepParams() {
    var params = {};
    var problem = null;
    ["strategy", "space", "max_runs", "seed", "template"].forEach(function (key) {
      var el = form.elements["p_" + key];
      if (!el || el.value.trim() === "") { return; }
      if (key === "space") {
        try { params.space = JSON.parse(el.value); } catch (e) { problem = "space is not valid JSON"; }
      } else if (key === "max_runs" || key === "seed") {
        params[key] = /^\d+$/.test(el.value.trim()) ? parseInt(el.value, 10) : el.value;
      } else {
        params[key] = el.value;
      }
    });
    return { params: params, problem: problem };
  }
  function showTrials(count, problem) {
    trials = count;
    var countEl = document.getElementById("trial-count");
    if (countEl) { countEl.textContent = count === null ? "trials" : trialWords(); }
    var problemEl = document.getElementById("trials-problem");
    if (problemEl) {
      problemEl.textContent = problem ? "The number of trials is unknown: " + problem + "." : "";
      problemEl.hidden = !problem;
    }
    updateCost();
  }
  function askTrials() {
    var mine = ++trialsAsked;
    var asked = sweepParams();
    if (asked.problem) { showTrials(null, asked.problem); return; }
    var token = form.elements.csrfmiddlewaretoken ? form.elements.csrfmiddlewaretoken.value : "";
    fetch(trialsUrl, { method: "POST", credentials: "same-origin",
                       headers: { "Content-Type": "application/json", "Accept": "application/json", "X-CSRFToken": token },
                       body: JSON.stringify({ template: form.elements.template.value, params: asked.params }) })
      .then(function (r) { return r.json().then(function (data) { return { ok: r.ok, data: data }; }); })
      .then(function (res) {
        if (mine !== trialsAsked) { return; }  // a newer question is on its way
        if (res.ok) { showTrials(res.data.trials, null); return; }
        var fields = (res.data.error && res.data.error.fields) || {};
        var first = Object.keys(fields)[0];
        showTrials(null, first ? first + ": " + [].concat(fields[first]).join("; ") : "the server could not say");
      })
      .catch(function () { if (mine === trialsAsked) { showTrials(null, "the server could not be asked"); } });
  }
  if (trialsUrl) {
    ["p_strategy", "p_space", "p_max_runs", "p_seed"].forEach(function (name) {
      var el = form.elements[name];
      if (el) {
        el.addEventListener("input", function () { window.clearTimeout(trialsTimer); trialsTimer = window.setTimeout(askTrials, 300); });
        el.addEventListener("change", function () { window.clearTimeout(trialsTimer); askTrials(); });
      }
    });
  }
})();
