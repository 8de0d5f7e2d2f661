// The graph view: the module tree as nested boxes (cytoscape compound nodes), laid out by ELK in
// a web worker (graph_layout.js), fitted to the box, labels drawn only where they are readable.
import cytoscape from "cytoscape";
import { warmUp } from "./elk.js";
import { edgeRouteStyle } from "./layout.js";
import { elementsFor, treeElementsFor } from "./graph_elements.js";
import { layOut } from "./graph_layout.js";
import { FONT_SIZE, MIN_LABEL_PX, styleFor, textWidth, theme } from "./graph_style.js";
import { replayOnVisible } from "./replay_state.js";
import { unionBox, viewportFor, wheelZoomFactor } from "./viewport.js";

warmUp();

// A fit never zooms in further than this: a small graph is drawn at its natural size.
const MAX_FIT_ZOOM = 1.4;
// The Module tree view's boxes are few and hold one short label each: a small tree is drawn
// larger (two boxes, a root and "(loss)", filled a corner of the canvas at 1.4).
const TREE_FIT_ZOOM = 2.5;
// A view the page chooses (first view, an opened box, a found node) never zooms out below this:
// labels stay readable; a drawing too large for it is shown from its top, where data enters.
const READABLE_ZOOM = (MIN_LABEL_PX / FONT_SIZE) * 1.05;
const ANIMATION_MS = 300;

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
    this.tree = tree;
    const key = JSON.stringify([graph.structure, [...(collapsed || [])].sort(), tree]);
    const t0 = performance.now();
    const { els, representative } = (tree ? treeElementsFor : elementsFor)(
      graph,
      collapsed,
      overlay,
      editState,
      textWidth,
    );
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
    const positions = cached ? Promise.resolve(cached) : layOut(els, nodes, tree, this.cy.width(), this.cy.height());
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
  frame(
    {
      ids = null,
      around = null,
      maxZoom = this.tree && !ids?.length ? TREE_FIT_ZOOM : MAX_FIT_ZOOM,
      minZoom = READABLE_ZOOM,
    } = this.subject || {},
  ) {
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
