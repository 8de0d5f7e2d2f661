import { describe, expect, it } from "vitest";
import ELK from "elkjs/lib/elk.bundled.js";
import {
  BOX_PADDING,
  edgeRouteStyle,
  elkGraph,
  fitZoom,
  positionsOf,
  routesOf,
  titlePlacement,
  widerBox,
  wraps,
} from "../src/layout.js";
import { visibleGraph } from "../src/visible_graph.js";
// The canonical example's `graph` traitlet, as hookviz.widget.graph.graph_json wrote it.
import canonical from "./fixtures/canonical.json";

const overlaps = (a, b) =>
  a.x - a.width / 2 < b.x + b.width / 2 &&
  b.x - b.width / 2 < a.x + a.width / 2 &&
  a.y - a.height / 2 < b.y + b.height / 2 &&
  b.y - b.height / 2 < a.y + a.height / 2;

function layOut(nodes, edges, aspect = 2, wrap = false, direction = "DOWN") {
  return new ELK().layout(elkGraph(nodes, edges, aspect, wrap, direction)).then(positionsOf);
}

function drawing(nodes, edges) {
  return new ELK()
    .layout(elkGraph(nodes, edges, 2))
    .then((result) => ({ pos: positionsOf(result), routes: routesOf(result) }));
}

// Whether a polyline passes through the inside of a rectangle (shrunk by 1: ends sit on borders).
function crosses(points, r) {
  const inside = (x, y) => Math.abs(x - r.x) < r.width / 2 - 1 && Math.abs(y - r.y) < r.height / 2 - 1;
  for (let i = 0; i + 1 < points.length; i++) {
    const [a, b] = [points[i], points[i + 1]];
    const steps = Math.max(2, Math.ceil(Math.hypot(b.x - a.x, b.y - a.y)));
    for (let k = 0; k <= steps; k++)
      if (inside(a.x + ((b.x - a.x) * k) / steps, a.y + ((b.y - a.y) * k) / steps)) return true;
  }
  return false;
}

