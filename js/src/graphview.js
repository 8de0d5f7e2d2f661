// The graph view: the module tree as nested boxes (cytoscape compound nodes), laid out by ELK in
// a web worker, fitted to the box, labels drawn only where they are readable.
import cytoscape from "cytoscape";
import { elkLayout, warmUp } from "./elk.js";
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
} from "./layout.js";
import {
  EDIT_COLOR,
  groupId,
  HOOK_COLOR,
  overlayColor,
  replayOnVisible,
  textColorOn,
  moduleTree,
  opLabel,
  visibleGraph,
} from "./logic.js";

warmUp();

const FONT_SIZE = 12;
// Labels are measured (node widths, box titles) in the font they are drawn in.
const FONT_FAMILY = `-apple-system, "Segoe UI", Roboto, Helvetica, Arial, sans-serif`;
const FONT = `${FONT_SIZE}px ${FONT_FAMILY}`;
const TITLE_FONT = `bold ${FONT}`;
// A label drawn smaller than this many pixels on screen is hidden (shown on hover or zoom).
export const MIN_LABEL_PX = 8;
// A fit never zooms in further than this: a small graph is drawn at its natural size.
const MAX_FIT_ZOOM = 1.4;
// A view the page chooses (first view, an opened box, a found node) never zooms out below this:
// labels stay readable; a drawing too large for it is shown from its top, where data enters.
const READABLE_ZOOM = (MIN_LABEL_PX / FONT_SIZE) * 1.05;
// Zoom per wheel event, as d3-zoom's default: 2^(-deltaY x 0.002) for pixel deltas (a mouse notch
// of 100 px: x1.15), lines x 0.05, pages x 1; a pinch (ctrlKey) ten times faster.
const wheelZoomFactor = (e) =>
  2 ** (-e.deltaY * (e.deltaMode === 1 ? 0.05 : e.deltaMode ? 1 : 0.002) * (e.ctrlKey ? 10 : 1));
const ANIMATION_MS = 300;
const FIT_PADDING = 16;

let measureContext = null;
function textWidth(text, font = FONT) {
  measureContext ??= document.createElement("canvas").getContext("2d");
  measureContext.font = font;
  return measureContext.measureText(text).width;
}

/**
 * The label of a module box: its short name, one line (the full path and type are in the
 * tooltip). A block with identical siblings (the six blocks of a GPT-2) carries "≡".
 */
function boxLabel(group) {
  return group.repeat ? `${group.label} ≡` : group.label;
}

function boxTitle(group) {
  if (group.module === "") return group.label; // the root module's box: "Canonical (root)"
  const kind = group.type ? ` (${group.type})` : "";
  const same = group.repeat ? `, ${group.repeat.index} of ${group.repeat.count} identical blocks` : "";
  return `${group.module}${kind}${same}`;
}

function theme(container) {
  const css = getComputedStyle(container);
  const v = (name, fallback) => css.getPropertyValue(name).trim() || fallback;
  return {
    text: v("--jp-ui-font-color1", "#212121"),
    muted: v("--jp-ui-font-color2", "#616161"),
    edge: v("--jp-border-color1", "#9e9e9e"),
    box: v("--jp-layout-color2", "#eceff1"),
    boxBorder: v("--jp-border-color1", "#90a4ae"),
    select: v("--jp-brand-color1", "#1e88e5"),
  };
}

