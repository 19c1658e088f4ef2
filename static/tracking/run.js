// The run page: live metric charts (min/max bands), devices and energy, log tail with follow,
// checkpoints, attempts timeline, progress and ETA. Polls every 2 s while the run is active.
(function () {
  const T = window.Trainyard;
  const root = document.getElementById("run-page");
  if (!root) return;
  const data = JSON.parse(document.getElementById("run-data").textContent);
  const api = `/api/v1/runs/${data.run}`;
  const POLL_MS = 2000;
  let finished = data.finished;
  let logCursor = 0;
  let xAxis = "step";
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
    { dtickrange: [null, 1000], value: HOUR12 ? "%-I:%M:%S.%L %p" : "%H:%M:%S.%L" },
    { dtickrange: [1000, 60000], value: HOUR12 ? "%-I:%M:%S %p" : "%H:%M:%S" },
    { dtickrange: [60000, 86400000], value: HOUR12 ? "%-I:%M %p" : "%H:%M" },
    { dtickrange: [86400000, null], value: "%b %-d, %Y" },
  ] });
  function localizeTimes(scope) {
    scope.querySelectorAll("time[datetime]").forEach((t) => { t.textContent = when(t.getAttribute("datetime")); });
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
    const byKey = Object.fromEntries(info.keys.map((k) => [k.key, k]));
    resp.series.forEach((s, i) => {
      const xs = xAxis === "time" ? s.x.map((t) => new Date(t * 1000)) : s.x;
      const c = T.color(i);
      const traces = T.bandTraces(s, xs, s.mean.map(T.plottable), s.key, c, s.level !== "raw");
      const summary = byKey[s.key];
      const title = `${s.key} · last ${T.fmt(summary.last)} · min ${T.fmt(s.true_min)} · max ${T.fmt(s.true_max)}`;
      // What the picture says, in words: the title's figures (the chart itself is a picture).
      chartFor(s.key).setAttribute("aria-label", `Chart of ${s.key} by ${xAxis}: last ${T.fmt(summary.last)}, `
        + `lowest ${T.fmt(s.true_min)}, highest ${T.fmt(s.true_max)}.`);
      Plotly.react(chartFor(s.key), traces, {
        title: { text: title, font: { size: 13 } }, margin: { l: 50, r: 16, t: 36, b: 36 }, showlegend: false,
        xaxis: xAxis === "time" ? { title: "", ...timeAxis() } : { title: "step", type: "linear" },
        uirevision: `${s.key}-${xAxis}`,
      }, T.CONFIG);
    });
    document.getElementById("metrics-updated").textContent = `updated ${when(new Date())}`;
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
      title: { text: `Cumulative energy (${e.unit})`, font: { size: 13 } }, margin: { l: 60, r: 16, t: 36, b: 36 },
      xaxis: timeAxis(), yaxis: { rangemode: "tozero", exponentformat: "none" },
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
        traces.push({ x: xs, y: d.utilization.map((u) => (u === null ? null : u * 100)), mode: "lines", name: `${d.device} util %`,
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
    const layout = { title: { text: title, font: { size: 13 } }, margin: { l: 50, r: 50, t: 36, b: 36 }, legend: { orientation: "h" },
                     xaxis: timeAxis() };
    if (e.utilization_reported) {
      layout.yaxis = { title: "util %", range: [0, 100] };
      if (e.power_reported) layout.yaxis2 = { title: "W", overlaying: "y", side: "right", rangemode: "tozero" };
    } else {
      layout.yaxis = { title: "W", rangemode: "tozero" };
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

  function drawAttempts() {
    const attempts = data.attempts;
    if (!attempts.length || !document.getElementById("attempts-chart")) return;
    const now = new Date();
    const labels = attempts.map((a) => `#${a.number} ${a.nodes.join(",")}`.trim());
    // Dates, not ISO strings: Plotly shows strings in their own zone, the tables show local time.
    Plotly.react("attempts-chart", [{
      type: "bar", orientation: "h", y: labels, base: attempts.map((a) => new Date(a.start)),
      x: attempts.map((a) => (a.end ? new Date(a.end) : now) - new Date(a.start)),
      text: attempts.map((a) => `${a.status}${a.reason ? ": " + a.reason : ""}`), textposition: "inside",
      marker: { color: attempts.map((a) => ({ succeeded: "#66a182", failed: "#d1495b", lost: "#d1495b", preempted: "#edae49" })[a.status] || "#2f5d8a") },
      hovertemplate: "%{y}<br>%{text}<extra></extra>",
    }], { margin: { l: 110, r: 16, t: 10, b: 30 }, xaxis: timeAxis(), yaxis: { autorange: "reversed", type: "category" }, height: 60 + 34 * attempts.length },
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

  async function tick() {
    const jobs = sweep ? [refreshMetrics().then(() => (lastRun ? refreshTrials(lastRun) : null))]
      : [refreshMetrics(), refreshLogs(), refreshEnergy()];
    if (!sweep && !data.finished) jobs.push(refreshCheckpoints());  // a page that came finished has its final card
    const results = await Promise.allSettled(jobs);
    if (statusKey !== historyKey || polls % HISTORY_EVERY === 0) {
      results.push(...await Promise.allSettled([refreshHistory()]));
    }
    polls += 1;
    results.filter((r) => r.status === "rejected").forEach((r) => console.warn(r.reason));
    if (!finished) setTimeout(tick, POLL_MS);
  }

  const xSelect = document.getElementById("x-axis");
  if (xSelect) xSelect.addEventListener("change", (ev) => {
    xAxis = ev.target.value;
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

  localizeTimes(root);
  drawAttempts();
  tick();
})();
