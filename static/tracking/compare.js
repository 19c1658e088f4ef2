// The comparison view. Every control writes its state to the query string (replaceState), so
// the URL is shareable: runs, keys, smooth, x, bands, metric, sort, diff; "Save view" keeps them
// under a name at a short link.
(function () {
  const T = window.Trainyard;
  const root = document.getElementById("compare-page");
  if (!root) return;
  const state = new URLSearchParams(window.location.search);
  // Each run's label and colour as the server gave them (the page's json_script): the same on
  // every chart, the legend and the tables, and the same label as the other pages give the run.
  const looks = Object.fromEntries(JSON.parse(document.getElementById("compare-runs").textContent).map((r) => [r.id, r]));
  // The metrics with the runs that logged each, those the most runs logged first (ties by name):
  // the parallel coordinates start on the first, so that as many runs as can be have a line.
  const coverage = JSON.parse(document.getElementById("compare-metrics").textContent);
  // What the page opens on where the URL says nothing (a saved view's settings, else a metric
  // that differs between the runs, and "only differences" above two runs): apps/tracking/views.py.
  const defaults = JSON.parse(document.getElementById("compare-defaults").textContent);
  const xAxis = () => state.get("x") || defaults.x;
  const onlyDiff = () => (state.has("diff") ? state.get("diff") === "1" : defaults.only_differences);
  let shownMetric = "";
  let data = null;

  function save() {
    history.replaceState(null, "", `${location.pathname}?${state.toString()}`);
  }
  function setState(k, v, dflt) {
    if (v === dflt || v === "" || v === null) state.delete(k); else state.set(k, v);
    save();
  }

  function ema(ys, w) {
    if (!w) return ys;
    let acc = 0, n = 0;
    return ys.map((y) => {
      if (y === null) return null;
      n += 1; acc = acc * w + (1 - w) * y;
      return acc / (1 - Math.pow(w, n));
    });
  }
  function runLabel(r) { return (looks[r.id] && looks[r.id].label) || r.label || `#${r.id}`; }
  function runColor(i) { const look = looks[data.runs[i].id]; return look ? look.color : T.color(i); }

  async function load() {
    const q = new URLSearchParams({ runs: root.dataset.runs, x: xAxis(), max_points: "400" });
    const keys = state.get("keys") || defaults.keys.join(",");
    if (keys) q.set("keys", keys);
    data = await T.getJSON(`/api/v1/compare/?${q}`);
    render();
  }

  function renderCharts() {
    const box = document.getElementById("compare-charts");
    box.replaceChildren();
    const w = parseFloat(state.get("smooth") || "0");
    const byTime = xAxis() === "time";
    const bands = state.get("bands") !== "0";
    if (!data.keys.length) box.appendChild(T.el("p", { class: "muted" }, "None of these runs has reported metrics."));
    // All divs first, then plots: a chart drawn before its siblings exist would keep a stale width.
    // A picture to a screen reader: its words say what it shows and where the numbers are.
    const divs = data.keys.map((key) => box.appendChild(T.el("div", { class: "chart compare-chart", "data-key": key, role: "img",
      "aria-label": `Chart of ${key} by ${byTime ? "time" : "step"}, one line per run; `
        + `the Summary table gives each run's last, lowest and highest ${key}.` })));
    data.keys.forEach((key, k) => {
      const div = divs[k];
      const traces = [];
      data.series[key].forEach((s, i) => {
        const xs = byTime ? s.x.map((t) => new Date(t * 1000)) : s.x;
        traces.push(...T.bandTraces(s, xs, ema(s.mean.map(T.plottable), w), runLabel(data.runs[i]), runColor(i), bands && s.level !== "raw"));
      });
      Plotly.react(div, traces, {
        title: { text: key, font: { size: 13 } }, margin: { l: 50, r: 16, t: 36, b: 36 }, showlegend: false,
        xaxis: { type: byTime ? "date" : "linear", title: byTime ? "" : "step" },
      }, T.CONFIG);
    });
    document.getElementById("legend").replaceChildren(...data.runs.map((r, i) => {
      const span = T.el("span", { style: "margin-right:14px" });
      span.appendChild(T.el("span", { class: "swatch", style: `background:${runColor(i)}` }));
      const a = T.el("a", { href: r.url }, runLabel(r));
      span.appendChild(a);
      return span;
    }));
  }

  function renderSummary() {
    const stats = ["last", "min", "max"];
    const cols = [{ id: "run", label: "Run" }, { id: "status", label: "Status" }];
    data.keys.forEach((k) => stats.forEach((s) => cols.push({ id: `${k}:${s}`, label: `${k} ${s}` })));
    const rows = data.runs.map((r, i) => {
      const row = { run: runLabel(r), status: r.status, _i: i };
      data.keys.forEach((k) => stats.forEach((s) => { row[`${k}:${s}`] = r.summaries[k] ? r.summaries[k][s] : null; }));
      return row;
    });
    const sort = state.get("sort") || "";
    const desc = sort.startsWith("-");
    const col = sort.replace(/^-/, "");
    if (col) {
      rows.sort((a, b) => {
        const x = T.num(a[col]), y = T.num(b[col]);
        if (x === y) return 0;
        if (x === null || x === undefined || Number.isNaN(x)) return 1;
        if (y === null || y === undefined || Number.isNaN(y)) return -1;
        return (x < y ? -1 : 1) * (desc ? -1 : 1);
      });
    }
    const table = document.getElementById("summary-table");
    const head = T.el("tr");
    cols.forEach((c) => {
      // A button in the header, so a keyboard sorts too; the header says how it is sorted.
      const th = T.el("th", { class: "sortable", "data-col": c.id, scope: "col",
                              "aria-sort": col === c.id ? (desc ? "descending" : "ascending") : "none" });
      const sort = th.appendChild(T.el("button", { type: "button", class: "sort" }, c.label));
      if (col === c.id) sort.appendChild(T.el("span", { "aria-hidden": "true" }, desc ? " ▼" : " ▲"));
      sort.addEventListener("click", () => {
        setState("sort", col === c.id && !desc ? `-${c.id}` : c.id, "");
        renderSummary();
        // The header was drawn anew: the keyboard stays on this column's button.
        table.querySelector(`th[data-col="${CSS.escape(c.id)}"] button`).focus();
      });
      head.appendChild(th);
    });
    table.tHead.replaceChildren(head);
    table.tBodies[0].replaceChildren(...rows.map((row) => {
      const tr = T.el("tr");
      cols.forEach((c) => {
        const td = T.el("td", c.id.includes(":") ? { class: "mono" } : {});
        if (c.id === "run") {
          td.appendChild(T.el("span", { class: "swatch", style: `background:${runColor(row._i)}` }));
          td.appendChild(T.el("a", { href: data.runs[row._i].url, title: row.run }, row.run));
        } else if (c.id === "status") {
          td.appendChild(T.el("span", { class: `badge status-${row.status}` }, row.status));
        } else td.textContent = T.fmt(row[c.id]);
        tr.appendChild(td);
      });
      return tr;
    }));
  }

  function renderDiff() {
    const only = onlyDiff();
    document.getElementById("only-diff").checked = only;
    const table = document.getElementById("diff-table");
    const head = T.el("tr");
    head.appendChild(T.el("th", {}, "Name"));
    data.runs.forEach((r, i) => {
      const th = head.appendChild(T.el("th"));
      th.appendChild(T.el("span", { class: "swatch", style: `background:${runColor(i)}` }));
      th.appendChild(document.createTextNode(runLabel(r)));
    });
    table.tHead.replaceChildren(head);
    const rows = [];
    [["param", data.params], ["lineage", data.lineage], ["tag", data.tags]].forEach(([kind, list]) => {
      list.forEach((row) => {
        if (only && !row.differs) return;
        const tr = T.el("tr", { class: row.differs ? "differs" : "same", "data-kind": kind, "data-name": row.name });
        tr.appendChild(T.el("td", { class: "mono" }, `${kind === "param" ? "" : kind + ": "}${row.name}`));
        row.values.forEach((v) => {
          const text = v === null || v === undefined ? "–" : typeof v === "object" ? JSON.stringify(v) : String(v);
          tr.appendChild(T.el("td", { class: "mono", title: text }, /^[0-9a-f]{40,}$/.test(text) ? text.slice(0, 12) + "…" : text));
        });
        rows.push(tr);
      });
    });
    table.tBodies[0].replaceChildren(...rows);
  }

  function renderParcoords() {
    const select = document.getElementById("pc-metric");
    const n = data.runs.length;
    const offered = coverage.filter((m) => data.keys.includes(m.key));
    const asked = state.get("metric");
    const has = (key) => offered.some((m) => m.key === key);
    const metric = has(asked) ? asked : has(defaults.metric) ? defaults.metric : (offered.length ? offered[0].key : "");
    shownMetric = metric;
    select.replaceChildren(...offered.map((m) => {
      const words = [m.runs.length < n ? `${m.runs.length} of ${n} runs` : "", m.differs || m.runs.length < 2 ? "" : "same for all"].filter(Boolean);
      const o = T.el("option", { value: m.key }, words.length ? `${m.key} (${words.join(", ")})` : m.key);
      if (m.key === metric) o.selected = true;
      return o;
    }));
    const dims = [];
    const params = data.params.filter((p) => p.differs || data.params.length <= 8);
    params.forEach((p) => {
      const vals = p.values;
      if (vals.every((v) => typeof v === "number")) {
        dims.push({ label: p.name, values: vals });
      } else {
        const cats = [...new Set(vals.map((v) => JSON.stringify(v)))];
        dims.push({ label: p.name, values: vals.map((v) => cats.indexOf(JSON.stringify(v))), tickvals: cats.map((_, i) => i), ticktext: cats });
      }
    });
    const final = data.runs.map((r) => (r.summaries[metric] ? T.plottable(r.summaries[metric].last) : null));
    if (metric) dims.push({ label: `${metric} (final)`, values: final.map((v) => (v === null ? NaN : v)) });
    // Each line in its run's colour, as on the charts above: a colour scale of one band per run,
    // and each run's value the middle of its band. The final metric is an axis of its own.
    const scale = data.runs.flatMap((r, i) => [[i / n, runColor(i)], [(i + 1) / n, runColor(i)]]);
    Plotly.react("parcoords", [{
      type: "parcoords", dimensions: dims,
      line: { color: data.runs.map((r, i) => i + 0.5), colorscale: scale, cmin: 0, cmax: n, showscale: false },
    }], { margin: { l: 60, r: 60, t: 40, b: 20 } }, T.CONFIG);
    parcoordsNote(metric, final, offered);
  }

  // Plotly draws no line for a run with no value on an axis (NaN): say whose are missing and why,
  // and which metrics are not offered at all.
  function parcoordsNote(metric, final, offered) {
    const lines = [];
    const labels = (runs) => runs.map(runLabel).join(", ");
    const never = data.runs.filter((r) => !r.summaries[metric]);
    const unplottable = data.runs.filter((r, i) => r.summaries[metric] && final[i] === null);
    if (metric && never.length) {
      lines.push(`No line for ${labels(never)}: ${never.length === 1 ? "it" : "they"} logged no ${metric}.`);
    }
    if (unplottable.length) {
      lines.push(`No line for ${unplottable.map((r) => `${runLabel(r)} (last ${metric} ${r.summaries[metric].last})`).join(", ")}: `
                 + "a value that is not a finite number cannot be drawn.");
    }
    const left = coverage.length - offered.length;
    if (left) lines.push(`${left} more metric${left === 1 ? " is" : "s are"} not offered: the comparison shows ${offered.length}.`);
    const note = document.getElementById("parcoords-note");
    note.textContent = lines.join(" ");
    note.hidden = !lines.length;
  }

  function render() {
    document.getElementById("smoothing").value = state.get("smooth") || "0";
    document.getElementById("smoothing-value").textContent = parseFloat(state.get("smooth") || "0").toFixed(2);
    document.getElementById("x-axis").value = xAxis();
    document.getElementById("bands").checked = state.get("bands") !== "0";
    renderCharts();
    renderSummary();
    renderParcoords();
    renderDiff();
  }

  document.getElementById("smoothing").addEventListener("input", (ev) => { setState("smooth", ev.target.value, "0"); render(); });
  document.getElementById("x-axis").addEventListener("change", (ev) => { setState("x", ev.target.value, defaults.x); load(); });
  document.getElementById("bands").addEventListener("change", (ev) => { setState("bands", ev.target.checked ? "" : "0", ""); renderCharts(); });
  document.getElementById("pc-metric").addEventListener("change", (ev) => { setState("metric", ev.target.value, ""); renderParcoords(); });
  document.getElementById("only-diff").addEventListener("change", (ev) => {
    setState("diff", ev.target.checked ? "1" : "0", defaults.only_differences ? "1" : "0");
    renderDiff();
  });

  // Saved views: the page's state under a name in the first run's project, at a link the team
  // can open (/compare/v/<id>/); listed under the page, the viewer's own with a delete button.
  const saveForm = document.getElementById("save-view");
  const token = () => saveForm.elements.csrfmiddlewaretoken.value;
  async function send(method, url, body) {
    const resp = await fetch(url, { method, credentials: "same-origin", body: body ? JSON.stringify(body) : undefined,
      headers: { "X-CSRFToken": token(), Accept: "application/json", "Content-Type": "application/json" } });
    const reply = resp.status === 204 ? {} : await resp.json().catch(() => ({}));
    if (!resp.ok) {
      const err = reply.error || {};
      const fields = Object.entries(err.fields || {}).map(([k, v]) => `${k}: ${v.join(" ")}`);
      throw new Error(fields.length ? fields.join("; ") : err.message || `failed (${resp.status})`);
    }
    return reply;
  }
  function viewItem(v) {
    const li = T.el("li", { "data-view": v.id });
    li.appendChild(T.el("a", { href: v.url }, v.name));
    li.appendChild(T.el("span", { class: "muted" }, `${v.project_slug} · ${v.runs.length} runs${v.created_by ? ` · by ${v.created_by}` : ""}`));
    const del = li.appendChild(T.el("button", { type: "button", class: "link-button delete-view", "data-view": v.id,
                                                "aria-label": `Delete saved view ${v.name}` }, "delete"));
    del.addEventListener("click", () => deleteView(del));
    return li;
  }
  async function deleteView(button) {
    if (!window.confirm("Delete this saved view? Its link stops working.")) return;
    try {
      await send("DELETE", `/api/v1/compare/views/${button.dataset.view}/`);
      button.closest("li").remove();
      document.getElementById("no-saved-views").hidden = document.querySelectorAll("#saved-views li").length > 0;
    } catch (err) { document.getElementById("save-view-result").textContent = `Not deleted: ${err.message}`; }
  }
  document.querySelectorAll("#saved-views .delete-view").forEach((b) => b.addEventListener("click", () => deleteView(b)));
  saveForm.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const out = document.getElementById("save-view-result");
    const keys = state.get("keys") ? state.get("keys").split(",") : defaults.keys;
    try {
      const v = await send("POST", "/api/v1/compare/views/", { name: saveForm.elements.name.value, runs: root.dataset.runs, keys,
        metric: shownMetric, only_differences: onlyDiff(), x: xAxis() });
      out.replaceChildren(document.createTextNode("Saved: "), T.el("a", { href: v.url, id: "saved-view-link" }, `${location.origin}${v.url}`));
      document.getElementById("saved-views").prepend(viewItem(v));
      document.getElementById("no-saved-views").hidden = true;
    } catch (err) { out.textContent = `Not saved: ${err.message}`; }
  });
  load().catch((err) => { document.getElementById("compare-charts").textContent = `Could not load the comparison: ${err.message}`; });
})();
