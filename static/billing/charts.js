// Budget burn-down (cumulative spend, budget line, linear forecast to the period's end) and
// stacked spend charts. Data comes from json_script elements rendered by the server.
(function () {
  "use strict";
  function readJSON(id) {
    var el = document.getElementById(id);
    return el ? JSON.parse(el.textContent) : null;
  }
  var layoutBase = { margin: { l: 50, r: 16, t: 10, b: 40 }, legend: { orientation: "h" }, yaxis: { tickprefix: "$" } };

  function drawBurndown(div) {
    if (div.dataset.drawn) return;
    var d = readJSON(div.dataset.chart);
    if (!d || typeof Plotly === "undefined") return;
    var traces = [{ x: d.days, y: d.spent, name: "spent", type: "scatter", mode: "lines+markers", fill: "tozeroy" }];
    traces.push({ x: [d.today, d.period_end], y: [d.spent_now, d.forecast], name: "forecast", mode: "lines",
                  line: { dash: "dash" } });
    if (d.budget !== null) {
      traces.push({ x: [d.period_start, d.period_end], y: [d.budget, d.budget], name: "budget", mode: "lines",
                    line: { color: "#c0392b" } });
    }
    var layout = Object.assign({}, layoutBase, { xaxis: { range: [d.period_start, d.period_end], type: "date", tickformat: "%b %-d" } });
    Plotly.newPlot(div, traces, layout, { displayModeBar: false, responsive: true });
    div.dataset.drawn = "1";
  }

  function drawStacked(div) {
    var series = readJSON(div.dataset.chart);
    if (!series || typeof Plotly === "undefined") return;
    var traces = series.map(function (s) {
      return { x: s.points.map(function (p) { return p[0]; }), y: s.points.map(function (p) { return p[1]; }),
               name: s.label, type: "bar" };
    });
    var layout = Object.assign({}, layoutBase, { barmode: "stack", xaxis: { type: "date", tickformat: "%b %-d", dtick: 86400000 } });
    Plotly.newPlot(div, traces, layout, { displayModeBar: false, responsive: true });
    div.dataset.drawn = "1";
  }

  function drawAll() {
    document.querySelectorAll(".budget-chart").forEach(drawBurndown);
    document.querySelectorAll(".stacked-chart").forEach(drawStacked);
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", drawAll); else drawAll();
})();
