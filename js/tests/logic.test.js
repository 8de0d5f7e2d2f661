import { describe, expect, it } from "vitest";
import { toggleGroup } from "../src/collapse.js";
import { overlayColor, textColorOn } from "../src/colors.js";
import { FINDING_LABELS, findingsSummary } from "../src/findings.js";
import { graphSummary } from "../src/graph_summary.js";
import { heatmapWithStep } from "../src/heatmap_figure.js";
import { opLabel } from "../src/names.js";
import { parseNumber } from "../src/numbers.js";
import { replayOnVisible, replayState } from "../src/replay_state.js";
import { moduleTree, visibleCount, visibleGraph } from "../src/visible_graph.js";
import { payload } from "./fixtures.js";

// The canonical example's `graph` traitlet, written by the Python tests from a real run.
const canonical = payload("canonical");

describe("numbers", () => {
  it("parses the JSON-safe forms Python sends", () => {
    expect(parseNumber("NaN")).toBeNaN();
    expect(parseNumber("-Infinity")).toBe(-Infinity);
    expect(parseNumber(null)).toBeNull();
    expect(parseNumber(2.5)).toBe(2.5);
  });
});

describe("node labels", () => {
  it("titles an op in the inspector as the graph labels it, its Node's class kept for below", () => {
    const mul = graphSummary(canonical, "MulBackward0_2");
    expect(mul.label).toBe("Mul ×5");
    expect(mul.op).toBe("MulBackward0");
    const labels = canonical.nodes.map((n) => [n.id, graphSummary(canonical, n.id).label]);
    expect(labels).toHaveLength(9);
    expect(labels.map(([, label]) => label)).toEqual(canonical.nodes.map(opLabel));
    expect(Object.fromEntries(labels).SubBackward0_0).toBe("Sub");
    expect(Object.fromEntries(labels).x).toBe("x");
  });
});

describe("grouping and collapse", () => {
  const graph = {
    nodes: [
      { id: "x", module: "" },
      { id: "a", module: "enc.l0" },
      { id: "b", module: "enc.l0" },
      { id: "c", module: "enc.l1" },
      { id: "d", module: "head" },
    ],
    edges: [
      ["x", "a", 0],
      ["a", "b", 0],
      ["b", "c", 0],
      ["x", "c", 1],
      ["c", "d", 0],
    ],
    groups: [
      { id: "group:enc", module: "enc", parent: null },
      { id: "group:enc.l0", module: "enc.l0", parent: "group:enc" },
      { id: "group:enc.l1", module: "enc.l1", parent: "group:enc" },
      { id: "group:head", module: "head", parent: null },
    ],
  };

  it("shows every node inside its innermost group when nothing is collapsed", () => {
    const v = visibleGraph(graph, []);
    expect(v.nodes.map((n) => [n.node.id, n.parent])).toEqual([
      ["x", null],
      ["a", "group:enc.l0"],
      ["b", "group:enc.l0"],
      ["c", "group:enc.l1"],
      ["d", "group:head"],
    ]);
    expect(v.groups.find((g) => g.group.id === "group:enc.l0").parent).toBe("group:enc");
    expect(v.edges).toHaveLength(5);
  });

  it("folds a collapsed group into one node and merges its edges", () => {
    const v = visibleGraph(graph, ["enc"]);
    expect(v.nodes.map((n) => n.node.id)).toEqual(["x", "d"]);
    expect(v.groups.map((g) => [g.group.id, g.collapsed])).toEqual([
      ["group:enc", true],
      ["group:head", false],
    ]);
    const edges = v.edges.map((e) => [e.source, e.target, e.count]);
    expect(edges).toEqual([
      ["x", "group:enc", 2],
      ["group:enc", "d", 1],
    ]);
    expect(v.representative.get("b")).toBe("group:enc");
  });

  it("an outer collapsed group hides inner groups", () => {
    const v = visibleGraph(graph, ["enc", "enc.l0"]);
    expect(v.groups.map((g) => g.group.id)).not.toContain("group:enc.l0");
    expect(visibleCount(graph, ["enc"])).toBeLessThan(visibleCount(graph, []));
  });

  it("draws the module tree: boxes to the first closed module, edges to children, no ops", () => {
    const g = (module, parent) => ({ id: `group:${module}`, module, parent: parent && `group:${parent}` });
    const graph = {
      groups: [g("h", null), g("h.0", "h"), g("h.1", "h"), g("h.0.attn", "h.0"), g("head", null)],
      nodes: [
        { id: "mm", module: "h.0.attn" },
        { id: "add", module: "h" },
        { id: "loss", module: "" },
      ],
      edges: [],
    };
    const open = moduleTree(graph, ["h.0"]);
    expect(open.groups.map((x) => [x.group.module, x.collapsed, x.hasChildren])).toEqual([
      ["h", false, true],
      ["h.0", true, true],
      ["h.1", false, false],
      ["head", false, false],
    ]);
    expect(open.edges.map((e) => [e.source, e.target])).toEqual([
      ["group:h", "group:h.0"],
      ["group:h", "group:h.1"],
    ]);
    expect(open.representative.get("mm")).toBe("group:h.0");
    expect(open.representative.get("add")).toBe("group:h");
    expect(open.representative.has("loss")).toBe(false);
    const closed = moduleTree(graph, ["h"]);
    expect(closed.groups.map((x) => x.group.module)).toEqual(["h", "head"]);
    expect(closed.representative.get("mm")).toBe("group:h");
  });

  it("opens a closed box one level and closes an open one", () => {
    const groups = [
      { module: "h", parent: null },
      { module: "h.0", parent: "group:h" },
      { module: "h.1", parent: "group:h" },
      { module: "h.0.attn", parent: "group:h.0" },
      { module: "z", parent: null },
    ];
    expect(toggleGroup(["h", "z"], "h", groups)).toEqual(["h.0", "h.1", "z"]);
    expect(toggleGroup(["h.0", "h.1", "z"], "h.0", groups)).toEqual(["h.0.attn", "h.1", "z"]);
    expect(toggleGroup(["z"], "h", groups)).toEqual(["h", "z"]);
    expect(toggleGroup([], "z", [])).toEqual(["z"]);
  });

  it("handles the canonical example's real graph payload", () => {
    const v = visibleGraph(canonical, canonical.collapsed || []);
    const ids = v.nodes.map((n) => n.node.id);
    expect(ids).toContain("SubBackward0_0");
    expect(ids).toContain("x");
    expect(v.edges.length).toBe(canonical.edges.length);
  });
});

