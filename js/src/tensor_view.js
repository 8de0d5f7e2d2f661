// One tensor as the inspector shows it (its shape, its value or statistics, a histogram, a
// heatmap of a 2-D value) and a list of them, before -> after.
import { h } from "./dom.js";
import { parseNumber } from "./numbers.js";

const SVG = "http://www.w3.org/2000/svg";

/**
 * A small bar chart of a histogram ({counts, edges}) of a tensor of `numel` elements; `range`: the
 * text of its first and last edge (the tensor's text.histogram).
 */
export function histogram(hist, numel, range = "") {
  if (!hist || !hist.counts || !hist.counts.length) return null;
  const counts = hist.counts;
  const w = 160;
  const ht = 36;
  const max = Math.max(1, ...counts);
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("width", w);
  svg.setAttribute("height", ht);
  svg.setAttribute("class", "hv-hist");
  const bw = w / counts.length;
  counts.forEach((c, i) => {
    const r = document.createElementNS(SVG, "rect");
    const bh = (c / max) * (ht - 2);
    r.setAttribute("x", i * bw);
    r.setAttribute("y", ht - bh);
    r.setAttribute("width", Math.max(1, bw - 1));
    r.setAttribute("height", bh);
    svg.append(r);
  });
  const counted = counts.reduce((a, b) => a + b, 0);
  const sampled = numel > counted ? ` · a fixed sample of ${counted} of ${numel} elements` : "";
  return h("div", { class: "hv-histwrap" }, svg, h("div", { class: "hv-muted" }, `${range}${sampled}`));
}

/** "#rrggbb" -> [r, g, b]. */
const rgb = (hex) => [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16));

/**
 * A small heatmap of a 2-D value (rows x columns), one cell per element, shading from `colors.zero`
 * at 0 to `colors.negative` / `colors.positive` at the largest |value| (NaN/Inf: `colors.nan`);
 * `caption` replaces the default one (an overview's says what its cells are); `top`: the text of
 * the largest |value| (the tensor's text.abs_max or text.overview_max).
 */
export function heatmap(value, caption = null, top = "", colors = null) {
  // The colours come with the payload (hookviz.colors.HEATMAP_COLORS: no red but for NaN/Inf).
  if (!colors || !Array.isArray(value) || !Array.isArray(value[0])) return null;
  const rows = value.length;
  const cols = value[0].length;
  const cell = Math.max(1, Math.min(8, Math.floor(200 / Math.max(rows, cols))));
  const canvas = h("canvas", { class: "hv-heat", width: cols * cell, height: rows * cell });
  const ctx = canvas.getContext?.("2d");
  if (!ctx) return null;
  const [zero, negative, positive] = [colors.zero, colors.negative, colors.positive].map(rgb);
  let largest = 0;
  for (const row of value) for (const v of row) largest = Math.max(largest, Math.abs(parseNumber(v) || 0));
  value.forEach((row, i) =>
    row.forEach((v, j) => {
      const n = parseNumber(v);
      const t = largest > 0 && Number.isFinite(n) ? n / largest : 0;
      const end = t >= 0 ? positive : negative;
      ctx.fillStyle = Number.isFinite(n)
        ? `rgb(${zero.map((z, k) => Math.round(z + (end[k] - z) * Math.abs(t))).join(",")})`
        : colors.nan;
      ctx.fillRect(j * cell, i * cell, cell, cell);
    }),
  );
  return h(
    "div",
    { class: "hv-heatwrap" },
    canvas,
    h(
      "div",
      { class: "hv-muted hv-small" },
      caption ? `${caption}, max ${top}` : `${rows}×${cols}: teal < 0 < brown, |max| ${top}`,
    ),
  );
}

/** The raw values behind a toggle, every digit as recorded, written out only when opened. */
function rawValues(value) {
  const text = h("code", { class: "hv-value" });
  const details = h("details", { class: "hv-raw" }, h("summary", {}, "raw values"), text);
  details.addEventListener("toggle", () => {
    if (details.open && !text.textContent) text.textContent = JSON.stringify(value).replaceAll(",", ", ");
  });
  return details;
}

