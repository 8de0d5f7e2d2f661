// The graph view: cytoscape + ELK layered layout of the visible part of the graph.
import cytoscape from "cytoscape";
import elk from "cytoscape-elk";
import { warmUp } from "./elk.js";
import {
  EDIT_COLOR,
  HOOK_COLOR,
  normColor,
  overlayColor,
  presetPositions,
  replayOnVisible,
  visibleGraph,
} from "./logic.js";

cytoscape.use(elk);
warmUp();

// Above this many drawn elements ELK is skipped: the preset layout from the layers Python computed
// stays (ELK takes seconds there, and cannot wrap a long chain inside a compound node).
const ELK_LIMIT = 250;

const STYLE = [
  {
    selector: "node",
    style: {
      "background-color": "data(color)",
      label: "data(label)",
      "font-size": 10,
      color: "#212121",
      "text-valign": "bottom",
      "text-margin-y": 3,
      "text-wrap": "ellipsis",
      "text-max-width": 110,
      width: 26,
      height: 26,
      "border-width": 1,
      "border-color": "#616161",
    },
  },
  { selector: 'node[kind = "leaf"]', style: { shape: "round-rectangle", width: 34, height: 20 } },
  { selector: 'node[kind = "boundary"]', style: { shape: "diamond" } },
  { selector: "node[?hooks]", style: { "border-width": 4, "border-color": HOOK_COLOR, "border-style": "dashed" } },
  { selector: "node[?edited]", style: { "border-width": 5, "border-color": EDIT_COLOR, "border-style": "solid" } },
  {
    selector: "node[?isGroup]",
    style: {
      shape: "round-rectangle",
      "background-opacity": 0.12,
      "background-color": "data(color)",
      "border-color": "#90a4ae",
      "border-width": 1,
      "text-valign": "top",
      "text-halign": "center",
      "font-size": 11,
      "font-weight": "bold",
      padding: 12,
    },
  },
  {
    selector: "node[?collapsed]",
    style: {
      shape: "round-rectangle",
      "background-opacity": 1,
      width: 60,
      height: 30,
      "border-width": 2,
      "border-style": "double",
      "border-color": "#455a64",
      "text-valign": "bottom",
    },
  },
  { selector: "node[?isGroup][?edited]", style: { "border-color": EDIT_COLOR, "border-width": 4 } },
  {
    selector: "edge",
    style: {
      width: 1.5,
      "line-color": "#9e9e9e",
      "target-arrow-color": "#9e9e9e",
      "target-arrow-shape": "triangle",
      "curve-style": "bezier",
      "arrow-scale": 0.8,
    },
  },
  { selector: "node:selected", style: { "overlay-color": "#1e88e5", "overlay-opacity": 0.25, "overlay-padding": 6 } },
  { selector: ".dim", style: { opacity: 0.2 } },
  { selector: ".running", style: { "underlay-color": "#00e5ff", "underlay-opacity": 0.9, "underlay-padding": 9 } },
];

function opLabel(n) {
  if (n.kind === "leaf") return n.id;
  return n.op;
}

/**
 * Build cytoscape element definitions for the visible graph (ops view) or the module view.
 * overlay: the watch view ({node_norms, color_range}) colours by a training step's norms instead.
 */
function elementsFor(graph, collapsed, view, range, overlay) {
  const els = [];
  const colorOf = (id, norm, nan) => (overlay ? overlayColor(id, overlay) : normColor(norm, range, nan));
  if (view === "modules") {
    const mv = graph.module_view || { nodes: [], edges: [] };
    for (const n of mv.nodes) {
      els.push({
        group: "nodes",
        data: {
          id: n.id,
          label: n.label,
          color: colorOf(n.id, n.norm, n.nan),
          kind: n.kind,
          edited: !!n.edited,
          hooks: n.user_hooks > 0,
          target: n.target,
        },
      });
    }
    for (const [u, v] of mv.edges) els.push({ group: "edges", data: { id: `e:${u}->${v}`, source: u, target: v } });
    return { els, representative: new Map(mv.nodes.flatMap((n) => (n.members || []).map((m) => [m, n.id]))) };
  }
  const vis = visibleGraph(graph, collapsed);
  for (const { group, collapsed: isCollapsed, parent } of vis.groups) {
    els.push({
      group: "nodes",
      data: {
        id: group.id,
        label: isCollapsed ? `${group.label} (${group.size})` : group.label,
        color: colorOf(group.id, group.norm, group.nan),
        isGroup: true,
        collapsed: isCollapsed,
        module: group.module,
        edited: !!group.edited,
        hooks: group.user_hooks > 0,
        parent: parent || undefined,
      },
    });
  }
  for (const { node: n, parent } of vis.nodes) {
    els.push({
      group: "nodes",
      data: {
        id: n.id,
        label: opLabel(n),
        color: colorOf(n.id, n.norm, n.nan),
        kind: n.kind,
        edited: !!n.edited,
        hooks: n.user_hooks > 0,
        parent: parent || undefined,
        target: n.id,
      },
    });
  }
  for (const e of vis.edges) els.push({ group: "edges", data: e });
  return { els, representative: vis.representative };
}

