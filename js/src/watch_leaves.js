// The leaf table of the watch view: each parameter's gradient statistics at the rank and step
// picked (hookviz.widget.watch_json.watch_leaf_table), in place of the run's table, so that it
// follows the picker as the graph, chart and heatmap do.

import { add, h } from "./dom.js";
import { parseNumber } from "./numbers.js";
import { LEAF_PAGE_ROWS, pageButtons } from "./leaf_table.js";

/**
 * The rows in the order `sort` ({key, descending}) gives by their values; rows without a value
 * (no gradient at this step, not measured) go last. Without a sort: the watch's order.
 */
export function sortWatchLeaves(rows, sort) {
  if (!sort?.key) return [...rows];
  const sign = sort.descending ? -1 : 1;
  const value = (row) => {
    const v = sort.key === "name" ? row.name : parseNumber(row.values?.[sort.key]);
    return v === null || v === undefined || Number.isNaN(v) ? null : v;
  };
  return [...rows].sort((a, b) => {
    const x = value(a);
    const y = value(b);
    if (x === null || y === null) return (x === null) - (y === null);
    return x < y ? -sign : x > y ? sign : 0;
  });
}

/**
 * Draw `table` ({title, columns: [[key, header]], rows: [{name, values, text}], note}) into `el`,
 * sortable by a click on a header, a page at a time. The order and page the user chose stay on
 * `el` while the picker moves (hvWatchSort, hvWatchPage), apart from the run's table's.
 */
export function renderWatchLeaves(el, table) {
  const sort = el.hvWatchSort || null;
  const redraw = (changes) => {
    Object.assign(el, changes);
    renderWatchLeaves(el, table);
  };
  el.replaceChildren();
  add(el, h("h4", { class: "hv-watch-leaves-title" }, table.title));
  if (table.note) add(el, h("div", { class: "hv-muted hv-watch-leaves-note" }, table.note));
  if (!table.rows?.length) {
    add(el, h("div", { class: "hv-muted" }, "The watch records no parameter."));
    return;
  }
  const rows = sortWatchLeaves(table.rows, sort);
  const pages = Math.ceil(rows.length / LEAF_PAGE_ROWS);
  const page = Math.min(Math.max(0, el.hvWatchPage || 0), pages - 1);
  const shown = rows.slice(page * LEAF_PAGE_ROWS, (page + 1) * LEAF_PAGE_ROWS);
  const header = [["name", "leaf"], ...table.columns].map(([key, title]) =>
    h(
      "th",
      {
        class: "hv-sortable",
        "data-sort": key,
        title: "sort",
        onclick: () =>
          redraw({
            hvWatchSort: { key, descending: sort?.key === key ? !sort.descending : key !== "name" },
            hvWatchPage: 0,
          }),
      },
      title + (sort?.key === key ? (sort.descending ? " ▼" : " ▲") : ""),
    ),
  );
  add(
    el,
    pages > 1
      ? h(
          "div",
          { class: "hv-row hv-leaf-controls" },
          pageButtons(page, pages, shown.length, rows.length, (to) => redraw({ hvWatchPage: to })),
        )
      : null,
    h(
      "table",
      { class: "hv-leaves-table hv-watch-leaves" },
      h("tr", {}, header),
      shown.map((row) =>
        h(
          "tr",
          { "data-leaf": row.name },
          h("td", { class: "hv-slot", title: row.name }, row.name),
          // Python wrote the cells, one number format per column.
          table.columns.map(([key]) => h("td", { class: "hv-num", "data-column": key }, row.text?.[key] ?? "–")),
        ),
      ),
    ),
  );
}
