// The cytoscape elements of what the graph view draws, on graph payloads the Python tests wrote.
import { describe, expect, it } from "vitest";
import { collapseAll } from "../src/collapse.js";
import { EDIT_COLOR } from "../src/colors.js";
import { elementsFor, treeElementsFor } from "../src/graph_elements.js";
import { opLabel, prepareGraph } from "../src/names.js";
import { moduleTree, visibleGraph } from "../src/visible_graph.js";
import { payload } from "./fixtures.js";

// A label's width in px as a monospaced 7 px font measures it (the page measures in its canvas).
const measure = (text) => 7 * text.length;

describe("the graph view's elements", () => {
  it("draws every op and leaf of an open graph with its label, colour and size", () => {
    const graph = prepareGraph(payload("canonical"));
    const { els, representative } = elementsFor(graph, [], null, {}, measure);
    const nodes = els.filter((e) => e.group === "nodes" && !e.data.isGroup);
    expect(nodes.map((e) => e.data.id)).toEqual(graph.nodes.map((n) => n.id));
    const compared = nodes.filter((e) => {
      const n = graph.nodes.find((m) => m.id === e.data.id);
      expect(e.data.label).toBe(opLabel(n));
      expect(e.data.width).toBe(Math.ceil(measure(opLabel(n))) + 14);
      expect(e.data.color).toBe(n.color);
      expect(["#111111", "#ffffff"]).toContain(e.data.textColor);
      return true;
    });
    expect(compared.length).toBe(9);
    expect(els.filter((e) => e.group === "edges")).toHaveLength(visibleGraph(graph, []).edges.length);
    expect(representative.get("x")).toBe("x");
  });

  it("draws a closed box for each collapsed module, titled with its path, type and identical blocks", () => {
    const graph = prepareGraph(payload("gpt2"));
    const collapsed = collapseAll(graph.groups);
    const { els } = elementsFor(graph, collapsed, null, {}, measure);
    const boxes = els.filter((e) => e.data.isGroup);
    expect(boxes.map((e) => e.data.module).sort()).toEqual(
      visibleGraph(graph, collapsed)
        .groups.map((g) => g.group.module)
        .sort(),
    );
    const h = prepareGraph(payload("gpt2")).groups.find((g) => g.module === "transformer.h.3");
    const open = elementsFor(
      graph,
      [...collapsed.filter((m) => m !== "transformer"), "transformer.h.3"],
      null,
      {},
      measure,
    );
    const block = open.els.find((e) => e.data.id === h.id);
    expect(block.data.label).toBe("h.3 ≡");
    expect(block.data.title).toBe("transformer.h.3 (GPT2Block), 4 of 6 identical blocks");
    expect(block.data.collapsed).toBe(true);
  });

  it("colours by the watch overlay when one is shown, and marks pending edits", () => {
    const graph = prepareGraph(payload("canonical"));
    const overlay = { node_colors: { x: "#000000" }, missing_color: "#eeeeee" };
    const { els } = elementsFor(graph, [], overlay, { pending_targets: ["y"] }, measure);
    const byId = Object.fromEntries(els.filter((e) => e.group === "nodes").map((e) => [e.data.id, e.data]));
    expect([byId.x.color, byId.x.textColor, byId.y.color]).toEqual(["#000000", "#ffffff", "#eeeeee"]);
    expect([byId.y.pending, byId.x.pending]).toEqual([true, false]);
    expect(EDIT_COLOR).toMatch(/^#[0-9a-f]{6}$/);
  });

  it("draws the Module tree view as boxes and edges to their children", () => {
    const graph = prepareGraph(payload("gpt2"));
    const { els, representative } = treeElementsFor(graph, [], null, {}, measure);
    const tree = moduleTree(graph, []);
    expect(els.filter((e) => e.group === "nodes")).toHaveLength(tree.groups.length);
    expect(els.filter((e) => e.group === "edges" && e.data.tree)).toHaveLength(tree.edges.length);
    expect(els.filter((e) => e.data.openable).length).toBe(tree.groups.filter((g) => g.hasChildren).length);
    expect(representative.size).toBe(tree.representative.size);
  });
});
