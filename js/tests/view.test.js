// The view's rules (collapse.js, find.js, names.js: their one home) on graph payloads the Python tests wrote from real
// runs: a 2-, 6-, 12- and 40-block residual stack (blocks.i.fc, head), a 6-layer GPT-2, an 8-layer
// sigmoid MLP (mlp) and notebook 05's residual stack, its Adds outside the blocks' list (residual).
import { describe, expect, it } from "vitest";
import {
  collapseAll,
  defaultCollapsed,
  firstCollapsed,
  interleaved,
  reveal,
  revealTarget,
  ROW_BUDGET,
  toggleGroup,
  treeCollapsed,
  VISIBLE_BUDGET,
} from "../src/collapse.js";
import { find } from "../src/find.js";
import { graphSummary } from "../src/graph_summary.js";
import { IDENTICAL_BLOCKS_MIN, prepareGraph, shortName } from "../src/names.js";
import { moduleTree, visibleCount, visibleGraph } from "../src/visible_graph.js";
import { replaceNote, siteLabel } from "../src/editor.js";
import { savedModel } from "../src/saved.js";
import { payload } from "./fixtures.js";

const blocks = (n, prefix = "blocks") => Array.from({ length: n }, (_, i) => `${prefix}.${i}`);

describe("the first view", () => {
  it("draws a small model's every op", () => {
    expect(defaultCollapsed(payload("deep2"))).toEqual([]);
    expect(defaultCollapsed(payload("canonical"))).toEqual([]);
  });

  it("opens a large graph as its module tree, within the budget", () => {
    const graph = payload("deep40");
    const collapsed = defaultCollapsed(graph);
    expect(collapsed.length).toBeGreaterThan(0);
    expect(visibleCount(graph, collapsed)).toBeLessThanOrEqual(VISIBLE_BUDGET);
    // Forty identical blocks do not fit one row: `blocks` stays one closed box.
    expect(collapsed).toContain("blocks");
    expect(defaultCollapsed(graph, 2000)).toEqual([]); // a budget that holds everything
  });

  it("opens a box of blocks only when its row fits", () => {
    const six = defaultCollapsed(payload("deep6"));
    expect(six).not.toContain("blocks");
    const twelve = defaultCollapsed(payload("deep12"));
    expect(twelve).toContain("blocks");
    expect(blocks(12).filter((b) => twelve.includes(b))).toEqual([]);
    expect(ROW_BUDGET).toBeGreaterThanOrEqual(6);
    expect(ROW_BUDGET).toBeLessThan(12);
  });

  it("opens GPT-2 to its six blocks, each a closed box", () => {
    const graph = payload("gpt2");
    const collapsed = defaultCollapsed(graph);
    for (const b of blocks(6, "transformer.h")) expect(collapsed).toContain(b);
    expect(collapsed).not.toContain("transformer");
    expect(collapsed).not.toContain("transformer.h");
    for (const m of ["transformer.wte", "transformer.ln_f", "lm_head"]) expect(collapsed).toContain(m);
  });

  it("the Module tree view opens levels while its columns fit", () => {
    const graph = payload("deep12");
    // Depth 0: blocks, head, (loss); depth 1: the 12 blocks; depth 2 would hold 24: closed.
    expect(treeCollapsed(graph.groups)).toEqual([...blocks(12)].sort());
    expect(treeCollapsed(graph.groups, 24)).toEqual([]);
    expect(treeCollapsed(graph.groups, 11)).toEqual(["blocks", ...blocks(12)].sort());
    expect(firstCollapsed(graph, "modules")).toEqual(treeCollapsed(graph.groups));
    expect(firstCollapsed(graph, "ops")).toEqual(defaultCollapsed(graph));
  });
});

