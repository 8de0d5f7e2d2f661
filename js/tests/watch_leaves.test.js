import { describe, expect, it } from "vitest";
import { sortWatchLeaves } from "../src/watch_leaves.js";

// Rows as hookviz.widget.watch_json.watch_leaf_table writes them (null: no gradient at the step).
const row = (name, norm, nonfinite = 0) => ({ name, values: { norm, nonfinite } });
const rows = [row("0.weight", 3.5), row("0.bias", null), row("2.weight", "inf", 4), row("2.bias", 0.25)];

describe("watch leaf table order", () => {
  it("keeps the watch's order without a sort", () => {
    expect(sortWatchLeaves(rows, null).map((r) => r.name)).toEqual(["0.weight", "0.bias", "2.weight", "2.bias"]);
  });

  it("sorts by a column's values, largest first, rows without a value last", () => {
    const names = sortWatchLeaves(rows, { key: "norm", descending: true }).map((r) => r.name);
    expect(names).toEqual(["2.weight", "0.weight", "2.bias", "0.bias"]);
    const up = sortWatchLeaves(rows, { key: "norm", descending: false }).map((r) => r.name);
    expect(up).toEqual(["2.bias", "0.weight", "2.weight", "0.bias"]);
  });

  it("sorts by name", () => {
    const names = sortWatchLeaves(rows, { key: "name", descending: false }).map((r) => r.name);
    expect(names).toEqual(["0.bias", "0.weight", "2.bias", "2.weight"]);
  });
});