// Where cytoscape draws a segments edge styled by edgeRouteStyle: its rule for segment points
// (edge-distances: endpoints), a weight along the start-end line and a distance from it.
function drawnPoints(style, source, target) {
  const offset = (s) => s.split(" ").map(parseFloat);
  const [sx, sy] = offset(style["source-endpoint"]);
  const [tx, ty] = offset(style["target-endpoint"]);
  const start = { x: source.x + sx, y: source.y + sy };
  const end = { x: target.x + tx, y: target.y + ty };
  const length = Math.hypot(end.x - start.x, end.y - start.y);
  const normal = { x: -(end.y - start.y) / length, y: (end.x - start.x) / length };
  const weights = style["segment-weights"] ? style["segment-weights"].split(" ").map(Number) : [];
  const distances = style["segment-distances"] ? style["segment-distances"].split(" ").map(Number) : [];
  const bends = weights.map((w, i) => ({
    x: start.x * (1 - w) + end.x * w + normal.x * distances[i],
    y: start.y * (1 - w) + end.y * w + normal.y * distances[i],
  }));
  return [start, ...bends, end];
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
    // Data flows top to bottom.
    expect(pos.x.y).toBeLessThan(pos.a1.y);
    expect(pos["group:b"].y).toBeLessThan(pos.loss.y);
  });

  it("wraps a long chain into columns to fill a wide view", async () => {
    const nodes = Array.from({ length: 40 }, (_, i) => ({ id: `n${i}`, width: 50, height: 30 }));
    const edges = nodes.slice(1).map((n, i) => ({ id: `e${i}`, source: `n${i}`, target: n.id }));
    const straight = await layOut(nodes, edges, 2);
    expect(new Set(Object.values(straight).map((p) => Math.round(p.x))).size).toBe(1);
    const pos = await layOut(nodes, edges, 2, true);
    expect(fitZoom(pos, 1000, 500)).toBeGreaterThan(2 * fitZoom(straight, 1000, 500));
    const columns = new Set(Object.values(pos).map((p) => Math.round(p.x)));
    expect(columns.size).toBeGreaterThan(1);
    const ids = Object.keys(pos);
    for (const a of ids) for (const b of ids) if (a < b) expect(overlaps(pos[a], pos[b])).toBe(false);
  });

  it("wraps a long chain inside the root module's box, the loss below it", async () => {
    // A 40-layer nn.Sequential: the root module's box holds the chain, the loss box follows it.
    const layers = Array.from({ length: 40 }, (_, i) => ({
      id: `group:${i}`,
      parent: "group:",
      width: 50,
      height: 30,
    }));
    const nodes = [{ id: "group:", compound: true }, ...layers, { id: "group:(loss)", width: 60, height: 30 }];
    const edges = [...layers.slice(1), nodes[nodes.length - 1]].map((n, i) => ({
      id: `e${i}`,
      source: `group:${i}`,
      target: n.id,
    }));
    const straight = await layOut(nodes, edges, 2);
    const pos = await layOut(nodes, edges, 2, true);
    expect(fitZoom(pos, 1000, 500)).toBeGreaterThan(2 * fitZoom(straight, 1000, 500));
    expect(new Set(layers.map((n) => Math.round(pos[n.id].x))).size).toBeGreaterThan(1);
    const box = pos["group:"];
    for (const n of layers) {
      expect(Math.abs(pos[n.id].x - box.x) + pos[n.id].width / 2).toBeLessThanOrEqual(box.width / 2);
      expect(Math.abs(pos[n.id].y - box.y) + pos[n.id].height / 2).toBeLessThanOrEqual(box.height / 2);
    }
    expect(overlaps(box, pos["group:(loss)"])).toBe(false);
    const ids = layers.map((n) => n.id);
    let compared = 0;
    for (const a of ids)
      for (const b of ids)
        if (a < b) {
          expect(overlaps(pos[a], pos[b])).toBe(false);
          compared += 1;
        }
    expect(compared).toBe((40 * 39) / 2);
  });

  it("wraps only a drawing with no open box whose labels would otherwise be too small to draw", () => {
    // 12 px labels, hidden below 8 px on screen: a fit at zoom 0.78 (9.4 px) stays straight; at
    // zoom 0.5 (6 px, a 20-layer MLP) it is wrapped, unless a box is open (a wrap cuts through it).
    expect(wraps(0.78, 12, 8)).toBe(false);
    expect(wraps(2 / 3, 12, 8)).toBe(false);
    expect(wraps(0.5, 12, 8)).toBe(true);
    expect(wraps(0.5, 12, 8, true)).toBe(false);
  });

  it("routes a skip connection around the block it skips, drawn where ELK put it", async () => {
    // A residual block inside a box: x -> conv1 -> bn1 -> relu -> conv2 -> bn2 -> add, x -> add.
    const chain = ["conv1", "bn1", "relu", "conv2", "bn2", "add"];
    const nodes = [
      { id: "x", width: 40, height: 24 },
      { id: "group:block", compound: true },
      ...chain.map((id) => ({ id, parent: "group:block", width: 70, height: 24 })),
      { id: "loss", width: 40, height: 24 },
    ];
    const edges = [
      { id: "e:x->conv1", source: "x", target: "conv1" },
      ...chain.slice(1).map((id, i) => ({ id: `e:${chain[i]}->${id}`, source: chain[i], target: id })),
      { id: "e:x->add", source: "x", target: "add" },
      { id: "e:add->loss", source: "add", target: "loss" },
    ];
    const { pos, routes } = await drawing(nodes, edges);
    expect(Object.keys(routes).sort()).toEqual(edges.map((e) => e.id).sort());
    let compared = 0;
    for (const e of edges) {
      const route = routes[e.id];
      // Out of the source's bottom, into the target's top: data flows down.
      expect(route[0].y).toBeCloseTo(pos[e.source].y + pos[e.source].height / 2, 3);
      expect(route.at(-1).y).toBeCloseTo(pos[e.target].y - pos[e.target].height / 2, 3);
      for (const n of nodes) {
        if (n.compound || n.id === e.source || n.id === e.target) continue;
        expect(crosses(route, pos[n.id]), `${e.id} through ${n.id}`).toBe(false);
        compared++;
      }
      // Cytoscape, given the style, draws the route's points.
      const style = edgeRouteStyle(route, pos[e.source], pos[e.target]);
      const drawn = drawnPoints(style, pos[e.source], pos[e.target]);
      expect(drawn.length).toBe(route.length);
      drawn.forEach((p, i) => {
        expect(p.x).toBeCloseTo(route[i].x, 1);
        expect(p.y).toBeCloseTo(route[i].y, 1);
      });
    }
    expect(compared).toBe(edges.length * (nodes.length - 1) - 2 * edges.length);
    // The skip has bends: it goes around conv1 ... bn2, not through them.
    expect(routes["e:x->add"].length).toBeGreaterThan(2);
    expect(edgeRouteStyle(routes["e:x->add"], pos.x, pos.add)["curve-style"]).toBe("segments");
  });

  it("draws no route for an edge whose ends meet", () => {
    expect(
      edgeRouteStyle(
        [
          { x: 1, y: 1 },
          { x: 1, y: 1 },
        ],
        { x: 0, y: 0 },
        { x: 0, y: 2 },
      ),
    ).toBe(null);
    expect(edgeRouteStyle(undefined, { x: 0, y: 0 }, { x: 0, y: 2 })).toBe(null);
  });

  it("lays out the canonical graph with one place per drawn node", async () => {
    const vis = visibleGraph(canonical, []);
    const nodes = vis.nodes.map(({ node }) => ({ id: node.id, width: 60, height: 24 }));
    const pos = await layOut(nodes, vis.edges);
    expect(Object.keys(pos).sort()).toEqual(nodes.map((n) => n.id).sort());
  });
});

