// Budget burn-down (cumulative spend, budget line, linear forecast to the period's end) and
// stacked spend charts. Data comes from json_script elements rendered by the server.
(function () {
  "use strict";
  function readJSON(id) {
    var el = document.getElementById(id);
    return el ? JSON.parse(el.textContent) : null;
  }
  // The legend sits above the plot: below it, it ran into the date labels. Margins grow to fit
  // the labels (automargin) instead of clipping them.
  var layoutBase = {
    margin: { l: 50, r: 16, t: 32, b: 10 },
    legend: { orientation: "h", x: 0, xanchor: "left", y: 1.02, yanchor: "bottom" },
    yaxis: { tickprefix: "$", automargin: true, ticklabelstandoff: 6 },
  };

  // A date axis with as many labels as fit the chart's width, level and whole: a label a day
  // on a narrow chart were tilted into each other and read "No", "No", "No".
  function dateAxis(div, extra) {
    var ticks = Math.max(2, Math.floor((div.clientWidth || 400) / 70));
    return Object.assign({ type: "date", tickformat: "%b %-d", hoverformat: "%b %-d", nticks: ticks, tickangle: 0,
                           automargin: true }, extra || {});
  }

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
    var layout = Object.assign({}, layoutBase, { xaxis: dateAxis(div, { range: [d.period_start, d.period_end] }) });
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
    var layout = Object.assign({}, layoutBase, { barmode: "stack", xaxis: dateAxis(div) });
    Plotly.newPlot(div, traces, layout, { displayModeBar: false, responsive: true });
    div.dataset.drawn = "1";
  }

  function drawAll() {
    document.querySelectorAll(".budget-chart").forEach(drawBurndown);
    document.querySelectorAll(".stacked-chart").forEach(drawStacked);
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", drawAll); else drawAll();
})();