/**
 * One tensor summary: header line, then the value when Python sent its text (a tensor of at most
 * hookviz.widget.payload.SHOWN_ELEMENTS elements); else statistics, a histogram, a heatmap for 2-D values, and the raw values behind a toggle; a
 * tensor too large to keep has no values, and a 2-D one a heatmap of its block overview.
 */
export function tensorView(t, colors = null, none = "None") {
  // `none`: why there is no tensor (the payload's none_text: "None: x does not require grad").
  if (!t) return h("span", { class: "hv-muted hv-none" }, none || "None");
  const head = `${t.dtype}[${(t.shape || []).join(", ")}] ${t.device || ""}`;
  const bad = (t.nan_count || 0) + (t.inf_count || 0) > 0;
  const parts = [h("span", { class: "hv-shape" }, head)];
  const hasValue = t.value !== null && t.value !== undefined;
  const text = t.text || {};
  if (text.value !== undefined) {
    parts.push(h("code", { class: bad ? "hv-value hv-bad" : "hv-value" }, text.value));
  } else {
    parts.push(
      h(
        "div",
        { class: bad ? "hv-stats hv-bad" : "hv-stats" },
        `norm ${text.norm} · mean ${text.mean} · min ${text.min} · max ${text.max}` +
          ` · zeros ${text.zeros}` +
          (bad ? ` · NaN ${t.nan_count} · Inf ${t.inf_count}` : ""),
      ),
    );
    parts.push(histogram(t.histogram, t.numel, text.histogram));
    if (hasValue) {
      parts.push(heatmap(t.value, null, text.abs_max, colors));
      parts.push(rawValues(t.value));
    } else {
      if (t.overview && t.shape?.length === 2) {
        const [rows, cols] = t.shape;
        const blocks = `${t.overview.length}×${t.overview[0]?.length ?? 0}`;
        parts.push(
          heatmap(
            t.overview,
            `${rows}×${cols} in ${blocks} blocks: root mean square of each`,
            text.overview_max,
            colors,
          ),
        );
      }
      parts.push(
        h(
          "div",
          { class: "hv-muted hv-small hv-not-kept" },
          // a record's own note says why it has no values (e.g. changed in place after it was recorded)
          t.note || "values not kept: more elements than the session's full_tensor_limit",
        ),
      );
    }
  }
  return h("div", { class: "hv-tensor" }, parts);
}

/** Slot label: "[1]", or "[1] mat1" when the op's schema names the argument; `slot` before it
 * ("grad_input[0] x") where a module's two hook views sit side by side. */
function slotLabel(i, names, slot = "") {
  return names && names[i] ? `${slot}[${i}] ${names[i]}` : `${slot}[${i}]`;
}

/**
 * A list of tensors, before -> after where `changed` says so; `names`: the slots' names, `slot`
 * the view's name before each, `none`: why each None is None (the payload's none_text), `colors`:
 * the heatmaps' (heatmap_colors).
 */
export function tensorList(title, after, before, changed, names = null, slot = "", none = null, colors = null) {
  if (!after) return null;
  const view = (t, i) => tensorView(t, colors, none?.[i]);
  const rows = after.map((t, i) => {
    const b = before ? before[i] : undefined;
    const showBefore = b !== undefined && changed && changed[i];
    return h(
      "tr",
      {},
      h("td", { class: "hv-slot" }, slotLabel(i, names, slot)),
      h(
        "td",
        {},
        showBefore ? h("div", { class: "hv-before" }, h("span", { class: "hv-tag" }, "before"), view(b, i)) : null,
        h(
          "div",
          { class: showBefore ? "hv-after" : "" },
          showBefore ? h("span", { class: "hv-tag" }, "after") : null,
          view(t, i),
        ),
      ),
    );
  });
  return h(
    "div",
    { class: "hv-section" },
    h("h4", {}, title),
    h("table", { class: "hv-tensors" }, rows.length ? rows : h("tr", {}, h("td", {}, "(none)"))),
  );
}