describe("replay", () => {
  const steps = [
    { node: "loss", hooks: [] },
    { node: "sub", hooks: [{ kind: "user_hook", detail: "legacy backward hook" }] },
    { node: "x", hooks: [] },
  ];

  it("is off at -1", () => {
    const s = replayState(steps, -1);
    expect(s.active).toBe(false);
    expect(s.lit.size).toBe(0);
  });

  it("lights the nodes that ran and highlights the one running", () => {
    const s = replayState(steps, 1);
    expect([...s.lit]).toEqual(["loss", "sub"]);
    expect(s.current).toBe("sub");
    expect(s.hooks).toHaveLength(1);
  });

  it("clamps past the end", () => {
    expect(replayState(steps, 10).current).toBe("x");
  });

  it("maps onto collapsed groups", () => {
    const s = replayOnVisible(replayState(steps, 1), new Map([["sub", "group:m"]]));
    expect(s.current).toBe("group:m");
    expect(s.lit.has("group:m")).toBe(true);
  });
});

describe("text on a colour", () => {
  it("writes dark text on light colours and light text on dark ones", () => {
    expect(textColorOn("#fde725")).toBe("#111111");
    expect(textColorOn("#440154")).toBe("#ffffff");
  });
});

describe("diagnosis banner", () => {
  it("counts findings per kind in plain words", () => {
    expect(findingsSummary({ vanishing: 2, nan: 1 })).toBe("2 vanishing, 1 NaN/Inf origin");
    expect(findingsSummary({ exploding: 1, dead: 3, saturated: 1 })).toBe("1 exploding, 3 dead, 1 saturated");
  });

  it("says nothing for no findings and keeps unknown kinds by name", () => {
    expect(findingsSummary({})).toBe("");
    expect(findingsSummary(undefined)).toBe("");
    expect(findingsSummary({ vanishing: 0 })).toBe("");
    expect(findingsSummary({ odd: 2 })).toBe("2 odd");
    expect(Object.keys(FINDING_LABELS)).toEqual([
      "nan",
      "exploding",
      "vanishing",
      "dead",
      "saturated",
      "update_too_large",
      "update_too_small",
    ]);
  });
});

