// Plotly charts: the gradient flow chart (per-module gradient norm on a log scale, this run vs the
// baseline) and the watch heatmap (names x training steps, drawn from the figure plotly.py made).
//
// Plotly is bundled as the text of an ES module (build.mjs) and evaluated on the first draw, from a
// blob URL as elk.js starts its worker: evaluated when the widget loaded, it would hold the page's
// main thread before the graph could be drawn (docs/perf.md), and the chart is drawn after the
// graph anyway.
import plotlySource from "plotly-esm-text";
import { heatmapWithStep } from "./heatmap_figure.js";

let plotlyLoading = null;
let loadedPlotly = null;

function plotly() {
  plotlyLoading ??= import(URL.createObjectURL(new Blob([plotlySource], { type: "text/javascript" }))).then(
    (module) => (loadedPlotly = module.default),
  );
  return plotlyLoading;
}

/** Run draw(Plotly) on `el` once plotly is loaded, unless a later draw or clear of `el` came first. */
function drawWith(el, draw) {
  const token = (el.hvDraw = (el.hvDraw || 0) + 1);
  return plotly().then(
    (Plotly) => {
      if (el.hvDraw === token) draw(Plotly);
    },
    // A page that refuses blob: modules (a strict Content-Security-Policy) says so in place.
    (error) => {
      if (el.hvDraw === token) el.textContent = `The chart could not load plotly: ${error?.message || error}`;
    },
  );
}

// The chart's height on screen (px): its box's CSS height (.hv-chart) says the same, so the plot
// is never asked to fit a box that has not been laid out yet (a 20 px strip).
export const CHART_HEIGHT = 300;

/**
 * Keep a drawn plot the size of its box: plotly's own Plots.resize, called when the box changes
 * size (window resize, full screen, a side panel opening), not only on a window "resize" event.
 */
function followSize(el) {
  if (el.hvResize || typeof ResizeObserver === "undefined") return;
  let frame = 0;
  el.hvResize = new ResizeObserver(() => {
    cancelAnimationFrame(frame);
    frame = requestAnimationFrame(() => {
      // A box hidden or detached (display: none, width 0) keeps the last size.
      if (loadedPlotly && el.clientWidth > 0 && el.classList.contains("js-plotly-plot")) loadedPlotly.Plots.resize(el);
    });
  });
  el.hvResize.observe(el);
}

/**
 * The gradient-flow chart: the figure Python made (`chart.figure`, hookviz.widget.chart.chart_spec,
 * the chart's one home), drawn with the theme's text, grid and error colours and CHART_HEIGHT.
 * A chart with no layers hides its box.
 */
export function renderChart(el, chart) {
  const figure = chart?.figure;
  if (!figure || !chart.modules || !chart.modules.length) {
    destroyChart(el);
    el.textContent = "";
    el.hidden = true;
    return;
  }
  el.hidden = false;
  // The page's theme (JupyterLab light or dark) for text and grid.
  const css = getComputedStyle(el);
  const text = css.getPropertyValue("--jp-ui-font-color1").trim() || "#212121";
  const grid = css.getPropertyValue("--jp-border-color2").trim() || "#e0e0e0";
  // The widget's error red for the theme (style.css --hv-error): readable on light and dark.
  // a threshold's label is a warning (orange, as its line), not an error: red means NaN/Inf
  const warn = css.getPropertyValue("--hv-warn").trim() || "#a84300";
  const given = figure.layout || {};
  const layout = {
    ...given,
    title: { ...given.title, font: { size: 13 } },
    height: CHART_HEIGHT,
    autosize: true,
    paper_bgcolor: "rgba(0,0,0,0)",
    plot_bgcolor: "rgba(0,0,0,0)",
    font: { color: text },
    margin: { l: 60, r: 20, t: 36, b: 70 },
    xaxis: { ...given.xaxis, gridcolor: grid },
    yaxis: { ...given.yaxis, gridcolor: grid },
    annotations: (given.annotations || []).map((a) => ({ ...a, font: { ...a.font, color: warn } })),
  };
  drawWith(el, (Plotly) => {
    Plotly.react(el, figure.data, layout, { displaylogo: false, modeBarButtonsToRemove: ["lasso2d", "select2d"] });
    followSize(el);
  });
}

export function destroyChart(el) {
  el.hvDraw = (el.hvDraw || 0) + 1; // a draw still waiting for plotly is dropped
  el.hvResize?.disconnect();
  el.hvResize = null;
  try {
    loadedPlotly?.purge(el);
  } catch {
    // nothing was drawn
  }
}

/**
 * The watch heatmap from its plotly figure JSON, the shown step marked; clicking a cell picks
 * its step (onStep(step)). An empty or failed figure clears the element (an error is shown as text).
 */
export function renderHeatmap(el, figure, step, onStep) {
  if (!figure || !figure.data) {
    destroyChart(el);
    el.textContent = figure?.error || "";
    return;
  }
  const { data, layout } = heatmapWithStep(figure, step);
  const steps = (data[0]?.x || []).length;
  const sized = {
    ...layout,
    // A few steps: one tick per step (plotly would put ticks at 0.5).
    xaxis: { ...(layout.xaxis || {}), ...(steps <= 20 ? { dtick: 1 } : {}) },
    margin: { l: 110, r: 20, t: 40, b: 40 },
  };
  el.hvOnStep = onStep;
  drawWith(el, (Plotly) => {
    Plotly.react(el, data, sized, { displaylogo: false, modeBarButtonsToRemove: ["lasso2d", "select2d"] });
    followSize(el);
    if (!el.hvClickBound) {
      el.hvClickBound = true;
      el.on("plotly_click", (event) => {
        const x = event?.points?.[0]?.x;
        if (typeof x === "number") el.hvOnStep?.(x);
      });
    }
  });
}