function styleFor(t) {
  return [
    {
      selector: "node",
      style: {
        "background-color": "data(color)",
        label: "data(label)",
        "font-size": FONT_SIZE,
        "font-family": FONT_FAMILY,
        "min-zoomed-font-size": MIN_LABEL_PX,
        color: "data(textColor)",
        "text-valign": "center",
        "text-halign": "center",
        "text-wrap": "wrap",
        shape: "round-rectangle",
        width: "data(width)",
        height: "data(height)",
        "border-width": 1,
        "border-color": t.boxBorder,
      },
    },
    { selector: 'node[kind = "leaf"]', style: { shape: "rectangle" } },
    { selector: "node[?beyond]", style: { "border-width": 3, "border-style": "dotted", "border-color": t.text } },
    { selector: "node[?hooks]", style: { "border-width": 3, "border-color": HOOK_COLOR, "border-style": "dashed" } },
    { selector: "node[?edited]", style: { "border-width": 4, "border-color": EDIT_COLOR, "border-style": "solid" } },
    { selector: "node[?pending]", style: { "border-width": 4, "border-color": EDIT_COLOR, "border-style": "dashed" } },
    {
      selector: "node[?collapsed]",
      style: { "border-width": 3, "border-style": "double", "border-color": t.boxBorder },
    },
    {
      selector: "node[?isGroup][!collapsed]",
      style: {
        "background-color": "data(color)",
        "background-opacity": 0.1,
        "border-color": "data(color)",
        "border-width": 2,
        color: t.text,
        // The title sits in the band the box's top padding makes, centred at the middle of what
        // the box holds and moved (text-margin-x, set in place()) to where no edge crosses it.
        "text-valign": "top",
        "text-halign": "center",
        "text-wrap": "none",
        "font-weight": "bold",
        padding: BOX_PADDING.side,
      },
    },
    {
      // The Module tree view: every module is one filled box, open or not.
      selector: "node[?tree][!collapsed]",
      style: {
        "background-opacity": 1,
        "border-color": t.boxBorder,
        "border-width": 1,
        color: "data(textColor)",
        "text-valign": "center",
        "font-weight": "normal",
        padding: 0,
      },
    },
    { selector: "node[?isGroup][?edited]", style: { "border-color": EDIT_COLOR, "border-width": 3 } },
    { selector: "node[?isGroup][?pending]", style: { "border-color": EDIT_COLOR, "border-style": "dashed" } },
    {
      selector: "edge",
      style: {
        width: 1.2,
        "line-color": t.edge,
        "target-arrow-color": t.edge,
        "target-arrow-shape": "triangle",
        "curve-style": "bezier",
        "arrow-scale": 0.7,
      },
    },
    {
      selector: "edge[?tree]",
      style: { "curve-style": "taxi", "taxi-direction": "rightward", "target-arrow-shape": "none" },
    },
    {
      selector: "node:selected",
      style: { "overlay-color": t.select, "overlay-opacity": 0.3, "overlay-padding": 5 },
    },
    { selector: ".dim", style: { opacity: 0.2 } },
    { selector: ".running", style: { "underlay-color": "#00e5ff", "underlay-opacity": 0.9, "underlay-padding": 8 } },
  ];
}

/**
 * An element's colour (the watch overlay's, else its norm's: both sent by Python, which colours
 * on the range fixed by the baseline) and the text colour that reads on it.
 */
function painter(overlay) {
  return (item) => {
    const color = overlay ? overlayColor(item.id, overlay) : item.color;
    return { color, textColor: textColorOn(color), beyond: !overlay && !!item.beyond };
  };
}

function pendingTargets(editState) {
  return new Set([...(editState?.pending_targets || []), ...(editState?.removed_targets || [])]);
}

/** (group, collapsed) -> the data of a module's box, in both views. */
function boxData(paint, pending) {
  return (group, collapsed) => {
    const label = boxLabel(group);
    return {
      id: group.id,
      label,
      title: boxTitle(group),
      ...paint(group),
      isGroup: true,
      collapsed,
      module: group.module,
      edited: !!group.edited,
      pending: pending.has(group.module),
      hooks: group.user_hooks > 0,
      width: Math.ceil(textWidth(label)) + 16,
      height: 28,
    };
  };
}

