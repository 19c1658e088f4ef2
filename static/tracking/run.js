// The run page: live metric charts (min/max bands; smoothing, log scale and one zoom for all,
// kept in the URL), devices and energy, log tail with follow, search and download, checkpoints,
// attempts timeline, start-up steps, progress and ETA. Polls every 2 s while the run is active.
(function () {
  const T = window.Trainyard;
  const root = document.getElementById("run-page");
  if (!root) return;
  const data = JSON.parse(document.getElementById("run-data").textContent);
  const api = `/api/v1/runs/${data.run}`;
  const POLL_MS = 2000;
  let finished = data.finished;
  let logCursor = 0;
  // The charts' view, from the URL (shareable) or else the viewer's last choice on any run.
  const query = new URLSearchParams(window.location.search);
  const STORE_KEY = "trainyard.runCharts";
  const stored = (() => { try { return JSON.parse(window.localStorage.getItem(STORE_KEY) || "{}"); } catch (err) { return {}; } })();
  const clampSmooth = (v) => (Number.isFinite(v) ? Math.min(0.99, Math.max(0, v)) : 0);
  const view = {
    smooth: clampSmooth(parseFloat(query.get("smooth") ?? stored.smooth ?? "0")),
    logY: (query.get("logy") ?? (stored.logY ? "1" : "0")) === "1",
    range: query.get("xmin") && query.get("xmax") ? [query.get("xmin"), query.get("xmax")] : null,
  };
  let xAxis = query.get("x") === "time" ? "time" : "step";
  // Steps are numbers; a time axis takes Plotly's date strings as they came.
  if (view.range && xAxis === "step") view.range = view.range.map(Number).every(Number.isFinite) ? view.range.map(Number) : null;
  let lastMetrics = null;  // the last series read, to redraw when a control changes
  const chartDivs = {};
  // The history is read again when the status line changes, and every HISTORY_EVERY polls for
  // events that change no status (a stop or cancel requested).
  const HISTORY_EVERY = 5;
  let statusKey = "";
  let historyKey = null;
  let polls = 0;
  // A sweep parent runs no process: no logs, checkpoints or energy of its own; its trials' table
  // is re-read from the page itself while it runs.
  const sweep = Boolean(data.sweep);
  let trialsKey = null;
  let lastRun = null;

  // One time format on the whole page, in the viewer's zone: "Nov 24, 2026, 11:20:09 PM". The
  // server writes the same pattern in its own zone into each <time>, and this rewrites them.
  const WHEN = { year: "numeric", month: "short", day: "numeric", hour: "numeric", minute: "2-digit", second: "2-digit" };
  const when = (at) => new Date(at).toLocaleString([], WHEN);
  function timeEl(iso) {
    if (!iso) return document.createTextNode("–");
    return T.el("time", { datetime: iso, title: iso }, when(iso));
  }
  // The same clock on the charts' time axes (Plotly's own is always 24-hour), as fine as the
  // ticks are apart: seconds, minutes, then days.
  const HOUR12 = new Intl.DateTimeFormat([], { hour: "numeric" }).resolvedOptions().hour12;
  // A new object per chart: Plotly writes each chart's range into its layout.
  const timeAxis = () => ({ type: "date", tickformatstops: [
    // Seconds at the finest: a tick or a hover label in milliseconds is noise on these pages.
    { dtickrange: [null, 60000], value: HOUR12 ? "%-I:%M:%S %p" : "%H:%M:%S" },
    { dtickrange: [60000, 86400000], value: HOUR12 ? "%-I:%M %p" : "%H:%M" },
    { dtickrange: [86400000, null], value: "%b %-d, %Y" },
  ], hoverformat: HOUR12 ? "%-I:%M:%S %p" : "%H:%M:%S", automargin: true });
  function localizeTimes(scope) {
    scope.querySelectorAll("time[datetime]").forEach((t) => { t.textContent = when(t.getAttribute("datetime")); });
  }

  // The current attempt's start-up (apps/tracking/startup_selectors.py): where it is while it
  // starts, and how long each step took once it has reported.
  function showStarting(s) {
    const box = document.getElementById("run-starting");
    if (!box) return;
    box.hidden = !s;
    if (!s) return;
    box.classList.toggle("is-starting", s.starting);
    document.getElementById("starting-text").textContent = s.text;
    const list = document.getElementById("start-steps");
    list.setAttribute("aria-label", `Start-up of attempt ${s.attempt}`);
    list.replaceChildren(...s.steps.map((step) => {
      const state = step.at ? "done" : s.waiting_for === step.key ? "waiting" : "todo";
      const li = T.el("li", { class: `start-step ${state}`, "data-step": step.key });
      li.appendChild(T.el("span", { class: "step-label" }, step.detail ? `${step.title} ${step.detail}` : step.title));
      li.appendChild(document.createTextNode(" "));
      li.appendChild(T.el("span", { class: "step-at" })).appendChild(timeEl(step.at));
      if (step.after_s !== null) li.appendChild(T.el("span", { class: "step-after muted" }, ` +${step.after_s.toFixed(1)} s`));
      return li;
    }));
  }

  // Mirrors apps/tracking/display.py: a dash when the run never reported steps, "done" only
  // for a run that succeeded (one that failed or was cancelled has no ETA).
  function stepsText(p) {
    if (sweep) return `${p.steps_done} of ${p.total_steps || 0} finished`;
    if (p.total_steps) return `${p.steps_done} of ${p.total_steps}`;
    return p.steps_done ? `${p.steps_done}` : "–";
  }
  function etaText(run) {
    if (run.is_finished) return run.status === "succeeded" ? "done" : "–";
    return T.duration(run.progress.eta_s);
  }

  function setStatus(run) {
    lastRun = run;
    const badge = document.getElementById("run-status");
    badge.textContent = run.status;
    badge.className = `badge status-${run.status}`;
    document.getElementById("run-reason").textContent = run.status_reason || "";
    const key = `${run.status}|${run.status_reason}`;
    // The one change worth interrupting for (politely): the run moved on. Said once, when it
    // changes; the figures that move every poll are not read out.
    if (statusKey && key !== statusKey) {
      document.getElementById("run-announce").textContent = `Run ${run.status}${run.status_reason ? ": " + run.status_reason : ""}`;
    }
    statusKey = key;
    const p = run.progress;
    if (p.fraction !== null) {
      const percent = (p.fraction * 100).toFixed(1);
      document.getElementById("progress-bar").style.width = `${percent}%`;
      document.getElementById("progress-meter").setAttribute("aria-valuenow", percent);
    }
    document.getElementById("progress-steps").textContent = stepsText(p);
    const rate = document.getElementById("progress-rate");
    if (rate) rate.textContent = p.steps_per_s ? `${p.steps_per_s.toFixed(2)} steps/s` : "–";
    document.getElementById("progress-eta").textContent = etaText(run);
    if (!sweep) {  // a sweep's cost is its trials', which the trials' refresh brings
      document.getElementById("run-cost").textContent = run.cost_text;
      document.getElementById("run-cost-label").textContent = run.is_finished ? "Cost" : "Cost so far";
    }
    showQueue(run.queue);
    if (!sweep) showStarting(run.starting);
    if (run.is_finished) {
      const form = document.getElementById("cancel-form");
      if (form) form.remove();
    }
  }

  // A queued run says where it stands and when it should start (local time), as the queue page does.
  function showQueue(q) {
    const line = document.getElementById("run-queue");
    if (!line) return;
    line.hidden = !q;
    if (!q) return;
    const clock = (iso) => new Date(iso).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
    const parts = [q.position ? `#${q.position} in line in pool ${q.pool}` : `waiting for the scheduler in pool ${q.pool}`];
    if (q.estimated_start) {
      const wait = (new Date(q.estimated_start) - new Date()) / 1000;
      let text = `estimated start ${clock(q.estimated_start)}` + (wait > 0 ? ` (in about ${T.duration(wait)})` : "");
      if (q.estimated_start_low && q.estimated_start_high) text += `, between ${clock(q.estimated_start_low)} and ${clock(q.estimated_start_high)}`;
      parts.push(text);
    }
    line.replaceChildren(document.createTextNode(parts.join(" · ") + " · "),
                         T.el("a", { href: `/queue/?pool=${encodeURIComponent(q.pool)}` }, "see the queue"));
  }

  function chartFor(key) {
    if (chartDivs[key]) return chartDivs[key];
    const none = document.getElementById("no-metrics");
    if (none) none.remove();
    const div = T.el("div", { class: "chart metric-chart", "data-key": key, id: `chart-${key.replace(/[^A-Za-z0-9_-]/g, "_")}`,
                              role: "img", "aria-label": `Chart of ${key}` });
    document.getElementById("metric-charts").appendChild(div);
    chartDivs[key] = div;
    // A new chart narrows the grid's columns: existing plots must take their new width.
    Object.values(chartDivs).forEach((d) => { if (d !== div && d.data) Plotly.Plots.resize(d); });
    return div;
  }

  async function refreshMetrics() {
    const info = await T.getJSON(`${api}/metrics/keys/`);
    setStatus(info.run);
    finished = info.run.is_finished;
    const keys = info.keys.map((k) => k.key).slice(0, 20);
    if (!keys.length) return;
    const q = new URLSearchParams({ key: keys.join(","), max_points: "500", x: xAxis });
    const resp = await T.getJSON(`${api}/metrics/?${q}`);
    lastMetrics = { info, resp };
    drawMetrics();
    document.getElementById("metrics-updated").textContent = `updated ${when(new Date())}`;
  }

  // Exponential moving average with TensorBoard's debiasing (the first points are not pulled
  // towards zero); gaps (NaN, infinities) stay gaps and do not reset it.
  function smoothed(ys, weight) {
    let last = 0, n = 0;
    return ys.map((y) => {
      if (y === null || y === undefined) return null;
      n += 1;
      last = last * weight + (1 - weight) * y;
      return last / (1 - Math.pow(weight, n));
    });
  }

  function metricTraces(s, i) {
    const xs = xAxis === "time" ? s.x.map((t) => new Date(t * 1000)) : s.x;
    const c = T.color(i), ys = s.mean.map(T.plottable);
    const traces = T.bandTraces(s, xs, ys, s.key, c, s.level !== "raw");
    if (!view.smooth) return traces;
    // The raw line stays, faint, under the smoothed one (as W&B and TensorBoard draw it).
    const raw = traces[traces.length - 1];
    raw.name = `${s.key} (raw)`;
    raw.opacity = 0.3;
    raw.mode = "lines";
    traces.forEach((t) => { if (t !== raw && t.fillcolor) t.fillcolor = T.rgba(c, 0.08); });
    traces.push({ x: xs, y: smoothed(ys, view.smooth), mode: "lines", line: { width: 2, color: c },
                  name: `${s.key} (smoothed ${view.smooth.toFixed(2)})` });
    return traces;
  }

  function xLayout() {
    const base = xAxis === "time" ? { title: "", ...timeAxis() } : { title: "step", type: "linear", automargin: true };
    return view.range ? { ...base, range: view.range.slice(), autorange: false } : { ...base, autorange: true };
  }

  function drawMetrics() {
    if (!lastMetrics) return;
    const { info, resp } = lastMetrics;
    const byKey = Object.fromEntries(info.keys.map((k) => [k.key, k]));
    resp.series.forEach((s, i) => {
      const summary = byKey[s.key];
      const title = `${s.key} · last ${T.fmt(summary.last)} · min ${T.fmt(s.true_min)} · max ${T.fmt(s.true_max)}`;
      const div = chartFor(s.key);
      // What the picture says, in words: the title's figures (the chart itself is a picture).
      div.setAttribute("aria-label", `Chart of ${s.key} by ${xAxis}${view.logY ? " (log scale)" : ""}: last ${T.fmt(summary.last)}, `
        + `lowest ${T.fmt(s.true_min)}, highest ${T.fmt(s.true_max)}.`);
      Plotly.react(div, metricTraces(s, i), {
        title: { text: title, font: { size: 13 } }, margin: { l: 50, r: 16, t: 36, b: 36 }, showlegend: false,
        xaxis: xLayout(), yaxis: { type: view.logY ? "log" : "linear", automargin: true, exponentformat: "power" },
        uirevision: `${s.key}-${xAxis}-${view.logY}`,
      }, T.CONFIG).then(() => {
        if (div.dataset.synced) return;
        div.dataset.synced = "1";
        div.on("plotly_relayout", (ev) => zoomed(div, ev));
      });
    });
  }

  // One zoom for every metric chart: a zoom (or a double-click back to the whole run) on one
  // applies to the x axes of all, and stays in the URL.
  let syncing = false;
  function zoomed(source, ev) {
    if (syncing) return;
    let range;
    if (ev["xaxis.autorange"]) range = null;
    else if (ev["xaxis.range[0]"] !== undefined) range = [ev["xaxis.range[0]"], ev["xaxis.range[1]"]];
    else if (Array.isArray(ev["xaxis.range"])) range = ev["xaxis.range"].slice();
    else return;  // a y-only zoom, a hover mode: this chart's own
    // The other charts' own echoes of the same zoom end here.
    if (JSON.stringify(range) === JSON.stringify(view.range)) return;
    view.range = range;
    saveView();
    syncing = true;
    try {
      Object.values(chartDivs).forEach((d) => {
        if (d === source || !d.data) return;
        Plotly.relayout(d, range ? { "xaxis.range": range.slice(), "xaxis.autorange": false } : { "xaxis.autorange": true });
      });
    } finally {
      syncing = false;
    }
  }

  function saveView() {
    const q = new URLSearchParams(window.location.search);
    const put = (name, value) => { if (value) q.set(name, value); else q.delete(name); };
    put("smooth", view.smooth ? String(view.smooth) : "");
    put("logy", view.logY ? "1" : "");
    put("x", xAxis === "time" ? "time" : "");
    put("xmin", view.range ? String(view.range[0]) : "");
    put("xmax", view.range ? String(view.range[1]) : "");
    const search = q.toString();
    window.history.replaceState(null, "", `${window.location.pathname}${search ? "?" + search : ""}${window.location.hash}`);
    try { window.localStorage.setItem(STORE_KEY, JSON.stringify({ smooth: view.smooth, logY: view.logY })); } catch (err) { /* private mode */ }
    const reset = document.getElementById("reset-zoom");
    if (reset) reset.hidden = !view.range;
    const out = document.getElementById("smoothing-value");
    if (out) out.textContent = view.smooth.toFixed(2);
  }

  // The energy card: the run's recorded total in the unit that fits it (the server picks it, so
  // the header and the chart's axis agree), utilization and power only where a device reports them.
  async function refreshEnergy() {
    const e = await T.getJSON(`${api}/energy/`);
    document.getElementById("run-energy").textContent = `${e.total_text}${e.estimated ? ", estimated" : ""}`;
    const note = document.getElementById("energy-note");
    const util = document.getElementById("util-chart"), energy = document.getElementById("energy-chart");
    if (!e.devices.length) {
      let text = finished ? "No energy was recorded for this run." : "No energy samples yet.";
      if (e.total_j > 0) text = `This run's total of ${e.total_text} is recorded, but no per-device samples exist for it, so there is nothing to chart.`;
      note.textContent = text;
      note.hidden = false;
      util.hidden = energy.hidden = true;
      return;
    }
    note.hidden = true;
    energy.hidden = false;
    drawUtilization(e, util);
    const xs = e.cumulative.t.map((t) => new Date(t)), ys = e.cumulative.energy_j.map((j) => j / e.unit_j);
    // Nothing was used before the first attempt started: the curve starts there at zero, so
    // a run with one sample still draws a line across its time.
    const start = data.attempts.length ? new Date(data.attempts[0].start) : null;
    if (start && start < xs[0]) { xs.unshift(start); ys.unshift(0); }
    const few = xs.length < 3;  // one or two points make no line: show them as dots too
    energy.setAttribute("aria-label",
      `Chart of this run's cumulative energy over time: ${e.total_text}${e.estimated ? ", estimated" : ""} in all.`);
    Plotly.react(energy, [{ x: xs, y: ys,
      mode: few ? "lines+markers" : "lines", fill: "tozeroy", name: e.unit, line: { color: "#66a182" } }], {
      // automargin: the axes take the room their labels need (a long energy figure, a date).
      title: { text: `Cumulative energy (${e.unit})`, font: { size: 13 } }, margin: { l: 60, r: 24, t: 36, b: 40 },
      xaxis: timeAxis(), yaxis: { rangemode: "tozero", exponentformat: "none", automargin: true },
    }, T.CONFIG);
  }

  function drawUtilization(e, div) {
    if (!e.power_reported && !e.utilization_reported) {
      if (div.data) Plotly.purge(div);
      div.hidden = false;
      div.removeAttribute("role");  // a note to read, not a picture
      div.replaceChildren(T.el("p", { class: "empty-note" }, "Utilization and power are not reported for this run's devices."));
      return;
    }
    div.hidden = false;
    div.setAttribute("role", "img");
    div.querySelectorAll(".empty-note").forEach((n) => n.remove());
    const traces = [];
    const some = (values) => values.some((v) => v !== null);
    e.devices.forEach((d, i) => {
      const xs = d.t.map((t) => new Date(t));
      if (some(d.utilization)) {
        // Percent already, as agents send it (NVML's and the CPU monitor's 0-100), like the table's.
        traces.push({ x: xs, y: d.utilization, mode: "lines", name: `${d.device} util %`,
                      line: { color: T.color(i) } });
      }
      if (some(d.power_w)) {
        traces.push({ x: xs, y: d.power_w, mode: "lines", name: `${d.device} W`, yaxis: e.utilization_reported ? "y2" : "y",
                      line: { color: T.color(i), dash: "dot" } });
      }
    });
    const both = e.utilization_reported && e.power_reported;
    const title = both ? "Utilization and power" : e.utilization_reported ? "Utilization" : "Power";
    const devices = `${e.devices.length} device${e.devices.length === 1 ? "" : "s"}`;
    div.setAttribute("aria-label", `Chart of the ${title.toLowerCase()} of this run's ${devices} over time.`);
    const layout = { title: { text: title, font: { size: 13 } }, margin: { l: 56, r: 56, t: 36, b: 40 },
                     legend: { orientation: "h", y: -0.25 }, xaxis: timeAxis() };
    if (e.utilization_reported) {
      layout.yaxis = { title: "util %", range: [0, 100], automargin: true };
      if (e.power_reported) layout.yaxis2 = { title: "W", overlaying: "y", side: "right", rangemode: "tozero", automargin: true };
    } else {
      layout.yaxis = { title: "W", rangemode: "tozero", automargin: true };
    }
    Plotly.react(div, traces, layout, T.CONFIG);
  }

  // The agent's notes of dropped output also stand above the log (the server renders the first
  // ones; templates/tracking/run_detail.html): a long log's start is trimmed from the view.
  const LOG_NOTES_SHOWN = 20;
  function showLogNote(chunk) {
    const notes = document.getElementById("log-notes");
    if (!notes || notes.querySelector(`[data-chunk="${chunk.id}"]`) || notes.children.length >= LOG_NOTES_SHOWN) return;
    const p = document.createElement("p");
    p.className = "muted";
    p.dataset.chunk = chunk.id;
    p.textContent = `Attempt ${chunk.attempt}: ${chunk.text.trim().replace(/^\[trainyard: /, "").replace(/\]$/, "")}.`;
    notes.appendChild(p);
    notes.hidden = false;
  }

  async function refreshLogs() {
    const pre = document.getElementById("log-tail");
    for (let page = 0; page < 5; page++) {
      const resp = await T.getJSON(`${api}/logs/?after=${logCursor}&limit=500`);
      resp.chunks.filter((c) => c.stream === "agent").forEach(showLogNote);
      if (resp.chunks.length) {
        if (pre.dataset.placeholder) { pre.textContent = ""; delete pre.dataset.placeholder; }
        pre.appendChild(document.createTextNode(resp.chunks.map((c) => c.text).join("")));
        // Keep the tail bounded: a long run's full log belongs in the API, not in the DOM.
        if (pre.textContent.length > 400000) pre.textContent = pre.textContent.slice(-300000);
        if (document.getElementById("log-follow").checked) pre.scrollTop = pre.scrollHeight;
      }
      logCursor = resp.next;
      if (!pre.textContent || pre.dataset.placeholder) {
        // A finished run's last lines can still arrive from its agent's spool: the note gives way.
        pre.textContent = finished ? "(no output from this run)\n" : "(no output yet)\n";
        pre.dataset.placeholder = "1";
      }
      if (!resp.more) break;
    }
  }

  // The Checkpoints card is the server's (templates/tracking/_checkpoints.html): the kept ones as
  // rows, the ones retention deleted folded into one line. It is read again while the run is
  // active, and with the deleted ones' rows while they are unfolded (only then: a long run has
  // hundreds of them).
  let checkpointsHtml = null;
  function unfolded() {
    const folded = document.getElementById("deleted-checkpoints");
    return Boolean(folded && folded.open);
  }
  async function refreshCheckpoints() {
    const open = unfolded();
    const url = `${window.location.pathname}?partial=checkpoints${open ? "&deleted=1" : ""}`;
    const resp = await fetch(url, { credentials: "same-origin" });
    if (!resp.ok || resp.redirected) throw new Error(`${url}: ${resp.status}`);
    const html = await resp.text();
    // Folded or unfolded while this was on its way: the card that reads follows that toggle.
    if (unfolded() !== open || html === checkpointsHtml) return;
    checkpointsHtml = html;
    const next = document.createElement("template");
    next.innerHTML = html.trim();
    // The fold's own <summary> is replaced as it is toggled: the focus must stay on its double.
    T.keepFocus(root, () => document.getElementById("checkpoints-card").replaceWith(next.content.firstElementChild));
  }
  // Toggle events do not bubble: caught on the way down, whichever card is in place.
  root.addEventListener("toggle", (ev) => {
    if (ev.target.id !== "deleted-checkpoints" || !ev.target.open) return;
    refreshCheckpoints().catch((err) => {
      console.warn(err);
      const rows = document.getElementById("deleted-checkpoint-rows");
      if (rows) rows.replaceChildren(note(6, "Could not read them; fold and unfold to try again."));
    });
  }, true);

  // Re-drawn on every poll while the run is active: a running attempt's bar ends at now, so the
  // axis moves with it.
  function drawAttempts() {
    const attempts = data.attempts;
    if (!attempts.length || !document.getElementById("attempts-chart")) return;
    const now = new Date();
    const labels = attempts.map((a) => `#${a.number} ${a.nodes.join(",")}`.trim());
    // At least a minute across: a run seconds old would get ticks half a second apart, which a
    // clock to the second repeats.
    const first = Math.min(...attempts.map((a) => new Date(a.start).getTime()));
    const last = Math.max(...attempts.map((a) => (a.end ? new Date(a.end) : now).getTime()));
    const pad = Math.max(60000, last - first) * 0.02;
    const range = [new Date(first - pad), new Date(Math.max(last, first + 60000) + pad)];
    // Dates, not ISO strings: Plotly shows strings in their own zone, the tables show local time.
    Plotly.react("attempts-chart", [{
      type: "bar", orientation: "h", y: labels, base: attempts.map((a) => new Date(a.start)),
      x: attempts.map((a) => (a.end ? new Date(a.end) : now) - new Date(a.start)),
      text: attempts.map((a) => `${a.status}${a.reason ? ": " + a.reason : ""}`), textposition: "inside",
      marker: { color: attempts.map((a) => ({ succeeded: "#66a182", failed: "#d1495b", lost: "#d1495b", preempted: "#edae49" })[a.status] || "#2f5d8a") },
      hovertemplate: "%{y}<br>%{text}<extra></extra>",
    }], { margin: { l: 110, r: 16, t: 10, b: 30 }, xaxis: { ...timeAxis(), range, autorange: false }, yaxis: { autorange: "reversed", type: "category", automargin: true },
    height: 60 + 34 * attempts.length },
    T.CONFIG);
  }

  // A table's one-row note when it has nothing to list.
  function note(columns, text) {
    const tr = T.el("tr");
    tr.appendChild(T.el("td", { colspan: String(columns), class: "muted" }, text));
    return tr;
  }

  // The History and Attempts cards, as the page shows them at load, kept current.
  async function refreshHistory() {
    const seen = statusKey;
    const resp = await T.getJSON(`${api}/history/`);
    historyKey = seen;
    const body = document.getElementById("history-rows");
    const rows = resp.events.map((e) => {
      const tr = T.el("tr");
      tr.appendChild(T.el("td")).appendChild(timeEl(e.at));
      [e.actor, e.what, e.detail].forEach((text) => tr.appendChild(T.el("td", {}, text)));
      return tr;
    });
    if (!rows.length) rows.push(note(4, "Nothing recorded."));
    body.replaceChildren(...rows);
    document.getElementById("history-older").textContent = resp.older
      ? ` (the latest ${resp.events.length}; older ones are in the audit log)` : "";
    data.attempts = resp.attempts;
    const attempts = document.getElementById("attempt-rows");
    if (!attempts) return;  // a sweep parent has none
    const lines = resp.attempts.map((a) => {
      const tr = T.el("tr");
      tr.appendChild(T.el("td", {}, a.number));
      tr.appendChild(T.el("td")).appendChild(T.el("span", { class: `badge status-${a.status}` }, a.status));
      tr.appendChild(T.el("td", {}, a.nodes.join(", ")));
      tr.appendChild(T.el("td")).appendChild(timeEl(a.start));
      tr.appendChild(T.el("td")).appendChild(timeEl(a.end));
      tr.appendChild(T.el("td", {}, a.reason));
      return tr;
    });
    if (!lines.length) lines.push(note(6, finished ? "It never started." : "Not started yet."));
    attempts.replaceChildren(...lines);
    drawAttempts();
  }

  // A sweep's trials, cost and energy as the server renders them, read from the page itself
  // when its progress moved (a trial finished) and now and then for the trials' own states.
  async function refreshTrials(run) {
    if (run.is_finished && data.finished) return;  // the page came finished: its table is final
    const key = `${run.status}|${run.progress.steps_done}`;
    const fresh = trialsKey === null;  // the page was just rendered with these
    const unchanged = key === trialsKey && polls % HISTORY_EVERY !== 0;
    trialsKey = key;
    if (fresh || unchanged) return;
    const resp = await fetch(window.location.pathname, { credentials: "same-origin" });
    if (!resp.ok) throw new Error(`${window.location.pathname}: ${resp.status}`);
    const doc = new DOMParser().parseFromString(await resp.text(), "text/html");
    T.keepFocus(root, () => ["sweep-trials", "run-cost", "run-energy"].forEach((id) => {
      const now = document.getElementById(id), next = doc.getElementById(id);
      if (now && next) now.replaceWith(document.importNode(next, true));
    }));
  }

  // The Lineage and Environment cards as the server renders them, read again from the page when
  // what the job and its agents reported grew (both arrive once the job runs, after the page
  // was loaded for a run that was starting).
  async function refreshLineage() {
    const env = await T.getJSON(`${api}/environment/`);
    const key = `${Object.keys(env.reported || {}).length}|${env.environments.length}`;
    if (key === data.lineage_seen) return;
    const resp = await fetch(window.location.pathname, { credentials: "same-origin" });
    if (!resp.ok) throw new Error(`${window.location.pathname}: ${resp.status}`);
    const doc = new DOMParser().parseFromString(await resp.text(), "text/html");
    T.keepFocus(root, () => ["lineage", "environment"].forEach((id) => {
      const now = document.getElementById(id), next = doc.getElementById(id);
      if (now && next) now.replaceWith(document.importNode(next, true));
    }));
    ["lineage", "environment"].forEach((id) => { const card = document.getElementById(id); if (card) localizeTimes(card); });
    data.lineage_seen = key;
  }

  async function tick() {
    const wasFinished = finished;
    const jobs = sweep ? [refreshMetrics().then(() => (lastRun ? refreshTrials(lastRun) : null))]
      : [refreshMetrics(), refreshLogs(), refreshEnergy()];
    if (!sweep && !data.finished) jobs.push(refreshCheckpoints());  // a page that came finished has its final card
    if (!sweep && searchText) jobs.push(searchMore());
    const results = await Promise.allSettled(jobs);
    if (statusKey !== historyKey || polls % HISTORY_EVERY === 0) {
      results.push(...await Promise.allSettled([refreshHistory()]));
    } else if (!finished) {
      drawAttempts();
    }
    if (!sweep && !data.finished && (polls % HISTORY_EVERY === 0 || finished !== wasFinished)) {
      results.push(...await Promise.allSettled([refreshLineage()]));
    }
    polls += 1;
    results.filter((r) => r.status === "rejected").forEach((r) => console.warn(r.reason));
    if (!finished) setTimeout(tick, POLL_MS);
  }

  const xSelect = document.getElementById("x-axis");
  if (xSelect) xSelect.value = xAxis;
  if (xSelect) xSelect.addEventListener("change", (ev) => {
    xAxis = ev.target.value;
    view.range = null;  // a step range means nothing on a time axis
    saveView();
    Object.values(chartDivs).forEach((d) => d.remove());
    Object.keys(chartDivs).forEach((k) => delete chartDivs[k]);
    refreshMetrics();
  });

  const cancel = document.getElementById("cancel-form");
  if (cancel) {
    cancel.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      if (!window.confirm("Cancel this run?")) return;
      const out = document.getElementById("cancel-result");
      const resp = await fetch(`${api}/cancel/`, { method: "POST", credentials: "same-origin",
        headers: { "X-CSRFToken": T.cookie("csrftoken"), Accept: "application/json" } });
      const body = await resp.json().catch(() => ({}));
      out.textContent = resp.ok ? "Cancellation requested." : (body.error && body.error.message) || `Failed (${resp.status})`;
      if (resp.ok) refreshHistory().catch((err) => console.warn(err));
    });
  }

  const smoothing = document.getElementById("smoothing");
  if (smoothing) {
    smoothing.value = String(view.smooth);
    smoothing.addEventListener("input", () => {
      view.smooth = clampSmooth(parseFloat(smoothing.value));
      saveView();
      drawMetrics();
    });
  }
  const logY = document.getElementById("log-y");
  if (logY) {
    logY.checked = view.logY;
    logY.addEventListener("change", () => {
      view.logY = logY.checked;
      saveView();
      drawMetrics();
    });
  }
  const resetZoom = document.getElementById("reset-zoom");
  if (resetZoom) resetZoom.addEventListener("click", () => zoomed(null, { "xaxis.autorange": true }));

  // --- log search: the server filters the whole log (it may be far longer than the tail shown);
  // while the run is active, new matching lines are added as they arrive.
  let searchText = "";
  let searchCursor = 0;
  let searchLines = 0;
  let searchSeq = 0;
  const SEARCH_SHOWN = 5000;

  function markMatches(text, needle) {
    const frag = document.createDocumentFragment();
    const lower = text.toLowerCase(), n = needle.toLowerCase();
    let at = 0;
    for (let i = lower.indexOf(n); i >= 0 && n; i = lower.indexOf(n, at)) {
      frag.appendChild(document.createTextNode(text.slice(at, i)));
      frag.appendChild(T.el("mark", {}, text.slice(i, i + n.length)));
      at = i + n.length;
    }
    frag.appendChild(document.createTextNode(text.slice(at)));
    return frag;
  }

  async function searchPage(seq) {
    const q = new URLSearchParams({ q: searchText, after: String(searchCursor) });
    const resp = await fetch(`${api}/logs/?${q}`, { credentials: "same-origin", headers: { Accept: "application/json" } });
    const body = await resp.json().catch(() => ({}));
    if (seq !== searchSeq) return null;  // the text changed while this was on its way
    if (!resp.ok) {
      const fields = (body.error && body.error.fields) || {};
      throw new Error(fields.q ? `q: ${fields.q.join(" ")}` : (body.error && body.error.message) || `search failed (${resp.status})`);
    }
    const pre = document.getElementById("log-matches");
    body.chunks.forEach((c) => {
      if (searchLines >= SEARCH_SHOWN) return;
      const lines = c.text.split("\n").filter((line) => line);
      searchLines += lines.length;
      pre.appendChild(markMatches(lines.map((line) => `${data.attempts.length > 1 ? `[${c.attempt}] ` : ""}${line}\n`).join(""), searchText));
    });
    searchCursor = body.next;
    return body.more;
  }

  function searchStatus() {
    const status = document.getElementById("log-search-status");
    const shown = searchLines >= SEARCH_SHOWN ? `the first ${SEARCH_SHOWN} ` : "";
    status.textContent = searchLines ? `${shown}${searchLines} matching line${searchLines === 1 ? "" : "s"}` : "no matching lines";
  }

  // One reader at a time per search (a poll and a new search must not read the same cursor twice).
  let searching = null;
  function searchMore() {
    if (!searching) {
      const seq = searchSeq;
      searching = (async () => {
        for (let page = 0; page < 10 && searchText && seq === searchSeq && searchLines < SEARCH_SHOWN; page++) {
          const more = await searchPage(seq);
          if (!more) break;
        }
        if (seq === searchSeq) searchStatus();
      })().finally(() => { searching = null; });
      return searching;
    }
    // A search already reads: a new one starts once it stops (it sees the text changed and ends).
    return searching.then(() => (searchText ? searchMore() : null));
  }

  async function search(text) {
    searchSeq += 1;
    searchText = text;
    searchCursor = 0;
    searchLines = 0;
    const matches = document.getElementById("log-matches"), tail = document.getElementById("log-tail");
    const status = document.getElementById("log-search-status");
    matches.replaceChildren();
    matches.hidden = !text;
    tail.hidden = Boolean(text);
    status.textContent = text ? "searching…" : "";
    status.classList.remove("error");
    if (!text) return;
    try {
      await searchMore();
    } catch (err) {
      status.textContent = err.message;
      status.classList.add("error");
      searchText = "";  // not followed while the server refuses it
    }
  }

  const searchBox = document.getElementById("log-search");
  if (searchBox) {
    let typing = null;
    searchBox.addEventListener("input", () => {
      clearTimeout(typing);
      typing = setTimeout(() => search(searchBox.value), 300);
    });
    document.getElementById("log-search-form").addEventListener("submit", (ev) => {
      ev.preventDefault();
      clearTimeout(typing);
      search(searchBox.value);
    });
  }

  saveView();
  localizeTimes(root);
  drawAttempts();
  tick();
})();
