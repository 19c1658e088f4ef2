// A sweep's trials (templates/tracking/_sweep_trials.html): the table sorts by any column, and a
// parallel-coordinates chart runs from each trial's parameters to its final objective metric,
// the best trial's line drawn thick in its own colour. run.js swaps the card for a fresh one as
// trials finish; an observer draws the new one.
(function () {
  if (window.TrainyardSweep) return;  // the card's script tag, read again with a fresh card
  window.TrainyardSweep = true;
  const T = window.Trainyard;
  const BEST = "#b3263a", OTHER = "#8fa9c4";
  let sortState = { col: -1, desc: false };

  function cellValue(td) {
    const text = td.textContent.replace(/\s*best\s*$/, "").trim();
    const n = Number(text);
    return text !== "" && text !== "–" && !Number.isNaN(n) ? n : text;
  }

  function sortBy(table, col, desc) {
    const body = table.tBodies[0];
    const rows = [...body.rows].filter((r) => r.dataset.run);
    rows.sort((a, b) => {
      const x = cellValue(a.cells[col]), y = cellValue(b.cells[col]);
      if (x === y) return 0;
      if (x === "–") return 1;  // no value last, whichever way
      if (y === "–") return -1;
      const order = typeof x === "number" && typeof y === "number" ? x - y : String(x).localeCompare(String(y));
      return desc ? -order : order;
    });
    body.append(...rows);
    [...table.tHead.rows[0].cells].forEach((th, i) => {
      th.setAttribute("aria-sort", i === col ? (desc ? "descending" : "ascending") : "none");
      const mark = th.querySelector(".sort-mark");
      if (mark) mark.textContent = i === col ? (desc ? " ▼" : " ▲") : "";
    });
  }

  function makeSortable(table) {
    [...table.tHead.rows[0].cells].forEach((th, i) => {
      th.classList.add("sortable");
      th.setAttribute("aria-sort", "none");
      const button = T.el("button", { type: "button", class: "sort" }, th.textContent);
      button.appendChild(T.el("span", { class: "sort-mark", "aria-hidden": "true" }));
      th.replaceChildren(button);
      button.addEventListener("click", () => {
        sortState = { col: i, desc: sortState.col === i ? !sortState.desc : false };
        sortBy(table, sortState.col, sortState.desc);
      });
    });
    if (sortState.col >= 0) sortBy(table, sortState.col, sortState.desc);
  }

  function drawChart(chart) {
    const div = document.getElementById("sweep-parcoords");
    if (!div || !window.Plotly) return;
    // The best trial last, so its line is drawn over the others.
    const trials = [...chart.trials].sort((a, b) => Number(a.best) - Number(b.best));
    const dims = chart.param_names.map((name, k) => {
      const vals = trials.map((t) => t.values[k]);
      if (vals.every((v) => typeof v === "number")) {
        // A learning rate of 0.1, 0.01, 0.001 on a linear axis crowds all but one at the bottom.
        const lo = Math.min(...vals), hi = Math.max(...vals);
        if (lo > 0 && hi / lo >= 100) {
          const ticks = [...new Set(vals)].sort((a, b) => a - b).slice(0, 10);
          return { label: `${name} (log)`, values: vals.map(Math.log10), tickvals: ticks.map(Math.log10), ticktext: ticks.map(String) };
        }
        return { label: name, values: vals };
      }
      const cats = [...new Set(vals.map((v) => JSON.stringify(v)))];
      return { label: name, values: vals.map((v) => cats.indexOf(JSON.stringify(v))), tickvals: cats.map((_, i) => i), ticktext: cats };
    });
    const metric = trials.map((t) => { const v = T.plottable(t.metric); return v === null ? NaN : v; });
    // Better is up on the objective's axis whichever the goal: the best line ends at the top.
    const finite = metric.filter(Number.isFinite);
    const objective = { label: `${chart.metric} (${chart.goal === "min" ? "lower" : "higher"} is better)`, values: metric };
    if (chart.goal === "min" && finite.length > 1 && Math.min(...finite) < Math.max(...finite)) {
      objective.range = [Math.max(...finite), Math.min(...finite)];
    }
    dims.push(objective);
    const anyBest = trials.some((t) => t.best);
    Plotly.react(div, [{
      type: "parcoords", dimensions: dims,
      line: { color: trials.map((t) => (t.best ? 1 : 0)), colorscale: [[0, OTHER], [0.5, OTHER], [0.5, BEST], [1, BEST]],
              cmin: 0, cmax: 1, showscale: false },
    }], { margin: { l: 60, r: 80, t: 56, b: 24 } }, T.CONFIG);
    const note = document.getElementById("sweep-parcoords-note");
    if (note) note.hidden = !anyBest;
  }

  function init() {
    const table = document.getElementById("trial-table");
    if (table && !table.dataset.sortable) {
      table.dataset.sortable = "1";
      makeSortable(table);
    }
    const data = document.getElementById("sweep-chart");
    if (data) drawChart(JSON.parse(data.textContent));
  }

  const card = document.getElementById("sweep-trials");
  if (!card) return;
  new MutationObserver(() => {
    const fresh = document.getElementById("trial-table");
    if (fresh && !fresh.dataset.sortable) init();
  }).observe(card.parentNode, { childList: true });
  init();
})();
