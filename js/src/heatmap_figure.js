// The plotly figure of a watch's heatmap as the page draws it: the step shown marked, the steps a
// GradScaler skipped dotted, and the step rows (update ratio, learning rate) under the figure on
// its step axis. Layout only: chart.js draws it. No DOM.

// Height in px of one step row under a watch's heatmap (update ratio, learning rate), and of the
// gap above them.
export const STEP_ROW_HEIGHT = 18;
const STEP_ROWS_GAP = 40;
// The step rows' own y axis (a figure's own axes are y, y2).
const ROWS_AXIS = "y9";

/**
 * The watch heatmap (plotly figure JSON) with the shown step marked by a vertical line, drawn as
 * the figure's `step_marker` says (hookviz.widget.watch_json.STEP_MARKER), and its `step_rows`
 * (hookviz.widget.watch_rows.step_rows: a layer's update ratio, a learning rate, per step) drawn
 * as rows of squares under the figure on its step axis, each cell in the colour and with the
 * hover text Python sent; the steps the GradScaler skipped are dotted lines across it all.
 * Returns a new {data, layout} whose layout.height is the figure's own (a live figure sets one;
 * else by its heatmap's rows) plus the step rows'; the figure passed in is not changed.
 */
export function heatmapWithStep(figure, step) {
  const layout = { ...(figure?.layout || {}) };
  delete layout.template; // plotly.py's default template is large and only restyles
  const marker =
    step === null || step === undefined
      ? []
      : [
          {
            type: "line",
            xref: "x",
            yref: "paper",
            x0: step,
            x1: step,
            y0: 0,
            y1: 1,
            line: figure?.step_marker?.line,
          },
        ];
  const rows = figure?.step_rows;
  const skipped = (rows?.skipped?.steps || []).map((s) => ({
    type: "line",
    xref: "x",
    yref: "paper",
    x0: s,
    x1: s,
    y0: 0,
    y1: 1,
    line: { color: rows.skipped.color, width: 2, dash: "dot" },
  }));
  layout.shapes = [...(layout.shapes || []), ...skipped, ...marker];
  const data = figure?.data || [];
  const base = layout.height || Math.min(600, 140 + 16 * (data[0]?.y || []).length);
  layout.height = base;
  if (!rows?.rows?.length) return { data, layout };
  // The rows take the bottom of the figure; the figure's own plots move up, keeping their order.
  const extraHeight = STEP_ROWS_GAP + STEP_ROW_HEIGHT * rows.rows.length;
  layout.height = base + extraHeight;
  const share = extraHeight / layout.height;
  for (const key of Object.keys(layout).filter((k) => /^yaxis\d*$/.test(k))) {
    const [lo, hi] = layout[key]?.domain || [0, 1];
    layout[key] = { ...layout[key], domain: [share + lo * (1 - share), share + hi * (1 - share)] };
  }
  if (!layout.yaxis) layout.yaxis = { domain: [share, 1] };
  layout.yaxis9 = {
    domain: [0, share * (1 - STEP_ROWS_GAP / extraHeight)],
    type: "category",
    autorange: "reversed",
    automargin: true,
    fixedrange: true,
  };
  const traces = rows.rows.map((row) => ({
    type: "scatter",
    mode: "markers",
    x: rows.steps,
    y: rows.steps.map(() => row.label),
    yaxis: ROWS_AXIS,
    marker: { symbol: "square", size: STEP_ROW_HEIGHT - 4, color: row.colors },
    text: row.text,
    hovertemplate: "%{text}<extra></extra>",
    name: row.label,
    showlegend: false,
    meta: { stepRow: row.kind },
  }));
  // What the cells' colours mean, under the rows: each key a square in its colour and its words.
  const keys = rows.legend || [];
  layout.annotations = [
    ...(layout.annotations || []),
    ...keys.map((key, i) => ({
      xref: "paper",
      yref: "paper",
      x: i / keys.length,
      y: 0,
      xanchor: "left",
      yanchor: "top",
      yshift: -22,
      showarrow: false,
      text: `<span style="color:${key.color}">■</span> ${key.text}`,
      font: { size: 10 },
    })),
  ];
  return { data: [...data, ...traces], layout };
}
