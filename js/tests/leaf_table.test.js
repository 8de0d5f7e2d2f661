import { describe, expect, it } from "vitest";
import { leafChange, sortLeaves } from "../src/leaf_table.js";

// A leaf row as hookviz.widget.leaf_table writes it (its ratio: now / then, null when either is
// missing or zero).
const leaf = (name, then, now) => ({
  name,
  before: { norm: then },
  after: { norm: now },
  changed: then !== now,
  ratio: then === null || now === null || then === 0 ? null : now / then,
});

describe("leaf table order", () => {
  const leaves = [
    leaf("grew", 1, 1000),
    leaf("same", 2, 2),
    leaf("shrank", 1, 1e-5),
    leaf("little", 1, 1.5),
    leaf("zeroed", 3, 0),
    leaf("missing", null, 1),
  ];

  it("most changed first: a decrease counts as much as an increase", () => {
    expect(leafChange(leaves[0])).toBeCloseTo(3);
    expect(leafChange(leaves[2])).toBeCloseTo(5);
    const order = sortLeaves(leaves, { key: "change", descending: true }).map((l) => l.name);
    expect(order).toEqual(["zeroed", "shrank", "grew", "little", "same", "missing"]);
  });

  it("the × baseline column puts the largest decrease last, which most changed does not", () => {
    const order = sortLeaves(leaves, { key: "ratio", descending: true }).map((l) => l.name);
    expect(order.slice(0, 5)).toEqual(["grew", "little", "same", "shrank", "zeroed"]);
  });
});