/** Cytoscape element definitions (with their sizes) of what a collapse state draws. */
function elementsFor(graph, collapsed, overlay, editState) {
  const els = [];
  const pending = pendingTargets(editState);
  const paint = painter(overlay);
  const box = boxData(paint, pending);
  const vis = visibleGraph(graph, collapsed);
  for (const { group, collapsed: isCollapsed, parent } of vis.groups) {
    els.push({ group: "nodes", data: { ...box(group, isCollapsed), parent: parent || undefined } });
  }
  for (const { node: n, parent } of vis.nodes) {
    const label = opLabel(n);
    els.push({
      group: "nodes",
      data: {
        id: n.id,
        label,
        title: n.kind === "leaf" ? n.id : `${n.id} in ${n.module || "(root)"}`,
        ...paint(n),
        kind: n.kind,
        edited: !!n.edited,
        pending: pending.has(n.id),
        hooks: n.user_hooks > 0,
        parent: parent || undefined,
        target: n.id,
        width: Math.ceil(textWidth(label)) + 14,
        height: 24,
      },
    });
  }
  for (const e of vis.edges) els.push({ group: "edges", data: e });
  return { els, representative: vis.representative };
}

/** Cytoscape elements of the Module tree view: a box per drawn module, edges to its children. */
function treeElementsFor(graph, collapsed, overlay, editState) {
  const box = boxData(painter(overlay), pendingTargets(editState));
  const tree = moduleTree(graph, collapsed);
  const els = tree.groups.map(({ group, collapsed: closed, hasChildren }) => ({
    group: "nodes",
    data: { ...box(group, closed), tree: true, openable: hasChildren },
  }));
  for (const e of tree.edges) els.push({ group: "edges", data: { ...e, tree: true } });
  return { els, representative: tree.representative };
}

/**
 * The zoom and pan that fit a model-space box into the view, never above maxZoom. Below minZoom
 * the box is shown at minZoom instead: centred along each side that fits, else from its top
 * (where data enters, the drawing flows down) or left edge.
 */
function viewportFor(box, width, height, maxZoom, minZoom = 0) {
  const fit = Math.min(
    maxZoom,
    (width - 2 * FIT_PADDING) / Math.max(1, box.w),
    (height - 2 * FIT_PADDING) / Math.max(1, box.h),
  );
  const zoom = Math.max(fit, Math.min(minZoom, maxZoom));
  const place = (start, size, room) =>
    zoom * size <= room - 2 * FIT_PADDING ? room / 2 - zoom * (start + size / 2) : FIT_PADDING - zoom * start;
  return { zoom, pan: { x: place(box.x1, box.w, width), y: place(box.y1, box.h, height) } };
}

/** The model-space box {x1, y1, w, h} around rectangles {x, y (centre), width, height}. */
function unionBox(rects) {
  let x1 = Infinity;
  let y1 = Infinity;
  let x2 = -Infinity;
  let y2 = -Infinity;
  for (const p of rects) {
    x1 = Math.min(x1, p.x - p.width / 2);
    x2 = Math.max(x2, p.x + p.width / 2);
    y1 = Math.min(y1, p.y - p.height / 2);
    y2 = Math.max(y2, p.y + p.height / 2);
  }
  if (!Number.isFinite(x1)) return { x1: 0, y1: 0, w: 1, h: 1 };
  return { x1, y1, w: x2 - x1, h: y2 - y1 };
}

/**
 * A drawing ({positions, routes, wrap}) with its box titles placed (layout.titlePlacement). A box whose title band had no
 * room between the edges entering it is laid out again wider (layout.widerBox), at most twice.
 */
function titled(items, edges, laid, titleWidth, aspect, direction, tries = 2) {
  const titles = titlePlacement(items, edges, laid, titleWidth);
  const narrow = new Set(Object.keys(titles).filter((id) => !titles[id].clear));
  if (!narrow.size || !tries) return Promise.resolve({ ...laid, titles, passes: 2 - tries });
  const wider = items.map((n) =>
    narrow.has(n.id) ? { ...n, minWidth: widerBox(laid.positions[n.id].width, titleWidth(n.id)) } : n,
  );
  return elkLayout(elkGraph(wider, edges, aspect, laid.wrap, direction)).then((result) =>
    titled(
      wider,
      edges,
      { ...laid, positions: positionsOf(result), routes: routesOf(result) },
      titleWidth,
      aspect,
      direction,
      tries - 1,
    ),
  );
}

