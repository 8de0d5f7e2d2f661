import { describe, expect, it } from "vitest";
import ELK from "elkjs/lib/elk.bundled.js";
import { elkGraph, fitZoom, positionsOf, wrapsIntoRows } from "../src/layout.js";
import { visibleGraph } from "../src/logic.js";
// The canonical example's `graph` traitlet, as hookviz.widget_data.graph_json wrote it.
import canonical from "./fixtures/canonical.json";

const overlaps = (a, b) =>
  a.x - a.width / 2 < b.x + b.width / 2 &&
  b.x - b.width / 2 < a.x + a.width / 2 &&
  a.y - a.height / 2 < b.y + b.height / 2 &&
  b.y - b.height / 2 < a.y + a.height / 2;

function layOut(nodes, edges, aspect = 2, wrap = false) {
  return new ELK().layout(elkGraph(nodes, edges, aspect, wrap)).then(positionsOf);
}

describe("ELK layout of the module tree", () => {
  it("nests children inside their open box and keeps boxes apart", async () => {
    const nodes = [
      { id: "x", width: 30, height: 24 },
      { id: "group:a", compound: true },
      { id: "a1", parent: "group:a", width: 60, height: 24 },
      { id: "a2", parent: "group:a", width: 60, height: 24 },
      { id: "group:b", width: 80, height: 40 },
      { id: "loss", width: 40, height: 24 },
    ];
    const edges = [
      { id: "e1", source: "x", target: "a1" },
      { id: "e2", source: "a1", target: "a2" },
      { id: "e3", source: "a2", target: "group:b" },
      { id: "e4", source: "group:b", target: "loss" },
    ];
    const pos = await layOut(nodes, edges);
    const box = pos["group:a"];
    for (const id of ["a1", "a2"]) {
      expect(Math.abs(pos[id].x - box.x) + pos[id].width / 2).toBeLessThanOrEqual(box.width / 2);
      expect(Math.abs(pos[id].y - box.y) + pos[id].height / 2).toBeLessThanOrEqual(box.height / 2);
    }
    const top = ["x", "group:a", "group:b", "loss"];
    for (const a of top) for (const b of top) if (a < b) expect(overlaps(pos[a], pos[b])).toBe(false);
    // Data flows left to right.
    expect(pos.x.x).toBeLessThan(pos.a1.x);
    expect(pos["group:b"].x).toBeLessThan(pos.loss.x);
  });

  it("wraps a long chain into rows to fill a wide view", async () => {
    const nodes = Array.from({ length: 40 }, (_, i) => ({ id: `n${i}`, width: 50, height: 30 }));
    const edges = nodes.slice(1).map((n, i) => ({ id: `e${i}`, source: `n${i}`, target: n.id }));
    const straight = await layOut(nodes, edges, 2);
    expect(new Set(Object.values(straight).map((p) => Math.round(p.y))).size).toBe(1);
    const pos = await layOut(nodes, edges, 2, true);
    expect(fitZoom(pos, 1000, 500)).toBeGreaterThan(2 * fitZoom(straight, 1000, 500));
    const rows = new Set(Object.values(pos).map((p) => Math.round(p.y)));
    expect(rows.size).toBeGreaterThan(1);
    const ids = Object.keys(pos);
    for (const a of ids) for (const b of ids) if (a < b) expect(overlaps(pos[a], pos[b])).toBe(false);
  });

  it("wraps only a drawing whose labels would otherwise be too small to draw", () => {
    // 12 px labels, hidden below 8 px on screen: a fit at zoom 0.78 (9.4 px, a GPT-2 with its
    // loss ops) stays left to right; at zoom 0.5 (6 px, a 20-layer MLP) it is wrapped.
    expect(wrapsIntoRows(0.78, 12, 8)).toBe(false);
    expect(wrapsIntoRows(2 / 3, 12, 8)).toBe(false);
    expect(wrapsIntoRows(0.5, 12, 8)).toBe(true);
  });

  it("lays out the canonical graph with one place per drawn node", async () => {
    const vis = visibleGraph(canonical, []);
    const nodes = vis.nodes.map(({ node }) => ({ id: node.id, width: 60, height: 24 }));
    const pos = await layOut(nodes, vis.edges);
    expect(Object.keys(pos).sort()).toEqual(nodes.map((n) => n.id).sort());
  });
});
