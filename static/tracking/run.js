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

  function setStatus(run) {
    const badge = document.getElementById("run-status");
    badge.textContent = run.status;
    badge.className = `badge status-${run.status}`;
    document.getElementById("run-reason").textContent = run.status_reason || "";
    statusKey = `${run.status}|${run.status_reason}`;
    const p = run.progress;
    if (p.fraction !== null) document.getElementById("progress-bar").style.width = `${(p.fraction * 100).toFixed(1)}%`;
    document.getElementById("progress-steps").textContent = p.total_steps ? `${p.steps_done} of ${p.total_steps}` : `${p.steps_done}`;
    document.getElementById("progress-rate").textContent = p.steps_per_s ? `${p.steps_per_s.toFixed(2)} steps/s` : "–";
    document.getElementById("progress-eta").textContent = run.is_finished ? "done" : T.duration(p.eta_s);
    document.getElementById("run-cost").textContent = run.cost;
    document.getElementById("run-cost-label").textContent = run.is_finished ? "Cost" : "Cost so far";
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
    const div = T.el("div", { class: "chart metric-chart", "data-key": key, id: `chart-${key.replace(/[^A-Za-z0-9_-]/g, "_")}` });
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
      Plotly.react(chartFor(s.key), traces, {
        title: { text: title, font: { size: 13 } }, margin: { l: 50, r: 16, t: 36, b: 36 }, showlegend: false,
        xaxis: { title: xAxis === "time" ? "" : "step", type: xAxis === "time" ? "date" : "linear" }, uirevision: `${s.key}-${xAxis}`,
      }, T.CONFIG);
    });
    document.getElementById("metrics-updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
  }

  async function refreshEnergy() {
    const e = await T.getJSON(`${api}/energy/`);
    document.getElementById("run-energy").textContent = `${Math.round(e.total_j)} J (${e.total_kwh.toFixed(4)} kWh)${e.estimated ? " estimated" : ""}`;
    if (!e.devices.length) {
      ["util-chart", "energy-chart"].forEach((id) => { document.getElementById(id).innerHTML = `<p class="empty-note">${finished ? "No energy samples were recorded for this run." : "No energy samples yet."}</p>`; });
      return;
    }
    document.querySelectorAll("#util-chart .empty-note, #energy-chart .empty-note").forEach((n) => n.remove());
    const util = [], power = [];
    e.devices.forEach((d, i) => {
      const xs = d.t.map((t) => new Date(t));
      util.push({ x: xs, y: d.utilization.map((u) => (u === null ? null : u * 100)), mode: "lines", name: `${d.device} util %`, line: { color: T.color(i) } });
      power.push({ x: xs, y: d.power_w, mode: "lines", name: `${d.device} W`, yaxis: "y2", line: { color: T.color(i), dash: "dot" } });
    });
    Plotly.react("util-chart", [...util, ...power], {
      title: { text: "Utilization and power", font: { size: 13 } }, margin: { l: 50, r: 50, t: 36, b: 36 },
      yaxis: { title: "util %", range: [0, 100] }, yaxis2: { title: "W", overlaying: "y", side: "right" }, legend: { orientation: "h" },
    }, T.CONFIG);
    Plotly.react("energy-chart", [{ x: e.cumulative.t.map((t) => new Date(t)), y: e.cumulative.energy_j.map((j) => j / 3.6e6), mode: "lines",
      fill: "tozeroy", name: "kWh", line: { color: "#66a182" } }], {
      title: { text: "Cumulative energy (kWh)", font: { size: 13 } }, margin: { l: 60, r: 16, t: 36, b: 36 },
    }, T.CONFIG);
  }

  async function refreshLogs() {
    const pre = document.getElementById("log-tail");
    for (let page = 0; page < 5; page++) {
      const resp = await T.getJSON(`${api}/logs/?after=${logCursor}&limit=500`);
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

  async function refreshCheckpoints() {
    const resp = await T.getJSON(`${api}/checkpoints/?page_size=500`);
    const body = document.querySelector("#checkpoints tbody");
    if (!resp.checkpoints.length) return;
    body.replaceChildren(...resp.checkpoints.map((c) => {
      const tr = T.el("tr");
      tr.appendChild(T.el("td", {}, c.step));
      tr.appendChild(T.el("td", {}, c.attempt));
      tr.appendChild(T.el("td", {}, T.bytes(c.size)));
      tr.appendChild(T.el("td", { class: "mono", title: c.sha256 }, c.sha256.slice(0, 16) + "…"));
      tr.appendChild(T.el("td", { class: "mono" }, Object.entries(c.metrics).map(([k, v]) => `${k}=${T.fmt(v)}`).join("  ")));
      const td = T.el("td");
      if (c.download_url) td.appendChild(T.el("a", { href: c.download_url }, "download"));
      else td.appendChild(T.el("span", { class: "muted" }, c.deleted ? "removed" : "not uploaded"));
      tr.appendChild(td);
      return tr;
    }));
  }

  function drawAttempts() {
    const attempts = data.attempts;
    if (!attempts.length) return;
    const now = new Date();
    const labels = attempts.map((a) => `#${a.number} ${a.nodes.join(",")}`.trim());
    Plotly.react("attempts-chart", [{
      type: "bar", orientation: "h", y: labels, base: attempts.map((a) => a.start),
      x: attempts.map((a) => (a.end ? new Date(a.end) : now) - new Date(a.start)),
      text: attempts.map((a) => `${a.status}${a.reason ? ": " + a.reason : ""}`), textposition: "inside",
      marker: { color: attempts.map((a) => ({ succeeded: "#66a182", failed: "#d1495b", lost: "#d1495b", preempted: "#edae49" })[a.status] || "#2f5d8a") },
      hovertemplate: "%{y}<br>%{text}<extra></extra>",
    }], { margin: { l: 110, r: 16, t: 10, b: 30 }, xaxis: { type: "date" }, yaxis: { autorange: "reversed", type: "category" }, height: 60 + 34 * attempts.length },
    T.CONFIG);
  }

  const when = (iso) => new Date(iso).toLocaleString([], { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", second: "2-digit" });

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
      tr.appendChild(T.el("td", { class: "mono", title: e.at }, when(e.at)));
      [e.actor, e.what, e.detail].forEach((text) => tr.appendChild(T.el("td", {}, text)));
      return tr;
    });
    if (!rows.length) rows.push(note(4, "Nothing recorded."));
    body.replaceChildren(...rows);
    document.getElementById("history-older").textContent = resp.older
      ? ` (the latest ${resp.events.length}; older ones are in the audit log)` : "";
    data.attempts = resp.attempts;
    const attempts = document.getElementById("attempt-rows");
    const lines = resp.attempts.map((a) => {
      const tr = T.el("tr");
      tr.appendChild(T.el("td", {}, a.number));
      tr.appendChild(T.el("td")).appendChild(T.el("span", { class: `badge status-${a.status}` }, a.status));
      tr.appendChild(T.el("td", {}, a.nodes.join(", ")));
      tr.appendChild(T.el("td", { class: "mono" }, a.start.slice(0, 19)));
      tr.appendChild(T.el("td", { class: "mono" }, a.end ? a.end.slice(0, 19) : "–"));
      tr.appendChild(T.el("td", {}, a.reason));
      return tr;
    });
    if (!lines.length) lines.push(note(6, "Not started yet."));
    attempts.replaceChildren(...lines);
    drawAttempts();
  }

  async function tick() {
    const jobs = [refreshMetrics(), refreshLogs(), refreshCheckpoints(), refreshEnergy()];
    const results = await Promise.allSettled(jobs);
    if (statusKey !== historyKey || polls % HISTORY_EVERY === 0) {
      results.push(...await Promise.allSettled([refreshHistory()]));
    }
    polls += 1;
    results.filter((r) => r.status === "rejected").forEach((r) => console.warn(r.reason));
    if (!finished) setTimeout(tick, POLL_MS);
  }

  document.getElementById("x-axis").addEventListener("change", (ev) => {
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

  drawAttempts();
  tick();
})();