export class GraphView {
  constructor(container, { onSelect, onToggleGroup, onPaint, onPlaced, onError, tooltip }) {
    this.container = container;
    this.onSelect = onSelect;
    this.onToggleGroup = onToggleGroup;
    this.onPaint = onPaint || (() => {});
    this.onPlaced = onPlaced || (() => {});
    this.onError = onError || ((message) => console.error(message));
    this.tooltip = tooltip;
    this.layoutKey = null;
    this.layouts = new Map(); // expansion state and view size -> positions ELK computed for them
    this.representative = new Map();
    this.rendering = Promise.resolve();
    // What the page's view frames ({ids, around, maxZoom, minZoom}, see frame; null: the whole
    // drawing, readable), framed again when the view changes size, unless the user moved it since.
    this.subject = null;
    this.userMoved = false;
    // Cytoscape zooms 3 % per mouse-wheel notch once it takes the wheel for an "inaccurate" device
    // (every notch the same delta): the page zooms itself, before cytoscape's own listener (both
    // capture on the container, this one registered first).
    container.addEventListener("wheel", (e) => this.wheelZoom(e), { capture: true, passive: false });
    this.cy = cytoscape({
      container,
      style: styleFor(theme(container)),
      minZoom: 0.02,
      maxZoom: 4,
      boxSelectionEnabled: false,
      autoungrabify: true,
    });
    this.cy.on("tap", "node", (evt) => {
      const d = evt.target.data();
      if (d.isGroup) {
        if (d.collapsed) this.onToggleGroup(d.module);
        this.onSelect(`module:${d.module}`);
        return;
      }
      this.onSelect(d.target ?? d.id);
    });
    this.cy.on("dbltap", "node", (evt) => {
      const d = evt.target.data();
      if (d.isGroup && !d.collapsed && d.openable !== false) this.onToggleGroup(d.module);
    });
    this.cy.on("mouseover", "node", (evt) => this.showTooltip(evt.target));
    this.cy.on("mouseout", "node", () => this.hideTooltip());
    this.cy.on("viewport", () => this.hideTooltip());
    this.cy.on("dragpan", () => (this.userMoved = true));
  }

  wheelZoom(e) {
    if (!this.cy || e.deltaY === 0) return;
    e.preventDefault();
    e.stopImmediatePropagation();
    const r = this.container.getBoundingClientRect();
    this.userMoved = true;
    this.cy.zoom({
      level: Math.max(this.cy.minZoom(), Math.min(this.cy.maxZoom(), this.cy.zoom() * wheelZoomFactor(e))),
      renderedPosition: { x: e.clientX - r.left, y: e.clientY - r.top },
    });
  }

  showTooltip(node) {
    if (!this.tooltip) return;
    const d = node.data();
    const p = node.renderedBoundingBox({ includeLabels: false });
    this.tooltip.textContent = d.isGroup ? d.title : `${d.label} — ${d.title}`;
    this.tooltip.style.left = `${Math.max(0, p.x1)}px`;
    this.tooltip.style.top = `${Math.max(0, p.y2 + 4)}px`;
    this.tooltip.hidden = false;
  }

  hideTooltip() {
    if (this.tooltip) this.tooltip.hidden = true;
  }

