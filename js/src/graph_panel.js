// The graph area: the graph view (graphview.js) made once the widget is in the page, drawn from
// the page's state (the collapsed list, view kind, selection, a watch's overlay, edits), its
// legend, the replay's step shown on it, and a large run's details asked for once it is drawn.
import { errorLine, fill, h } from "./dom.js";
import { GraphView } from "./graphview.js";
import { legend } from "./legend.js";
import { replayState } from "./replay_state.js";

export class GraphPanel {
  /**
   * state: the page's ViewState; root: the widget's element (the benchmark and the browser tests
   * read root.hookviz and root.cy). Callbacks: onSelect(id) selects an element, onTap(id) runs
   * first on a click (the side panel reopens), onToggle() before a box opens or closes.
   */
  constructor(state, root, { onSelect, onTap, onToggle }) {
    this.state = state;
    this.root = root;
    this.onSelect = onSelect;
    this.onTap = onTap;
    this.onToggle = onToggle;
    this.cyEl = h("div", { class: "hv-cy", tabindex: "0" });
    this.tooltip = h("div", { class: "hv-tooltip", hidden: true });
    this.error = errorLine("");
    this.el = h("div", { class: "hv-graph" }, this.cyEl, this.tooltip, this.error);
    this.legend = h("div", { class: "hv-legend" });
    this.view = null; // the GraphView, once the widget is in the page
    this.hidden = []; // what a page without a graph hides (hideWhenGraphless)
    this.lastDraw = Promise.resolve();
    this.detailsAskedFor = null;
    this.focused = null;
    this.replayStep = -1;
    this.replayTimer = 0;
    this.frame = 0;
    // Cytoscape blurs the focused element when the pointer goes down on it, so the graph would
    // never hold the focus that keyboard shortcuts ("/") need: take it once the pointer is up.
    this.cyEl.addEventListener("pointerup", () => setTimeout(() => this.cyEl.focus({ preventScroll: true })));
  }

  /** The parts of the page hidden while a watch is shown alone (no graph). */
  hideWhenGraphless(parts) {
    this.hidden = parts;
  }

  /**
   * Call `ready()` once the element is in the page with a size: cytoscape needs both, and
   * anywidget calls render() before attaching el. The graph view is made first. `toolbar`: the
   * toolbar's element, whose size moves the graph.
   */
  whenAttached(toolbar, ready) {
    const attached = () => {
      if (!this.cyEl.isConnected || this.cyEl.clientWidth === 0) {
        this.frame = requestAnimationFrame(attached);
        return;
      }
      this.makeView(toolbar);
      ready();
    };
    this.frame = requestAnimationFrame(attached);
  }

  makeView(toolbar) {
    const { state, root } = this;
    const view = (this.view = new GraphView(this.cyEl, {
      tooltip: this.tooltip,
      onSelect: (id) => {
        state.mark("tap");
        // A click reopens a closed panel, also on the node it was closed on.
        this.onTap(id);
        this.cyEl.focus({ preventScroll: true });
        this.onSelect(id);
      },
      onToggleGroup: (module) => {
        state.mark("toggle");
        this.onToggle();
        // Opened in the page, with no round trip: the kernel may be busy (recording a large run's
        // details, or another cell); it learns the new state when the change is synced.
        state.toggleGroup(module);
      },
      // The new layout's elements are in place (its animation starts): read by the benchmark.
      onPlaced: () => state.mark("placed"),
      onError: (message) => (this.error.textContent = message),
      onPaint: (p) => {
        state.paints.push({ ...p, run: state.graph().run, at: performance.now() });
        root.dataset.painted = String(state.paints.length);
      },
    }));
    // For tests and benchmarks: the cytoscape instance and paint timings on the root element.
    root.cy = view.cy;
    root.hookviz.cy = view.cy;
    root.hookviz.graphView = view;
    // The box can be resized (its corner) and go full screen: cytoscape must learn its new size.
    this.resizeObserver = new ResizeObserver(() => this.view?.resize());
    this.resizeObserver.observe(this.cyEl);
    // A toolbar that grows or shrinks (a note that wraps it) moves the graph down or up the page
    // without resizing it: cytoscape would keep mapping clicks to where the graph was.
    this.toolbarObserver = new ResizeObserver(() => this.view?.cy.resize());
    this.toolbarObserver.observe(toolbar);
  }

  /** Draw the graph as the state says; resolves once it is on screen. */
  draw() {
    const { state } = this;
    const g = state.graph();
    // A watch shown alone (hookviz.show(watch)) has no graph: only its bar, findings and heatmap.
    const graphless = !g.nodes;
    for (const part of this.hidden) part.hidden = graphless && !!this.view;
    for (const group of this.root.querySelectorAll(".hv-toolbar .hv-group, .hv-watch-close")) group.hidden = graphless;
    if (graphless) return Promise.resolve();
    const watchView = state.get("watch_view") || {};
    const overlay = watchView.steps ? watchView : null;
    fill(this.legend, legend(overlay ? overlay.legend : g.legend));
    if (!this.view) return Promise.resolve();
    // A first view is made here and written to the model, which draws it (change:collapsed).
    if (state.ensureCollapsed()) return this.lastDraw;
    this.lastDraw = this.view
      .render(g, {
        collapsed: state.collapsed(),
        view: state.get("view"),
        selected: state.get("selected") || undefined,
        overlay,
        editState: state.get("edit_state") || {},
      })
      .then(() => {
        this.view.showReplay(replayState(state.replaySteps(), this.replayStep));
        this.askDetails();
      });
    return this.lastDraw;
  }

  /** A request's error about the graph (a box that cannot open). */
  drawError() {
    this.error.textContent = this.state.errors().group || "";
  }

  // A large run arrives with its norms only (hookviz.Widget.fill_details): once its graph is on
  // screen, ask the kernel for the rest (values, the diagnosis), once per run.
  askDetails() {
    const { state } = this;
    const run = state.graph().run;
    // (A read-only run, hookviz.show(run), has a kernel too; only a saved page has none.)
    if (!state.get("details_pending") || state.get("static_note") || this.detailsAskedFor === run) return;
    this.detailsAskedFor = run;
    state.send({ type: "details" });
  }

  /** Mark the selection `id` on the graph; a new one (click, search, finding, w.select) is
   * brought into view once. */
  showSelection(id) {
    this.view?.select(id || undefined);
    if (id && id !== this.focused) this.view?.focus(id);
    this.focused = id || null;
  }

  /** Step k of the replay (-1: off) drawn at once; the step's node is selected once the slider
   * rests, without opening boxes for it. */
  showReplay(k) {
    this.replayStep = k;
    const step = replayState(this.state.replaySteps(), k);
    this.view?.showReplay(step);
    if (step.current) this.view?.focus(step.current);
    clearTimeout(this.replayTimer);
    if (step.current) this.replayTimer = setTimeout(() => this.onSelect(step.current, { reveal: false }), 250);
  }

  fit() {
    this.view?.fit();
  }

  restyle() {
    this.view?.restyle();
  }

  destroy() {
    cancelAnimationFrame(this.frame);
    clearTimeout(this.replayTimer);
    this.resizeObserver?.disconnect();
    this.toolbarObserver?.disconnect();
    this.view?.destroy();
  }
}