describe("the first view of a residual stack and of a selection", () => {
  it("opens a ModuleList whose blocks take turns with the Adds outside it: each Add beside its block", () => {
    const graph = payload("residual");
    expect(interleaved(graph, "blocks")).toBe(true);
    expect(interleaved(payload("deep12"), "blocks")).toBe(false); // its Adds are inside each block
    // Ten blocks are more than a row holds, and they open all the same.
    expect(graph.groups.filter((g) => g.parent === "group:blocks").length).toBeGreaterThan(ROW_BUDGET);
    const collapsed = defaultCollapsed(graph);
    expect(collapsed).not.toContain("blocks");
    const view = visibleGraph(graph, collapsed);
    const adds = view.nodes.filter((n) => n.node.op === "AddBackward0");
    expect(adds.length).toBe(10);
    // Every block box is drawn, and each has an edge to and from an Add: the skip connections.
    let wired = 0;
    for (let i = 0; i < 10; i++) {
      const box = `group:blocks.${i}`;
      expect(view.groups.some((g) => g.group.id === box && g.collapsed)).toBe(true);
      const into = view.edges.some((e) => e.target === box && e.source.startsWith("AddBackward0"));
      const out = view.edges.some((e) => e.source === box && e.target.startsWith("AddBackward0"));
      if (i === 0 ? out : into && out) wired += 1;
    }
    expect(wired).toBe(10);
    expect(visibleCount(graph, collapsed)).toBeLessThanOrEqual(VISIBLE_BUDGET);
  });

  it("opens the boxes around what was selected before the first view (w.select)", () => {
    const graph = payload("gpt2");
    const node = graph.nodes.find((n) => n.kind === "op" && n.module === "transformer.h.3.mlp.c_fc");
    expect(defaultCollapsed(graph)).toContain("transformer.h.3"); // closed without a selection
    for (const view of ["ops", "modules"]) {
      const collapsed = firstCollapsed(graph, view, VISIBLE_BUDGET, node.id);
      for (const box of ["transformer.h", "transformer.h.3", "transformer.h.3.mlp", "transformer.h.3.mlp.c_fc"])
        expect(collapsed).not.toContain(box);
    }
    const drawn = visibleGraph(graph, firstCollapsed(graph, "ops", VISIBLE_BUDGET, node.id));
    expect(drawn.representative.get(node.id)).toBe(node.id);
    const box = firstCollapsed(graph, "ops", VISIBLE_BUDGET, "module:transformer.h.3.attn");
    expect(visibleGraph(graph, box).groups.some((g) => g.group.module === "transformer.h.3.attn")).toBe(true);
  });
});

describe("boxes open and close in place", () => {
  it("collapse all, open one level, close", () => {
    const graph = payload("deep40");
    let collapsed = collapseAll(graph.groups);
    // (the sum after head, which the root's forward runs, is drawn in the (loss) box)
    expect(collapsed).toEqual(["(loss)", "blocks", "head"]);
    collapsed = toggleGroup(collapsed, "blocks", graph.groups);
    expect(collapsed).not.toContain("blocks");
    for (const b of blocks(40)) expect(collapsed).toContain(b);
    collapsed = toggleGroup(collapsed, "blocks.7", graph.groups);
    expect(collapsed).not.toContain("blocks.7");
    expect(collapsed).toContain("blocks.7.fc");
    expect(toggleGroup(collapsed, "blocks", graph.groups)).toContain("blocks");
  });
});

describe("search and reveal", () => {
  it("ranks an exact name, then a name ending with it, then the shortest", () => {
    const graph = {
      groups: ["transformer.h.3", "transformer.h.3.mlp", "mlp"].map((module) => ({ module })),
      nodes: [{ id: "transformer.h.3.mlp.c_fc.weight" }, { id: "MulBackward0_13" }],
    };
    expect(find("mlp", graph)).toBe("module:mlp");
    expect(find("h.3.mlp", graph)).toBe("module:transformer.h.3.mlp");
    expect(find("C_FC.weight", graph)).toBe("transformer.h.3.mlp.c_fc.weight");
    expect(find("mul", graph)).toBe("MulBackward0_13");
    expect(find("  ", graph)).toBeNull();
    expect(find("zzz", graph)).toBeNull();
  });

  it("opens the boxes around a match, and no more", () => {
    const graph = payload("deep40");
    const closed = collapseAll(graph.groups);
    const hit = find("blocks.7.fc", graph);
    expect(hit).toBe("module:blocks.7.fc");
    const opened = revealTarget(closed, hit, graph);
    expect(opened).not.toContain("blocks");
    expect(opened).not.toContain("blocks.7");
    expect(opened).toContain("blocks.7.fc"); // the match itself is drawn as its box
    expect(visibleCount(graph, opened)).toBeLessThan(60);
    // A parameter by the end of its name: the boxes around it open, down to its module.
    const leaf = find("12.fc.weight", graph);
    expect(leaf).toBe("blocks.12.fc.weight");
    const down = revealTarget(closed, leaf, graph);
    expect(down).not.toContain("blocks.12");
    expect(down).not.toContain("blocks.12.fc");
    expect(revealTarget(down, leaf, graph)).toEqual(down); // nothing more to open
    expect(reveal(closed, "", graph.groups, false)).toEqual(closed);
  });

  it("finds GPT-2's container by part of its name", () => {
    const graph = payload("gpt2");
    expect(find("transformer.h", graph)).toBe("module:transformer.h");
    expect(find("h.3.attn", graph)).toBe("module:transformer.h.3.attn");
  });
});

