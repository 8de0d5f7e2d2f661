// The page's state: the model's traitlets read and written in one place. The graph, leaf table
// and replay steps are parsed once per new value; the view the page owns (which boxes are open,
// the selection, the view kind) changes by the rules of collapse.js and is written back to the
// model, where Python reads it (w.collapsed, w.selected) and a kernel that is busy or gone
// changes nothing here. No DOM.
import { collapseAll, firstCollapsed, revealTarget, toggleGroup, VISIBLE_BUDGET } from "./collapse.js";
import { prepareGraph } from "./names.js";

// Errors that answer one request of this page (a refused edit, a malformed message) belong to
// the page that asked: a page opened later (a reload) does not show an old one.
export const REQUEST_ERRORS = ["edit", "edits", "message", "select", "group", "view"];

const sameList = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);

export class ViewState {
  /** model: anywidget's model, or a saved page's stand-in (saved.js). */
  constructor(model) {
    this.model = model;
    this.decoder = new TextDecoder();
    this.parsed = {};
    // A saved page (hookviz.Widget.save_html) has no kernel, and a run opened from a file
    // (hookviz.load, the `read_only` traitlet) cannot re-run: edits and re-run are off there.
    this.staticNote = model.get("static_note") || model.get("read_only") || "";
    // Timestamps (performance.now()) of user actions and their answers, and the graph's paints,
    // read by the benchmark.
    this.marks = { render: performance.now() };
    this.paints = [];
    this.quietSelection = null; // the replay's selection: no boxes open for it
  }

  get(name) {
    return this.model.get(name);
  }

  /** A request to Python (edits, re-run, details): model.send({type, ...}). */
  send(msg) {
    this.model.send(msg);
  }

  mark(name) {
    this.marks[name] = performance.now();
  }

  /** Write `changes` ({traitlet: value}) to the model and sync them. */
  set(changes) {
    for (const [name, value] of Object.entries(changes)) this.model.set(name, value);
    this.model.save_changes();
  }

  // The graph, leaf table and replay steps come from the kernel as buffers of JSON
  // (hookviz.widget._json_buffer), and as plain values in a saved page: parsed once per new value.
  jsonState(name, empty, prepare = (v) => v) {
    const raw = this.model.get(name);
    if (!this.parsed[name] || this.parsed[name].raw !== raw) {
      const bytes = raw instanceof ArrayBuffer || ArrayBuffer.isView(raw);
      this.parsed[name] = { raw, value: prepare(bytes ? JSON.parse(this.decoder.decode(raw)) : (raw ?? empty)) };
    }
    return this.parsed[name].value;
  }

  /** The graph payload (hookviz.widget.graph), its boxes labelled (names.prepareGraph). */
  graph() {
    return this.jsonState("graph", {}, prepareGraph);
  }

  replaySteps() {
    return this.jsonState("replay", []);
  }

  /** The leaf table's rows; a leaf whose gradient did not change comes without "after"
   * (hookviz.widget._leaf_rows_buffer): its "after" is its "before". */
  leaves() {
    const leaves = this.jsonState("leaf_summary", []);
    for (const leaf of leaves) if (!("after" in leaf)) leaf.after = leaf.before;
    return leaves;
  }

  errors() {
    return this.model.get("errors") || {};
  }

  collapsed() {
    return this.model.get("collapsed") || [];
  }

  budget() {
    return this.model.get("visible_budget") ?? VISIBLE_BUDGET;
  }

  /** Drop the errors of an earlier page's requests (REQUEST_ERRORS). */
  dropRequestErrors() {
    const stale = REQUEST_ERRORS.filter((name) => this.errors()[name]);
    if (!stale.length) return;
    const kept = { ...this.errors() };
    for (const name of stale) delete kept[name];
    this.set({ errors: kept });
  }

  /**
   * Make the first view of a graph the collapsed list was not made for (Python sends null with a
   * new graph structure and a new view kind: the rules of collapse.firstCollapsed). True when it
   * wrote one (its change draws it).
   */
  ensureCollapsed() {
    const collapsed = this.model.get("collapsed");
    if (collapsed !== null && collapsed !== undefined) return false;
    const g = this.graph();
    if (!g.groups) return false;
    // A selection made before the page drew (w.select in the cell that made the widget) is drawn.
    this.set({
      collapsed: firstCollapsed(g, this.model.get("view"), this.budget(), this.model.get("selected") || null),
    });
    return true;
  }

  /** Show the view kind `view` ("ops": the Overview, "modules": the Module tree) as it starts. */
  setView(view) {
    this.set({ view, collapsed: firstCollapsed(this.graph(), view, this.budget()) });
  }

  /** Select an element (a node id or "module:<name>") and, unless `reveal` is false (the
   * replay's selection), open the boxes around it so it is drawn. */
  select(id, { reveal = true } = {}) {
    const changes = {};
    if (reveal) {
      const opened = revealTarget(this.collapsed(), id, this.graph());
      if (!sameList(opened, [...this.collapsed()].sort())) changes.collapsed = opened;
    } else this.quietSelection = id;
    changes.selected = id;
    this.set(changes);
  }

  /** A selection made in Python (w.select) or by another view: open the boxes around it here. */
  revealSelected() {
    const id = this.model.get("selected") || "";
    if (id && id !== this.quietSelection) {
      const opened = revealTarget(this.collapsed(), id, this.graph());
      if (!sameList(opened, [...this.collapsed()].sort())) this.set({ collapsed: opened });
    }
    this.quietSelection = null;
  }

  /** A click on a module box: a closed box opens one level, an open one closes. */
  toggleGroup(module) {
    this.set({ collapsed: toggleGroup(this.collapsed(), module, this.graph().groups) });
  }

  collapseAll() {
    this.set({ collapsed: collapseAll(this.graph().groups) });
  }

  expandAll() {
    this.set({ collapsed: [] });
  }
}