export class GraphView {
  constructor(container, { onSelect, onToggleGroup, onPaint }) {
    this.container = container;
    this.onSelect = onSelect;
    this.onToggleGroup = onToggleGroup;
    this.onPaint = onPaint || (() => {});
    this.layoutKey = null;
    this.representative = new Map();
    this.cy = cytoscape({
      container,
      style: STYLE,
      minZoom: 0.02,
      maxZoom: 4,
      boxSelectionEnabled: false,
    });
    this.cy.on("tap", "node", (evt) => {
      const d = evt.target.data();
      if (d.isGroup) {
        if (d.collapsed) this.onToggleGroup(d.module);
        return;
      }
      this.onSelect(d.target ?? d.id);
    });
    this.cy.on("dbltap", "node", (evt) => {
      const d = evt.target.data();
      if (d.isGroup && !d.collapsed) this.onToggleGroup(d.module);
    });
  }

  /**
   * Show a graph. Re-lays out only when what is visible changed (structure, view or collapse state);
   * a re-run of the same graph only recolours.
   */
  render(graph, { collapsed, view, selected, overlay }) {
    if (!graph || !graph.nodes) return Promise.resolve();
    const range = graph.color_range;
    const key = JSON.stringify([graph.structure, view, [...(collapsed || [])].sort()]);
    const t0 = performance.now();
    if (key === this.layoutKey) {
      const { els, representative } = elementsFor(graph, collapsed, view, range, overlay);
      this.representative = representative;
      this.cy.batch(() => {
        for (const el of els) {
          if (el.group !== "nodes") continue;
          const n = this.cy.getElementById(el.data.id);
          if (n.nonempty()) n.data(el.data);
        }
      });
      this.select(selected);
      this.cy.one("render", () => this.onPaint({ kind: "recolour", ms: performance.now() - t0 }));
      this.cy.style().update();
      return Promise.resolve();
    }
    this.layoutKey = key;
    const generation = (this.generation = (this.generation || 0) + 1);
    const { els, representative } = elementsFor(graph, collapsed, view, range, overlay);
    this.representative = representative;
    const visibleCount = els.filter((e) => e.group === "nodes").length;
    const useElk = visibleCount <= ELK_LIMIT;
    // First frame at once from Python's layering; ELK (in a worker) then refines it.
    const preset = presetPositions(els, graph, view, representative, this.cy.width() / Math.max(1, this.cy.height()));
    for (const el of els) if (el.group === "nodes" && preset[el.data.id]) el.position = preset[el.data.id];
    this.cy.batch(() => {
      this.cy.elements().remove();
      this.cy.add(els);
    });
    this.select(selected);
    const painted = (kind) =>
      new Promise((resolve) => {
        this.fitReadable();
        this.cy.one("render", () => {
          this.onPaint({ kind, ms: performance.now() - t0, count: visibleCount, elk: kind === "layout" });
          resolve();
        });
        this.cy.style().update();
      });
    const first = painted("preset");
    if (!useElk) return first;
    return first.then(
      () =>
        new Promise((resolve) => {
          const layout = this.cy.layout({
            name: "elk",
            fit: false,
            animate: false,
            nodeDimensionsIncludeLabels: false,
            elk: {
              algorithm: "layered",
              "elk.direction": "RIGHT",
              "elk.hierarchyHandling": "INCLUDE_CHILDREN",
              "elk.layered.spacing.nodeNodeBetweenLayers": 50,
              "elk.spacing.nodeNode": 28,
              "elk.padding": "[top=28,left=12,bottom=12,right=12]",
            },
          });
          layout.one("layoutstop", () => {
            if (generation !== this.generation) resolve();
            else painted("layout").then(resolve);
          });
          layout.run();
        }),
    );
  }

  select(id) {
    this.cy.nodes(":selected").unselect();
    if (!id) return;
    const rep = this.representative.get(id) ?? id;
    const n = this.cy.getElementById(rep);
    if (n.nonempty()) n.select();
  }

  /** Dim what has not run yet, highlight the node running now. state: from replayState(). */
  showReplay(state) {
    this.cy.batch(() => {
      this.cy.nodes().removeClass("dim running");
      this.cy.edges().removeClass("dim");
      if (!state.active) return;
      const vis = replayOnVisible(state, this.representative);
      this.cy.nodes().forEach((n) => {
        if (n.isParent()) return;
        if (!vis.lit.has(n.id())) n.addClass("dim");
      });
      if (vis.current) this.cy.getElementById(vis.current).addClass("running");
    });
  }

  fit() {
    this.cy.fit(undefined, 30);
  }

  /** Fit the graph, but never below a zoom where labels can be read: then show the loss end. */
  fitReadable() {
    this.cy.fit(undefined, 30);
    if (this.cy.zoom() >= 0.3) return;
    const sinks = this.cy.nodes().filter((n) => !n.isParent() && n.outdegree(false) === 0);
    this.cy.zoom(0.6);
    this.cy.center(sinks.nonempty() ? sinks : undefined);
  }

  destroy() {
    this.cy.destroy();
  }
}
