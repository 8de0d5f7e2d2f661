import { describe, expect, it } from "vitest";
import { leafChange, sortLeaves } from "../src/panels.js";
import { formatPercent } from "../src/logic.js";

const leaf = (name, then, now) => ({ name, before: { norm: then }, after: { norm: now }, changed: then !== now });

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

describe("formatPercent", () => {
  it("never rounds a part to all or nothing", () => {
    expect([0, 1, 0.37, 0.995, 0.9999, 1 - 64 / 3.2e6, 2e-5, 0.004].map(formatPercent)).toEqual([
      "0%",
      "100%",
      "37%",
      "99.5%",
      "99.99%",
      "> 99.99%",
      "< 0.01%",
      "0.4%",
    ]);
  });
});