  /**
   * Show a graph. Lays out only when what is drawn changed (structure or collapse state), from
   * the cache when that state was laid out before; a re-run of the same graph only recolours.
   */
  render(graph, { collapsed, selected, overlay, editState, view }) {
    if (!graph || !graph.nodes) return Promise.resolve();
    if (selected !== undefined) this.selectedId = selected;
    const tree = view === "modules";
    const key = JSON.stringify([graph.structure, [...(collapsed || [])].sort(), tree]);
    const t0 = performance.now();
    const { els, representative } = (tree ? treeElementsFor : elementsFor)(graph, collapsed, overlay, editState);
    if (key === this.layoutKey) {
      this.representative = representative;
      this.cy.batch(() => {
        for (const el of els) {
          if (el.group !== "nodes") continue;
          const n = this.cy.getElementById(el.data.id);
          if (n.nonempty()) n.data(el.data);
        }
      });
      this.select(this.selectedId);
      return this.painted({ kind: "recolour", t0 });
    }
    const first = this.layoutKey === null;
    this.layoutKey = key;
    // The boxes this change opened (framed once drawn), or closed (kept in view).
    const now = new Set(collapsed || []);
    const was = this.collapsedBefore || now;
    this.collapsedBefore = now;
    const opened = [...was].filter((m) => !now.has(m)).map((m) => `group:${m}`);
    const closed = [...now].filter((m) => !was.has(m)).map((m) => `group:${m}`);
    const generation = (this.generation = (this.generation || 0) + 1);
    const nodes = els.filter((e) => e.group === "nodes");
    // ELK is given the view's aspect ratio and the choice to wrap into rows depends on the view's
    // size: a layout is reused only in a view of about the same size (full screen makes new ones).
    const sized = `${key}|${Math.round(this.cy.width() / 100)}x${Math.round(this.cy.height() / 100)}`;
    const cached = this.layouts.get(sized);
    const positions = cached ? Promise.resolve(cached) : this.layOut(els, nodes, tree);
    this.rendering = positions.then((pos) => {
      if (generation !== this.generation) return null; // a newer state is being drawn
      this.layouts.set(sized, pos);
      const before = new Map(this.cy.nodes().map((n) => [n.id(), { ...n.position() }]));
      this.place(els, pos, before, representative);
      this.onPlaced(performance.now() - t0);
      this.representative = representative;
      this.select(this.selectedId);
      return this.settle(first, opened.length ? { ids: opened } : { around: closed[0] }, t0, nodes.length);
    });
    // A failed layout must not leave a promise that never settles behind every later focus().
    this.rendering = this.rendering.catch((error) => {
      this.layoutKey = null;
      this.onError(`layout failed: ${error?.message || error}`);
    });
    return this.rendering;
  }

  /**
   * ELK positions of the drawn elements and routes of their edges: {positions, routes}. Top to
   * bottom; when its labels would be too small to draw in this view and no box but the root
   * module's is open (a deep chain, see wraps), again wrapped into pieces side by side, and the larger of the two. The
   * Module tree view is a tree left to right, one column per depth.
   */
  layOut(els, nodes, tree = false) {
    const compound = new Set(nodes.map((e) => e.data.parent).filter(Boolean));
    const labels = new Map(nodes.map((e) => [e.data.id, e.data.label]));
    const titleWidth = (id) => Math.ceil(textWidth(labels.get(id) || "", TITLE_FONT)) + 2;
    const items = nodes.map((e) => ({
      id: e.data.id,
      parent: e.data.parent,
      width: e.data.width,
      height: e.data.height,
      compound: compound.has(e.data.id),
      // an open box is at least as wide as its title: most titles then find room in one layout
      minWidth: compound.has(e.data.id) ? titleWidth(e.data.id) + 2 * BOX_PADDING.side : undefined,
    }));
    const edges = els.filter((e) => e.group === "edges").map((e) => e.data);
    const width = this.cy.width();
    const height = this.cy.height();
    const aspect = width / Math.max(1, height);
    const direction = tree ? "RIGHT" : "DOWN";
    const drawing = (result) => ({ positions: positionsOf(result), routes: tree ? {} : routesOf(result) });
    const chosen = elkLayout(elkGraph(items, edges, aspect, false, direction)).then((result) => {
      const straight = drawing(result);
      const zoom = fitZoom(straight.positions, width, height);
      // A tree has one column per depth: wrapping would only tangle its edges.
      // The root module's box is always open; it wraps the chain inside itself (elkGraph).
      const openBox = [...compound].some((id) => id !== groupId(""));
      if (tree || !wraps(zoom, FONT_SIZE, MIN_LABEL_PX, openBox)) return { ...straight, wrap: false };
      return elkLayout(elkGraph(items, edges, aspect, true, direction)).then((result) => {
        const wrapped = drawing(result);
        return fitZoom(wrapped.positions, width, height) > zoom
          ? { ...wrapped, wrap: true }
          : { ...straight, wrap: false };
      });
    });
    if (tree) return chosen; // the Module tree's boxes are filled, titled inside
    return chosen.then((laid) => titled(items, edges, laid, titleWidth, aspect, direction));
  }

