import { describe, expect, it } from "vitest";
import {
  NAN_COLOR,
  NO_GRAD_COLOR,
  ZERO_GRAD_COLOR,
  FINDING_LABELS,
  findingsSummary,
  heatmapWithStep,
  overlayColor,
  formatNumber,
  formatValue,
  legendStops,
  nextStep,
  normColor,
  parseNumber,
  replayOnVisible,
  replayState,
  textColorOn,
  beyondRange,
  toggleGroup,
  moduleTree,
  viridis,
  visibleCount,
  visibleGraph,
} from "../src/logic.js";
import { payload } from "./fixtures.js";

// The canonical example's `graph` traitlet, written by the Python tests from a real run.
const canonical = payload("canonical");

describe("colour scale", () => {
  it("maps the ends of the range to the ends of viridis", () => {
    expect(viridis(0)).toBe("#440154");
    expect(viridis(1)).toBe("#fde725");
    expect(viridis(-5)).toBe("#440154");
    expect(viridis(7)).toBe("#fde725");
  });

  it("colours by log10 of the norm within the range", () => {
    const range = { lo: -2, hi: 2 };
    expect(normColor(0.01, range)).toBe(viridis(0));
    expect(normColor(100, range)).toBe(viridis(1));
    expect(normColor(1, range)).toBe(viridis(0.5));
  });

  it("marks NaN and Inf red, zero dark and missing grey", () => {
    expect(normColor("NaN", {})).toBe(NAN_COLOR);
    expect(normColor("Infinity", {})).toBe(NAN_COLOR);
    expect(normColor(1, {}, true)).toBe(NAN_COLOR);
    expect(normColor(0, {})).toBe(ZERO_GRAD_COLOR);
    expect(normColor(null, {})).toBe(NO_GRAD_COLOR);
  });

  it("gives legend stops from lo to hi", () => {
    const stops = legendStops({ lo: -4, hi: 4 }, 5);
    expect(stops.map((s) => s.log10)).toEqual([-4, -2, 0, 2, 4]);
    expect(stops[0].color).toBe(viridis(0));
  });
});

describe("numbers", () => {
  it("parses the JSON-safe forms Python sends", () => {
    expect(parseNumber("NaN")).toBeNaN();
    expect(parseNumber("-Infinity")).toBe(-Infinity);
    expect(parseNumber(null)).toBeNull();
    expect(parseNumber(2.5)).toBe(2.5);
  });

  it("prints integers in full and other numbers short", () => {
    expect(formatNumber(1777792)).toBe("1777792");
    expect(formatNumber(0.5)).toBe("0.5");
    expect(formatNumber(1e-7)).toBe("1.00e-7");
    expect(formatNumber("NaN")).toBe("NaN");
    expect(formatValue([1777792, 1777764])).toBe("[1777792, 1777764]");
    expect(
      formatValue([
        [1, 2],
        [3, -4],
      ]),
    ).toBe("[[1, 2], [3, -4]]");
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

  it("clamps past the end and wraps when playing", () => {
    expect(replayState(steps, 10).current).toBe("x");
    expect(nextStep(1, 3)).toBe(2);
    expect(nextStep(2, 3)).toBe(-1);
  });

  it("maps onto collapsed groups", () => {
    const s = replayOnVisible(replayState(steps, 1), new Map([["sub", "group:m"]]));
    expect(s.current).toBe("group:m");
    expect(s.lit.has("group:m")).toBe(true);
  });
});

describe("text and range marks", () => {
  it("writes dark text on light colours and light text on dark ones", () => {
    expect(textColorOn(viridis(1))).toBe("#111111");
    expect(textColorOn(viridis(0))).toBe("#ffffff");
  });

  it("marks norms outside the baseline's colour range", () => {
    const range = { lo: -2, hi: 1 };
    expect(beyondRange(1e3, range)).toBe(true);
    expect(beyondRange(1e-5, range)).toBe(true);
    expect(beyondRange(1, range)).toBe(false);
    expect(beyondRange(0, range)).toBe(false);
    expect(beyondRange(null, range)).toBe(false);
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
    expect(Object.keys(FINDING_LABELS)).toEqual(["nan", "exploding", "vanishing", "dead", "saturated"]);
  });
});

describe("watch view", () => {
  const overlay = {
    node_norms: { "0.weight": 0.01, "group:0": 1, "module:2": "nan", "2.bias": 0 },
    color_range: { lo: -2, hi: 0 },
  };

  it("colours an element by the step's norm on the watch's range", () => {
    expect(overlayColor("0.weight", overlay)).toBe(viridis(0));
    expect(overlayColor("group:0", overlay)).toBe(viridis(1));
    expect(overlayColor("module:2", overlay)).toBe(NAN_COLOR);
    expect(overlayColor("2.bias", overlay)).toBe(ZERO_GRAD_COLOR);
  });

  it("draws elements without a value grey", () => {
    expect(overlayColor("AddmmBackward0_0", overlay)).toBe(NO_GRAD_COLOR);
    expect(overlayColor("toString", overlay)).toBe(NO_GRAD_COLOR);
    expect(overlayColor("x", null)).toBe(NO_GRAD_COLOR);
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
    };
    const { data, layout } = heatmapWithStep(figure, 1);
    expect(data).toBe(figure.data);
    expect(layout.template).toBeUndefined();
    expect(layout.shapes).toHaveLength(2);
    expect(layout.shapes[1]).toMatchObject({ type: "line", xref: "x", x0: 1, x1: 1, yref: "paper" });
    expect(figure.layout.shapes).toHaveLength(1);
    expect(figure.layout.template).toBeDefined();
    expect(heatmapWithStep(figure, null).layout.shapes).toHaveLength(1);
  });
});