describe("names and identical blocks", () => {
  it("short names keep the list they index", () => {
    expect(shortName("transformer.h.3")).toBe("h.3");
    expect(shortName("transformer.h.3.attn")).toBe("h.3.attn");
    expect(shortName("transformer.h.3.attn.c_attn")).toBe("c_attn");
    expect(shortName("0")).toBe("0");
    expect(shortName("fc1")).toBe("fc1");
  });

  it("labels every box and marks identical siblings from the signatures hookviz sends", () => {
    const gpt2 = prepareGraph(payload("gpt2"));
    const groups = new Map(gpt2.groups.map((g) => [g.module, g]));
    expect(groups.get("transformer.h.3").label).toBe("h.3");
    expect(groups.get("transformer.h.3.attn").label).toBe("h.3.attn");
    expect(groups.get("transformer.h.3").repeat).toEqual({ index: 4, count: 6 });
    expect(groups.get("lm_head").repeat).toBeNull();
    const deep = new Map(prepareGraph(payload("deep40")).groups.map((g) => [g.module, g]));
    expect(deep.get("blocks.3").repeat).toEqual({ index: 4, count: 40 });
    expect(deep.get("blocks.3.fc").label).toBe("blocks.3.fc");
    expect(deep.get("head").repeat).toBeNull();
    // Two alike are not marked: the mark starts at IDENTICAL_BLOCKS_MIN.
    const pair = new Map(prepareGraph(payload("deep2")).groups.map((g) => [g.module, g]));
    expect(IDENTICAL_BLOCKS_MIN).toBe(3);
    expect(pair.get("blocks.0").repeat).toBeNull();
  });

  it("marks blocks, not the layers of an MLP: Linear, Sigmoid, Linear, … are no blocks", () => {
    const mlp = prepareGraph(payload("mlp"));
    const repeated = new Map();
    for (const g of mlp.groups) repeated.set(g.signature, (repeated.get(g.signature) || 0) + 1);
    expect(Math.max(...repeated.values())).toBeGreaterThanOrEqual(IDENTICAL_BLOCKS_MIN); // they repeat
    expect(mlp.groups.length).toBeGreaterThan(10);
    expect(mlp.groups.filter((g) => g.repeat).length).toBe(0);
    const residual = prepareGraph(payload("residual"));
    expect(residual.groups.filter((g) => g.repeat).map((g) => g.module)).toEqual(blocks(10));
  });
});

describe("the inspector from the graph alone", () => {
  it("says what a container is: its children and its parameters' gradient norms", () => {
    const graph = payload("gpt2");
    const s = graphSummary(graph, "module:transformer.h");
    expect(s.kind).toBe("module");
    expect(s.children.map((c) => c.label)).toEqual(["h.0", "h.1", "h.2", "h.3", "h.4", "h.5"]);
    expect(s.children.every((c) => c.type === "GPT2Block")).toBe(true);
    const leaves = graph.nodes.filter((n) => n.kind !== "op" && n.module.startsWith("transformer.h."));
    expect(s.parameters.length).toBe(leaves.length);
    expect(s.parameters.length).toBeGreaterThan(0);
    expect(s.parameters.every((p) => typeof p.norm === "number" && p.norm > 0)).toBe(true);
    expect(s.parameters.map((p) => `transformer.h.${p.name}`)).toEqual(s.parameters.map((p) => p.id));
  });

  it("says what a node is: its op, module, norm and neighbours", () => {
    const graph = payload("canonical");
    const s = graphSummary(graph, "SubBackward0_0");
    expect(s.op).toBe("SubBackward0");
    expect(s.outputs).toContain("MseLossBackward0_0");
    expect(graphSummary(graph, "no such node")).toBeNull();
  });
});