describe("watch view", () => {
  const overlay = {
    node_colors: { "0.weight": "#440154", "group:0": "#fde725" },
    missing_color: "#bdbdbd",
  };

  it("colours an element as Python coloured the step's norm", () => {
    expect(overlayColor("0.weight", overlay)).toBe("#440154");
    expect(overlayColor("group:0", overlay)).toBe("#fde725");
  });

  it("draws elements without a value in the missing colour", () => {
    expect(overlayColor("AddmmBackward0_0", overlay)).toBe("#bdbdbd");
    expect(overlayColor("toString", overlay)).toBe("#bdbdbd");
    expect(overlayColor("x", null)).toBeUndefined();
  });

  it("marks the shown step on the heatmap without changing the figure", () => {
    const figure = {
      data: [
        {
          type: "heatmap",
          x: [0, 1, 2],
          y: ["a", "b"],
          z: [
            [1, 2, 3],
            [4, 5, null],
          ],
        },
      ],
      layout: { title: { text: "t" }, template: { data: {} }, shapes: [{ type: "rect" }] },
      step_marker: { line: { color: "#e53935", width: 2 } },
    };
    const { data, layout } = heatmapWithStep(figure, 1);
    expect(data).toBe(figure.data);
    expect(layout.template).toBeUndefined();
    expect(layout.shapes).toHaveLength(2);
    expect(layout.shapes[1]).toMatchObject({ type: "line", xref: "x", x0: 1, x1: 1, yref: "paper" });
    expect(layout.shapes[1].line).toBe(figure.step_marker.line);
    expect(figure.layout.shapes).toHaveLength(1);
    expect(figure.layout.template).toBeDefined();
    expect(heatmapWithStep(figure, null).layout.shapes).toHaveLength(1);
  });

  it("draws a watch's step rows under its heatmap and marks the skipped steps", () => {
    // A watch with optimizer= and a GradScaler that skipped step 3 (the total norm before and after
    // clipping first, then the update ratios and the learning rate), written by
    // tests/test_watch_view.py::test_the_watch_view_draws_update_ratio_and_learning_rate_rows...
    const figure = payload("watch_rows");
    const rows = figure.step_rows.rows;
    expect(rows.map((r) => r.kind)).toEqual([
      "grad_norm",
      "update_ratio",
      "update_ratio",
      "update_ratio",
      "learning_rate",
    ]);
    const plain = heatmapWithStep({ ...figure, step_rows: undefined }, 2);
    const { data, layout } = heatmapWithStep(figure, 2);
    // one trace per row after the figure's own, on the rows' axis, cells as Python coloured them
    expect(data.slice(0, figure.data.length)).toEqual(figure.data);
    const added = data.slice(figure.data.length);
    expect(added.map((t) => t.name)).toEqual(rows.map((r) => r.label));
    let compared = 0;
    for (const [trace, row] of added.map((t, i) => [t, rows[i]])) {
      expect(trace.yaxis).toBe("y9");
      expect(trace.x).toEqual(figure.step_rows.steps);
      expect(trace.marker.color).toBe(row.colors);
      expect(trace.text).toBe(row.text);
      compared += 1;
    }
    expect(compared).toBe(5);
    // the figure's own plot moves up; the rows take the bottom and add their height
    expect(layout.height).toBeGreaterThan(plain.layout.height);
    expect(layout.yaxis.domain[0]).toBeGreaterThan(layout.yaxis9.domain[1]);
    // the skipped step: a dotted line in Python's colour across the figure, before the step marker
    const dotted = layout.shapes.filter((s) => s.line?.dash === "dot");
    expect(dotted.map((s) => s.x0)).toEqual([3]);
    expect(dotted[0].line.color).toBe(figure.step_rows.skipped.color);
    expect(layout.shapes.at(-1).x0).toBe(2);
    expect(layout.annotations.map((a) => a.text).filter((t) => t.includes("healthy"))).toHaveLength(1);
    expect(figure.layout.yaxis9).toBeUndefined();
  });
});