  /**
   * Swap in the new elements; those that existed keep their old place for the animation. Each
   * edge is drawn along the route ELK computed for it (edgeRouteStyle), so it passes around the
   * nodes between its ends, as ELK placed them.
   */
  place(els, { positions: pos, routes, titles, passes = 0 }, before, representative) {
    const prior = this.representative;
    this.cy.batch(() => {
      this.cy.elements().remove();
      for (const el of els) {
        if (el.group !== "nodes" || !pos[el.data.id]) continue;
        const { x, y } = pos[el.data.id];
        // A node that was inside a closed box grows out of where that box was.
        const from =
          before.get(el.data.id) ?? before.get(prior.get(el.data.id)) ?? before.get(`group:${el.data.module}`);
        el.position = from ? { ...from } : { x, y };
      }
      this.cy.add(els);
      for (const edge of this.cy.edges()) {
        const d = edge.data();
        const style = edgeRouteStyle(routes[d.id], pos[d.source], pos[d.target]);
        if (style) edge.style(style);
      }
      // Each open box's title where no edge crosses it (layout.titlePlacement).
      for (const [id, { dx }] of Object.entries(titles || {}))
        this.cy.getElementById(id).style("text-margin-x", Math.round(dx * 10) / 10);
    });
    this.titles = titles; // read by the browser tests
    this.titlePasses = passes; // layouts made for this drawing's titles beyond the first (benchmarks)
    const leaves = this.cy.nodes().filter((n) => !n.isParent());
    const moving = leaves.filter((n) => {
      const p = pos[n.id()];
      const q = n.position();
      return p && (p.x !== q.x || p.y !== q.y);
    });
    this.positions = pos;
    this.target = Object.fromEntries(leaves.map((n) => [n.id(), pos[n.id()]]));
    this.moving = before.size ? moving : this.cy.collection();
    if (!before.size) leaves.forEach((n) => n.position(pos[n.id()]));
  }

  /**
   * The viewport the page chooses for what it frames now (`this.subject`: the boxes just opened,
   * a node brought into view, else the whole drawing, kept `around` a box just closed), in the
   * view's size now: fitted, but never below the zoom at which labels are readable (viewportFor).
   */
  frame({ ids = null, around = null, maxZoom = MAX_FIT_ZOOM, minZoom = READABLE_ZOOM } = this.subject || {}) {
    // ELK's boxes hold their children and their title (top padding): their union is exact.
    const all = this.positions || {};
    const drawn = (ids || []).filter((id) => all[id]);
    const box = unionBox(drawn.length ? drawn.map((id) => all[id]) : Object.values(all));
    const [width, height] = [this.cy.width(), this.cy.height()];
    // A box just closed stays in view when the whole drawing is too large to read.
    if (around && all[around] && viewportFor(box, width, height, maxZoom).zoom < minZoom)
      return viewportFor(unionBox([all[around]]), width, height, minZoom, minZoom);
    return viewportFor(box, width, height, maxZoom, minZoom);
  }

  /** After an animation of the view: frame again if the view changed size during it (resize). */
  reframeIfResized() {
    if (!this.resizedMeanwhile) return;
    this.resizedMeanwhile = false;
    if (!this.userMoved) this.cy.viewport(this.frame());
  }