describe("constants come with the payload", () => {
  it("draws the colours and the text Python sent: every node and box has them", () => {
    const graph = payload("canonical");
    expect(graph.color_range.hi).toBeGreaterThan(graph.color_range.lo);
    const elements = [...graph.nodes, ...graph.groups];
    expect(elements.length).toBe(graph.nodes.length + graph.groups.length);
    const colored = elements.filter((e) => /^#[0-9a-f]{6}$/.test(e.color) && typeof e.norm_text === "string");
    expect(colored.length).toBe(elements.length);
    expect(graph.legend.stops.length).toBe(5);
    expect(graph.legend.keys.map((k) => k.text)).toEqual(["NaN/Inf", "zero", "no grad"]);
  });
});

describe("the saved page's model", () => {
  it("answers a selection with the inspector saved for it, and a kernel request with the note", () => {
    const graph = payload("canonical");
    const model = savedModel({
      graph,
      selected: "",
      errors: {},
      static_note: "saved page",
      __inspectors: { SubBackward0_0: { id: "SubBackward0_0", op: "SubBackward0" } },
    });
    const seen = [];
    model.on("change:inspector", () => seen.push(model.get("inspector").id));
    model.set("selected", "SubBackward0_0");
    model.set("selected", "module:(loss)");
    expect(seen).toEqual(["SubBackward0_0", undefined]);
    model.send({ type: "rerun" });
    expect(model.get("errors").rerun).toBe("saved page");
    expect(model.get("__inspectors")).toBeUndefined();
  });
});

describe("the root module's box", () => {
  it("holds a model with no submodules, named by its class, in both views", () => {
    const graph = prepareGraph(payload("canonical"));
    const root = graph.groups.find((g) => g.module === "");
    expect(root.label).toBe("Canonical (root)");
    const drawn = visibleGraph(graph, defaultCollapsed(graph));
    expect(drawn.groups.map((g) => g.group.id).sort()).toEqual(["group:", "group:(loss)"]);
    // every op and leaf of the model sits in it, the loss beside it
    const parents = new Map(drawn.nodes.map(({ node, parent }) => [node.id, parent]));
    expect(parents.get("SubBackward0_0")).toBe("group:");
    expect(parents.get("x")).toBe("group:");
    expect(parents.get("MseLossBackward0_0")).toBe("group:(loss)");
    const tree = moduleTree(graph, treeCollapsed(graph.groups));
    expect(tree.groups.map((g) => g.group.label)).toEqual(["Canonical (root)", "(loss)"]);
  });

  it("is found under the names it shows, and is never closed by the first views", () => {
    const graph = prepareGraph(payload("canonical"));
    for (const name of ["(root)", "Canonical (root)", "Canonical", "canonical"])
      expect(find(name, graph)).toBe("module:");
    const deep = prepareGraph(payload("deep40"));
    expect(defaultCollapsed(deep)).not.toContain("");
    expect(treeCollapsed(deep.groups)).not.toContain("");
    expect(collapseAll(deep.groups)).not.toContain("");
    // its top-level modules hang under it; a closed root opens again to reveal one of them
    expect(deep.groups.find((g) => g.module === "blocks").parent).toBe("group:");
    expect(revealTarget(["", "blocks"], "module:blocks.3", deep)).not.toContain("");
  });

  it("names its hook sites, and says which edit Apply replaces", () => {
    expect(siteLabel("grad_input[2]", ["x", "y", "z"])).toBe("grad_input[2] (z)");
    const edits = [{ id: "e1", target: "", label: "Canonical (root)", slot: "grad_input[0]", source: "grad * 2" }];
    expect(replaceNote(edits, "", "grad_input[0]")).toBe(
      "Apply replaces the edit grad * 2 at Canonical (root) · grad_input[0]",
    );
    expect(replaceNote(edits, "", "grad_input[1]")).toBe("");
  });
});
