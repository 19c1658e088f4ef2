// Shared helpers for the tracking pages (no framework; Plotly is loaded by the page). Added to
// what static/core/poll.js already put in window.Trainyard (poll, keepFocus), not in its place.
window.Trainyard = Object.assign(window.Trainyard || {}, (function () {
  function num(v) {
    if (v === "NaN") return NaN;
    if (v === "Infinity") return Infinity;
    if (v === "-Infinity") return -Infinity;
    return v;
  }
  // Plotly cannot draw infinities or NaN: leave a gap there (the tables still say what it was).
  function plottable(v) {
    const n = num(v);
    return typeof n === "number" && isFinite(n) ? n : null;
  }
  async function getJSON(url) {
    const resp = await fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } });
    if (!resp.ok) throw new Error(`${url}: ${resp.status}`);
    return resp.json();
  }
  function cookie(name) {
    const m = document.cookie.match(new RegExp("(?:^|; )" + name + "=([^;]*)"));
    return m ? decodeURIComponent(m[1]) : "";
  }
  function fmt(v, digits) {
    const n = num(v);
    if (n === null || n === undefined) return "–";
    if (typeof n !== "number") return String(n);
    if (!isFinite(n)) return String(v);
    return Math.abs(n) >= 1e5 || (Math.abs(n) < 1e-3 && n !== 0) ? n.toExponential(3) : +n.toFixed(digits === undefined ? 4 : digits) + "";
  }
  function bytes(n) {
    const units = ["B", "KB", "MB", "GB", "TB"];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return `${n.toFixed(i ? 1 : 0)} ${units[i]}`;
  }
  function duration(s) {
    if (s === null || s === undefined) return "–";
    s = Math.round(s);
    const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), sec = s % 60;
    return h ? `${h}h ${m}m` : m ? `${m}m ${sec}s` : `${sec}s`;
  }
  // The same list as apps/tracking/display.py's RUN_COLORS (the compare page's run colours).
  const COLORS = ["#2f5d8a", "#d1495b", "#66a182", "#edae49", "#8d5fd3", "#00798c", "#a0522d", "#3d405b", "#e07a5f", "#4f772d"];
  function color(i) { return COLORS[i % COLORS.length]; }
  function rgba(hex, a) {
    const n = parseInt(hex.slice(1), 16);
    return `rgba(${(n >> 16) & 255},${(n >> 8) & 255},${n & 255},${a})`;
  }
  function el(tag, attrs, text) {
    const e = document.createElement(tag);
    Object.entries(attrs || {}).forEach(([k, v]) => e.setAttribute(k, v));
    if (text !== undefined) e.textContent = text;
    return e;
  }
  const FEW_POINTS = 30;
  // A band (min..max, filled) and a line (mean or value) for one series.
  function bandTraces(series, xs, ys, name, c, showBand) {
    const traces = [];
    if (showBand) {
      traces.push({ x: xs, y: series.max.map(plottable), mode: "lines", line: { width: 0 }, hoverinfo: "skip", showlegend: false, name: name + " max" });
      traces.push({ x: xs, y: series.min.map(plottable), mode: "lines", line: { width: 0 }, fill: "tonexty", fillcolor: rgba(c, 0.18),
                    hoverinfo: "skip", showlegend: false, name: name + " min" });
    }
    // A line needs two neighbouring points: a metric logged once (or a few times, between gaps)
    // would draw nothing, so a short series shows its points as well.
    const few = ys.filter((y) => y !== null && y !== undefined).length <= FEW_POINTS;
    traces.push({ x: xs, y: ys, mode: few ? "lines+markers" : "lines", line: { width: 1.8, color: c }, marker: { size: 6, color: c },
                  name: name });
    return traces;
  }
  // On a phone Plotly's toolbar sat over the charts' titles (issue 29): there the page's own
  // controls (smoothing, log scale, Reset zoom) and a double tap do what it did.
  const narrow = window.matchMedia ? window.matchMedia("(max-width: 600px)").matches : false;
  const CONFIG = { displaylogo: false, responsive: true, displayModeBar: narrow ? false : "hover" };
  return { num, plottable, getJSON, cookie, fmt, bytes, duration, color, rgba, el, bandTraces, CONFIG };
})());