  /**
   * Animate nodes to their places and the viewport to frame `subject` (see frame), then report
   * the paint. When the view changed size meanwhile (the side panel opened with the click that
   * opened a box), the frame is taken again in the new size.
   */
  settle(first, subject, t0, count) {
    this.subject = first ? null : subject;
    this.userMoved = false;
    const view = this.frame();
    if (first) {
      this.cy.viewport(view);
      return this.painted({ kind: "layout", t0, count });
    }
    const moves = this.moving.map((n) =>
      n
        .animation({ position: this.target[n.id()], duration: ANIMATION_MS, easing: "ease-in-out-cubic" })
        .play()
        .promise(),
    );
    const viewport = this.cy
      .animation({ ...view, duration: ANIMATION_MS, easing: "ease-in-out-cubic" })
      .play()
      .promise();
    return Promise.all([...moves, viewport]).then(() => {
      this.reframeIfResized();
      return this.painted({ kind: "layout", t0, count });
    });
  }

  painted({ kind, t0, count }) {
    return new Promise((resolve) => {
      this.cy.one("render", () => {
        this.onPaint({ kind, ms: performance.now() - t0, count, zoom: this.cy.zoom() });
        resolve();
      });
      this.cy.style().update();
    });
  }

  /** The drawn element that stands for a node id or "module:<name>". */
  elementFor(id) {
    if (!id) return this.cy.collection();
    const own = id.startsWith("module:") ? `group:${id.slice(7)}` : id;
    const direct = this.cy.getElementById(own);
    if (direct.nonempty()) return direct;
    return this.cy.getElementById(this.representative.get(id) ?? id);
  }

  /** Mark the element that stands for a node id or "module:<name>" as selected (kept across layouts). */
  select(id) {
    this.selectedId = id;
    this.cy.nodes(":selected").unselect();
    const n = this.elementFor(id);
    if (n.nonempty()) n.select();
  }

  /**
   * Bring a selected element into view once the drawing in progress is done: centre it, zoomed
   * so its labels can be read, unless it is already in view and readable.
   */
  focus(id) {
    return this.rendering.then(() => {
      const n = this.elementFor(id);
      if (n.empty()) return;
      const box = n.renderedBoundingBox({ includeLabels: true });
      const readable = this.cy.zoom() * FONT_SIZE >= MIN_LABEL_PX;
      // A box larger than the view is in view when its top left corner is (as frame shows it).
      const along = (lo, hi, room) => lo >= 0 && (hi <= room || (hi - lo > room && lo < room / 2));
      const inView = along(box.x1, box.x2, this.cy.width()) && along(box.y1, box.y2, this.cy.height());
      if (inView && readable) return;
      this.subject = { ids: [n.id()], maxZoom: Math.max(1, this.cy.zoom()) };
      this.userMoved = false;
      const model = n.boundingBox({ includeLabels: true });
      const view = viewportFor(
        { x1: model.x1, y1: model.y1, w: model.w, h: model.h },
        this.cy.width(),
        this.cy.height(),
        this.subject.maxZoom,
        READABLE_ZOOM,
      );
      this.cy.stop();
      return this.cy
        .animation({ ...view, duration: ANIMATION_MS, easing: "ease-in-out-cubic" })
        .play()
        .promise()
        .then(() => this.reframeIfResized());
    });
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

  /** Read the theme's colours again (JupyterLab switched theme): cytoscape copies them at creation. */
  restyle() {
    this.cy.style(styleFor(theme(this.container)));
  }

  /** Fit the whole drawing into the box (animated), however small its labels get. */
  fit() {
    this.subject = { ids: null, minZoom: 0 };
    this.userMoved = false;
    this.cy
      .animation({ ...this.frame(), duration: ANIMATION_MS })
      .play()
      .promise()
      .then(() => this.reframeIfResized());
  }

  /**
   * The container changed size (resize handle, full screen, the side panel opening or closing):
   * redraw, and frame again what the page framed last, unless the user zoomed or panned since.
   * During an animation of the view the new frame is taken when it ends (reframeIfResized).
   */
  resize() {
    this.cy.resize();
    if (!this.target || this.userMoved) return;
    if (this.cy.animated()) this.resizedMeanwhile = true;
    else this.cy.viewport(this.frame());
  }

  destroy() {
    this.cy.destroy();
  }
}
