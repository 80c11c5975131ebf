#include "clients/rill_loadtest/html_page.h"

namespace rill::loadtest {

const char* const kHtmlHead = R"HTML(<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>rill-loadtest report</title>
<style>
body { font: 14px system-ui, sans-serif; margin: 24px; color: #222; }
h1 { font-size: 20px; } h2 { font-size: 16px; margin-top: 28px; }
table { border-collapse: collapse; margin: 8px 0; }
td, th { border: 1px solid #ccc; padding: 3px 8px; text-align: right; }
th { background: #f3f3f3; } td:first-child, th:first-child { text-align: left; }
.charts { display: flex; flex-wrap: wrap; gap: 16px; }
figure { margin: 0; } figcaption { font-weight: 600; margin-bottom: 4px; }
svg.chart { background: #fff; border: 1px solid #ddd; }
svg.chart text { font: 11px system-ui, sans-serif; fill: #444; }
.legend span { margin-right: 12px; }
#report-errors { color: #b00; white-space: pre; }
</style>
</head>
<body>
<h1>rill-loadtest report</h1>
<div id="report-errors"></div>
<div id="config"></div>
<div id="summary"></div>
<div class="charts" id="charts"></div>
<script type="application/json" id="rill-data">)HTML";

const char* const kHtmlTail = R"HTML(</script>
<script>
"use strict";
window.addEventListener("error", function (e) {
  var box = document.getElementById("report-errors");
  box.textContent += "script error: " + e.message + "\n";
  document.body.setAttribute("data-errors", "true");
});
(function () {
  var SVGNS = "http://www.w3.org/2000/svg";
  var COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#17becf"];
  var data = JSON.parse(document.getElementById("rill-data").textContent);

  function el(tag, attrs, parent) {
    var e = document.createElementNS(SVGNS, tag);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }
  function fmt(v) {
    if (v === null || v === undefined) return "-";
    if (Math.abs(v) >= 100) return v.toFixed(0);
    if (Math.abs(v) >= 1) return v.toFixed(2);
    return v.toPrecision(3);
  }
  function extent(series, key) {
    var lo = Infinity, hi = -Infinity;
    series.forEach(function (s) {
      s.points.forEach(function (p) { lo = Math.min(lo, p[key]); hi = Math.max(hi, p[key]); });
    });
    if (!isFinite(lo)) { lo = 0; hi = 1; }
    if (hi === lo) { hi = lo + (lo === 0 ? 1 : Math.abs(lo) * 0.1); }
    return [Math.min(lo, 0), hi];
  }
  // One line chart: series = [{name, points: [{x, y}], markers: bool}].
  function chart(id, title, xlabel, ylabel, series) {
    var W = 460, H = 280, L = 60, R = 12, T = 12, B = 42;
    var fig = document.createElement("figure");
    var cap = document.createElement("figcaption");
    cap.textContent = title;
    fig.appendChild(cap);
    var svg = el("svg", {id: id, "class": "chart", width: W, height: H, viewBox: "0 0 " + W + " " + H});
    fig.appendChild(svg);
    var xs = extent(series, "x"), ys = extent(series, "y");
    function sx(v) { return L + (v - xs[0]) / (xs[1] - xs[0]) * (W - L - R); }
    function sy(v) { return H - B - (v - ys[0]) / (ys[1] - ys[0]) * (H - T - B); }
    el("line", {x1: L, y1: H - B, x2: W - R, y2: H - B, stroke: "#888"}, svg);
    el("line", {x1: L, y1: T, x2: L, y2: H - B, stroke: "#888"}, svg);
    for (var i = 0; i <= 4; i++) {
      var xv = xs[0] + (xs[1] - xs[0]) * i / 4, yv = ys[0] + (ys[1] - ys[0]) * i / 4;
      el("text", {x: sx(xv), y: H - B + 14, "text-anchor": "middle"}, svg).textContent = fmt(xv);
      el("text", {x: L - 4, y: sy(yv) + 4, "text-anchor": "end"}, svg).textContent = fmt(yv);
      el("line", {x1: L, y1: sy(yv), x2: W - R, y2: sy(yv), stroke: "#eee"}, svg);
    }
    el("text", {x: (L + W - R) / 2, y: H - 6, "text-anchor": "middle"}, svg).textContent = xlabel;
    el("text", {x: 12, y: (T + H - B) / 2, "text-anchor": "middle",
                transform: "rotate(-90 12 " + (T + H - B) / 2 + ")"}, svg).textContent = ylabel;
    var total = 0;
    var legend = document.createElement("div");
    legend.className = "legend";
    series.forEach(function (s, k) {
      var color = COLORS[k % COLORS.length];
      var d = s.points.map(function (p, j) {
        return (j ? "L" : "M") + sx(p.x).toFixed(1) + "," + sy(p.y).toFixed(1);
      }).join("");
      el("path", {"class": "series", d: d, fill: "none", stroke: color, "stroke-width": 1.5,
                  "data-name": s.name, "data-points": s.points.length}, svg);
      if (s.markers) s.points.forEach(function (p) {
        el("circle", {"class": "point", cx: sx(p.x), cy: sy(p.y), r: 3, fill: color}, svg);
      });
      total += s.points.length;
      var item = document.createElement("span");
      item.style.color = color;
      item.textContent = "\u25A0 " + s.name;
      legend.appendChild(item);
    });
    svg.setAttribute("data-series", series.length);
    svg.setAttribute("data-points", total);
    fig.appendChild(legend);
    document.getElementById("charts").appendChild(fig);
  }
  function cdf(values) {
    var v = values.filter(function (x) { return x !== null; }).sort(function (a, b) { return a - b; });
    var step = Math.max(1, Math.floor(v.length / 400));
    var out = [];
    for (var i = 0; i < v.length; i += step) out.push({x: v[i] * 1000, y: (i + 1) / v.length});
    if (v.length) out.push({x: v[v.length - 1] * 1000, y: 1});
    return out;
  }
  function phaseName(p) { return (p.mode === "open" ? "rate " : "concurrency ") + p.load; }
  function table(parent, head, rows) {
    var t = document.createElement("table");
    var tr = document.createElement("tr");
    head.forEach(function (h) { var th = document.createElement("th"); th.textContent = h; tr.appendChild(th); });
    t.appendChild(tr);
    rows.forEach(function (r) {
      var row = document.createElement("tr");
      r.forEach(function (c) { var td = document.createElement("td"); td.textContent = c; row.appendChild(td); });
      t.appendChild(row);
    });
    parent.appendChild(t);
  }

  var cfg = data.config;
  var cfgDiv = document.getElementById("config");
  var p0 = document.createElement("p");
  p0.textContent = cfg.argv.join(" ");
  cfgDiv.appendChild(p0);

  var sumDiv = document.getElementById("summary");
  var ok = function (ok) { return ok ? "ok" : "MISMATCH"; };
  table(sumDiv, ["phase", "completed", "failed", "cancelled", "req/s", "out tok/s", "goodput",
                 "prompt cached %", "server hit %", "TTFT p50 ms", "TTFT p99 ms", "TPOT p50 ms",
                 "ITL p50 ms", "E2E p50 ms", "checks"],
    data.phases.map(function (p) {
      var s = p.summary, d = p.server;
      var serverHit = d && d.prefix_cache_queries > 0 ? fmt(100 * d.prefix_cache_hits / d.prefix_cache_queries) : "-";
      return [phaseName(p), s.completed, s.failed, s.cancelled, fmt(s.request_throughput),
              fmt(s.output_token_throughput), fmt(s.goodput), fmt(100 * s.prefix_cache_hit_rate),
              serverHit, fmt(s.ttft_s.median * 1000),
              fmt(s.ttft_s.p99 * 1000), fmt(s.tpot_s.median * 1000), fmt(s.itl_s.median * 1000),
              fmt(s.e2e_s.median * 1000),
              p.checks.map(function (c) { return c.name + " " + ok(c.passed); }).join(", ")];
    }));

  if (data.streams) {  // --streams: the long-lived streams' ITL before and during the load
    var b = data.streams;
    var head = document.createElement("h2");
    head.textContent = "Long-lived streams (" + b.streams + ")";
    sumDiv.appendChild(head);
    var rows = [["before the load", fmt(b.itl_before_s.mean * 1000), fmt(b.itl_before_s.median * 1000),
                 fmt(b.itl_before_s.p99 * 1000), "-", "-"]];
    data.phases.forEach(function (p) {
      if (!p.streams) return;
      var s = p.streams;
      rows.push([phaseName(p), fmt(s.itl_s.mean * 1000), fmt(s.itl_s.median * 1000), fmt(s.itl_s.p99 * 1000),
                 fmt(s.p99_over_steady) + "x", fmt(p.summary.ttft_s.median * 1000)]);
    });
    table(sumDiv, ["window", "ITL mean ms", "ITL p50 ms", "ITL p99 ms", "ITL p99 / steady",
                   "arrivals' TTFT p50 ms"], rows);
    chart("chart-streams-itl", "Long-lived streams' ITL (CDF)", "ITL (ms)", "fraction of gaps",
          [{name: "before the load", points: cdf(b.gaps_before_s)}].concat(
            data.phases.filter(function (p) { return p.streams; }).map(function (p) {
              return {name: phaseName(p), points: cdf(p.streams.gaps_s)};
            })));
  }
  if (data.sweep.length) {
    var metrics = [["ttft_median_s", "TTFT p50"], ["tpot_median_s", "TPOT p50"],
                   ["e2e_median_s", "E2E p50"]];
    chart("chart-sweep", "Latency against throughput (sweep)", "request throughput (req/s)",
          "latency (ms)", metrics.map(function (m) {
            return {name: m[1], markers: true, points: data.sweep.map(function (pt) {
              return {x: pt.request_throughput, y: pt[m[0]] * 1000};
            })};
          }));
  }
  [["ttft_s", "TTFT", "chart-ttft"], ["tpot_s", "TPOT", "chart-tpot"],
   ["itl_s", "ITL", "chart-itl"]].forEach(function (m) {
    chart(m[2], m[1] + " distribution (CDF)", m[1] + " (ms)",
          m[0] === "itl_s" ? "fraction of gaps" : "fraction of requests",
          data.phases.map(function (p) {
            var values = [];
            p.requests.forEach(function (r) {
              if (r.error || r.cancelled) return;
              if (m[0] === "itl_s") values = values.concat(r.itl_s); else values.push(r[m[0]]);
            });
            return {name: phaseName(p), points: cdf(values)};
          }));
  });
  // Multi-turn runs: how TTFT grows with the history each turn re-sends (the prefix cache keeps
  // it flat), and the share of each turn's prompt that came from the cache.
  if (data.phases.some(function (p) { return p.summary.turns.length > 1; })) {
    var turnSeries = [];
    data.phases.forEach(function (p) {
      if (p.summary.turns.length < 2) return;
      var turns = p.summary.turns.filter(function (t) { return t.ttft_s.count > 0; });
      turnSeries.push({name: phaseName(p) + " TTFT p50", markers: true, points: turns.map(function (t) {
        return {x: t.turn + 1, y: t.ttft_s.median * 1000};
      })});
      turnSeries.push({name: phaseName(p) + " TTFT p90", markers: true, points: turns.map(function (t) {
        return {x: t.turn + 1, y: t.ttft_s.p90 * 1000};
      })});
    });
    chart("chart-ttft-turn", "TTFT by turn (history re-sent each turn)", "turn", "TTFT (ms)", turnSeries);
    var cachedSeries = [];
    data.phases.forEach(function (p) {
      if (p.summary.turns.length < 2) return;
      cachedSeries.push({name: phaseName(p), markers: true, points: p.summary.turns.map(function (t) {
        return {x: t.turn + 1, y: t.prompt_tokens ? 100 * t.cached_tokens / t.prompt_tokens : 0};
      })});
    });
    chart("chart-cached-turn", "Prompt tokens from the prefix cache by turn", "turn", "cached (%)", cachedSeries);
  }
  var latencySeries = [], throughputSeries = [];
  data.phases.forEach(function (p) {
    var ts = p.time_series;
    // Buckets where no request reached its first token (or its end) have no mean: skipped.
    ["mean_ttft_s", "mean_e2e_s"].forEach(function (key) {
      // Markers: a series may have a single bucket (every request ending together).
      latencySeries.push({name: phaseName(p) + (key === "mean_ttft_s" ? " TTFT" : " E2E"),
        markers: true,
        points: ts.filter(function (b) { return b[key] !== null; })
                  .map(function (b) { return {x: b.t_s, y: b[key] * 1000}; })});
    });
    throughputSeries.push({name: phaseName(p) + " tok/s", points: ts.map(function (b) { return {x: b.t_s, y: b.output_tokens_per_s}; })});
  });
  chart("chart-latency-time", "Latency over time (mean per bucket)", "time (s)", "latency (ms)", latencySeries);
  chart("chart-throughput-time", "Output token throughput over time", "time (s)", "tokens/s", throughputSeries);
  document.body.setAttribute("data-rendered", "true");
})();
</script>
</body>
</html>
)HTML";

}  // namespace rill::loadtest
