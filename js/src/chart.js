// Gradient flow chart: per-module gradient norm on a log scale, this run vs the baseline.
import Plotly from "plotly.js-basic-dist-min";
import { chartSeries } from "./logic.js";

export function renderChart(el, chart) {
  if (!chart || !chart.modules || !chart.modules.length) {
    el.textContent = "";
    return;
  }
  const s = chartSeries(chart);
  const many = s.labels.length > 40;
  const mode = s.labels.length > 150 ? "lines" : "lines+markers";
  const traces = [
    { x: s.labels, y: s.baseline, name: "baseline", type: "scatter", mode, line: { color: "#90a4ae", dash: "dot" } },
    { x: s.labels, y: s.current, name: "this run", type: "scatter", mode, line: { color: "#1e88e5" } },
  ];
  const layout = {
    title: { text: "Gradient flow: norm of the gradient into each module's inputs", font: { size: 13 } },
    height: 280,
    margin: { l: 60, r: 20, t: 36, b: 70 },
    yaxis: { type: "log", title: { text: "‖grad‖ (log)" }, exponentformat: "e" },
    // Many modules: no tick labels (hover shows each module's name).
    xaxis: {
      automargin: true,
      tickangle: -30,
      showticklabels: !many,
      title: many ? { text: `${s.labels.length} modules, input → output (hover for names)` } : undefined,
    },
    legend: { orientation: "h", y: 1.12, x: 1, xanchor: "right" },
    shapes: s.threshold
      ? [
          {
            type: "line",
            xref: "paper",
            x0: 0,
            x1: 1,
            y0: s.threshold,
            y1: s.threshold,
            line: { color: "#e53935", dash: "dash", width: 1 },
          },
        ]
      : [],
    annotations: s.threshold
      ? [
          {
            xref: "paper",
            x: 0,
            y: Math.log10(s.threshold),
            text: `vanishing < ${s.threshold}`,
            showarrow: false,
            font: { color: "#e53935", size: 10 },
            xanchor: "left",
            yanchor: "bottom",
          },
        ]
      : [],
  };
  Plotly.react(el, traces, layout, {
    displaylogo: false,
    responsive: true,
    modeBarButtonsToRemove: ["lasso2d", "select2d"],
  });
}

export function destroyChart(el) {
  try {
    Plotly.purge(el);
  } catch {
    // nothing was drawn
  }
}