describe("box titles clear of edges", () => {
  const width = () => 40;
  // a box holding b1 -> b2, entered from above by an edge from a
  const nodes = [
    { id: "a", width: 40, height: 20 },
    { id: "B", compound: true },
    { id: "b1", parent: "B", width: 40, height: 20 },
    { id: "b2", parent: "B", width: 40, height: 20 },
  ];
  const edges = [
    { id: "e1", source: "a", target: "b1" },
    { id: "e2", source: "b1", target: "b2" },
  ];
  const crossesTitle = (laid, titles) => {
    const p = laid.pos.B;
    const inner = [laid.pos.b1, laid.pos.b2];
    const centre =
      (Math.min(...inner.map((c) => c.x - c.width / 2)) + Math.max(...inner.map((c) => c.x + c.width / 2))) / 2;
    const x = centre + titles.B.dx;
    const title = { x, y: p.y - p.height / 2 + BOX_PADDING.top / 2, width: 40, height: BOX_PADDING.top };
    return Object.values(laid.routes).some((points) => crosses(points, title));
  };

  it("a title with no room beside the entering edge has none, and a box widened for it has", async () => {
    const laid = await drawing(nodes, edges);
    const titles = titlePlacement(nodes, edges, { positions: laid.pos, routes: laid.routes }, width);
    // the box is as wide as its content: the edge enters where the title would sit
    expect(titles.B.clear).toBe(false);
    const wider = nodes.map((n) => (n.id === "B" ? { ...n, minWidth: widerBox(laid.pos.B.width, 40) } : n));
    const again = await drawing(wider, edges);
    expect(again.pos.B.width).toBeGreaterThanOrEqual(widerBox(laid.pos.B.width, 40));
    const placed = titlePlacement(wider, edges, { positions: again.pos, routes: again.routes }, width);
    expect(placed.B.clear).toBe(true);
    expect(crossesTitle(again, placed)).toBe(false);
  });

  it("a title goes to the leftmost stretch of its band that no edge crosses", () => {
    const positions = {
      B: { x: 100, y: 100, width: 200, height: 100 },
      b1: { x: 60, y: 120, width: 40, height: 20 },
      b2: { x: 140, y: 120, width: 40, height: 20 },
      x: { x: 30, y: 10, width: 20, height: 20 },
      y: { x: 90, y: 10, width: 20, height: 20 },
    };
    // a vertical edge through the band at x = 30, one at x = 90
    const routes = {
      e1: [
        { x: 30, y: 20 },
        { x: 30, y: 110 },
      ],
      e2: [
        { x: 90, y: 20 },
        { x: 90, y: 110 },
      ],
    };
    const items = [
      { id: "B", compound: true },
      { id: "b1", parent: "B" },
      { id: "b2", parent: "B" },
    ];
    const lines = [
      { id: "e1", source: "x", target: "b1" },
      { id: "e2", source: "y", target: "b2" },
    ];
    const placed = titlePlacement(items, lines, { positions, routes }, () => 40);
    // left of the band: 10; blocked 26..34 and 86..94: 34..74 is the first stretch of 40
    expect(placed.B).toEqual({ dx: 34 + 20 - 100, clear: true });
    const narrow = titlePlacement(items, lines, { positions, routes }, () => 60);
    expect(narrow.B.dx).toBe(94 + 30 - 100);
  });
});
