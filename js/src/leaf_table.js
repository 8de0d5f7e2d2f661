// The run's leaf table: every leaf's gradient, this run against the baseline, sortable and paged.
import { add, h } from "./dom.js";
import { parseNumber } from "./numbers.js";

// Rows per page of the leaf table: a large model's thousands of parameters are paged, every one
// reachable.
export const LEAF_PAGE_ROWS = 50;

/**
 * A table's page controls: Previous, "leaves 51–100 of 230", Next; `page` of `pages` (from 0) shows
 * `count` of `total` rows, LEAF_PAGE_ROWS a page; goTo(page) shows another.
 */
export function pageButtons(page, pages, count, total, goTo) {
  const first = page * LEAF_PAGE_ROWS;
  return [
    h("button", { class: "hv-page-prev", disabled: page === 0, onclick: () => goTo(page - 1) }, "◀ Previous"),
    h("span", { class: "hv-page" }, `leaves ${first + 1}–${first + count} of ${total}`),
    h("button", { class: "hv-page-next", disabled: page >= pages - 1, onclick: () => goTo(page + 1) }, "Next ▶"),
  ];
}

// The leaf table's sortable columns: header, value of a row for sorting and for the cell.
const LEAF_COLUMNS = [
  { key: "name", title: "leaf", value: (l) => l.name },
  { key: "norm", title: "‖grad‖", value: (l) => parseNumber(l.after?.norm) },
  { key: "min", title: "min", value: (l) => parseNumber(l.after?.min) },
  { key: "max", title: "max", value: (l) => parseNumber(l.after?.max) },
  { key: "ratio", title: "× baseline", value: (l) => leafRatio(l) },
];

// Orders of the rows: the columns', and "most changed" (|log10 of × baseline|, largest first).
const LEAF_SORTS = { ...Object.fromEntries(LEAF_COLUMNS.map((c) => [c.key, c.value])), change: (l) => leafChange(l) };

/**
 * ‖grad‖ in this run over ‖grad‖ in the baseline, as Python sent it (null when either is missing
 * or zero: hookviz.widget.leaf_table).
 */
export function leafRatio(leaf) {
  return parseNumber(leaf.ratio);
}

/**
 * How much a leaf's gradient norm changed against the baseline, both ways alike: |log10(now /
 * then)| (x 1000 and x 0.001 both give 3); Infinity when one of them is 0 and the other not, 0
 * when both are; null when either is missing or not finite.
 */
export function leafChange(leaf) {
  const now = parseNumber(leaf.after?.norm);
  const then = parseNumber(leaf.before?.norm);
  if (now === null || then === null || !Number.isFinite(now) || !Number.isFinite(then)) return null;
  if (now === then) return 0;
  if (now === 0 || then === 0) return Infinity;
  return Math.abs(Math.log10(now / then));
}

/** The rows in the order `sort` ({key, descending}) gives; rows without a value go last. Without a
 * sort: changed leaves first, in the run's order. */
export function sortLeaves(leaves, sort) {
  const rows = [...leaves.filter((l) => l.changed), ...leaves.filter((l) => !l.changed)];
  const value = LEAF_SORTS[sort?.key];
  if (!value) return rows;
  const sign = sort.descending ? -1 : 1;
  const missing = (v) => v === null || v === undefined || Number.isNaN(v);
  return rows.sort((a, b) => {
    const x = value(a);
    const y = value(b);
    if (missing(x) || missing(y)) return missing(x) - missing(y);
    return x < y ? -sign : x > y ? sign : 0;
  });
}

/** Every leaf's grad, baseline -> current run, in sortable columns (click a header) or most
 * changed first, a page at a time. The order and page the user chose stay on `el` for every later
 * run. `pending`: a large run's table comes after its graph is drawn (hookviz.Widget.fill_details). */
export function renderLeaves(el, leaves, pending = false) {
  const sort = el.hvSort || { key: null, descending: true };
  el.replaceChildren();
  add(el, h("h4", {}, "Leaf gradients (this run, against the baseline)"));
  if (!leaves || !leaves.length) {
    add(el, h("div", { class: "hv-muted" }, pending ? "Summarising the leaves after the graph…" : "No leaves."));
    return;
  }
  const rows = sortLeaves(leaves, sort);
  const pages = Math.ceil(rows.length / LEAF_PAGE_ROWS);
  const page = Math.min(Math.max(0, el.hvPage || 0), pages - 1);
  const shown = rows.slice(page * LEAF_PAGE_ROWS, (page + 1) * LEAF_PAGE_ROWS);
  const redraw = (changes) => {
    Object.assign(el, changes);
    renderLeaves(el, leaves, pending);
  };
  const header = LEAF_COLUMNS.map((c) =>
    h(
      "th",
      {
        class: "hv-sortable",
        "data-sort": c.key,
        title: "sort",
        onclick: () =>
          redraw({ hvSort: { key: c.key, descending: sort.key === c.key ? !sort.descending : true }, hvPage: 0 }),
      },
      c.title + (sort.key === c.key ? (sort.descending ? " ▼" : " ▲") : ""),
    ),
  );
  const mostChanged = sort.key === "change";
  add(
    el,
    h(
      "div",
      { class: "hv-row hv-leaf-controls" },
      h(
        "button",
        {
          class: `hv-most-changed${mostChanged ? " hv-on" : ""}`,
          "aria-pressed": String(mostChanged),
          title: "largest change against the baseline first, increase or decrease: |log10(× baseline)|",
          onclick: () => redraw({ hvSort: mostChanged ? null : { key: "change", descending: true }, hvPage: 0 }),
        },
        "Most changed first",
      ),
      pageButtons(page, pages, shown.length, rows.length, (to) => redraw({ hvPage: to })),
    ),
    h(
      "table",
      { class: "hv-leaves-table" },
      h("tr", {}, header, h("th", {}, "value in this run")),
      shown.map((l) =>
        h(
          "tr",
          { class: l.changed ? "hv-changed" : "", "data-leaf": l.name },
          h("td", { class: "hv-slot", title: l.name }, l.name),
          // Each column in one number format: Python wrote the cells (hookviz.widget.leaf_table).
          h("td", { class: "hv-num", "data-column": "norm" }, l.text?.norm ?? "–"),
          h("td", { class: "hv-num", "data-column": "min" }, l.text?.min ?? "–"),
          h("td", { class: "hv-num", "data-column": "max" }, l.text?.max ?? "–"),
          h("td", { class: "hv-num", "data-column": "ratio" }, l.text?.ratio ?? "–"),
          h("td", { class: "hv-leaf-after" }, leafCell(l.before, l.after, l.changed)),
        ),
      ),
    ),
  );
}

// The value once (this run's); a changed leaf's baseline value is its tooltip, the × baseline
// column says by how much it changed.
function leafCell(before, after, changed) {
  if (!after) return h("span", { class: "hv-muted" }, "None");
  const small = (t) => t?.text?.value !== undefined;
  if (!small(after)) return h("span", { class: "hv-shape" }, `[${(after.shape || []).join("×")}]`);
  const title = changed && small(before) ? `baseline: ${before.text.value}` : undefined;
  return h("code", { class: "hv-value", title }, after.text.value);
}
