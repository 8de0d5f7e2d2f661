// hookviz widget entry point (anywidget ESM): it makes the page's parts and wires them. The run
// comes from Python (graph, tables, chart); the view is the page's own: which boxes are open, the
// selection, search and the view kind are decided in the page (collapse.js, find.js hold the
// rules; view_state.js writes them) to the `collapsed`, `selected`, `query` and `view`
// traitlets, which Python reads and may set (w.select, w.search, w.set_view); the page follows
// (updates.js). Requests that need Python (edits, re-run, details) go with model.send({type, ...}).
//
// The parts, one job each: toolbar.js, search.js, graph_panel.js (graphview.js), side_panel.js
// (inspector.js, editor.js), panels.js (banner, leaf table, edits, log, chart), replay_bar.js,
// watch_view.js; page.js places them.
import css from "./style.css";
import { GraphPanel } from "./graph_panel.js";
import { arrange, pageRoot } from "./page.js";
import { Panels } from "./panels.js";
import { ReplayBar } from "./replay_bar.js";
import { savedModel } from "./saved.js";
import { SearchBox } from "./search.js";
import { SidePanel } from "./side_panel.js";
import { Toolbar } from "./toolbar.js";
import { drawFirst, followModel } from "./updates.js";
import { ViewState } from "./view_state.js";
import { WatchView } from "./watch_view.js";

function render({ model, el }) {
  const state = new ViewState(model);
  const root = pageRoot(el, css);
  // For tests and benchmarks: paint timings and marks (graph_panel.js adds the graph view).
  root.hookviz = { cy: null, paints: state.paints, marks: state.marks, model };

  // Select an element (a node id or "module:<name>"): a failed search's error goes with it.
  const select = (id, options) => {
    search.clearError();
    state.select(id, options);
  };
  const search = new SearchBox(state, root, select);
  const side = new SidePanel(state);
  const graph = new GraphPanel(state, root, {
    onSelect: select,
    onTap: (id) => side.reopen(id),
    onToggle: () => search.clearError(),
  });
  const toolbar = new Toolbar(state, search, root, () => graph.fit());
  const panels = new Panels(state, select);
  const watch = new WatchView(state);
  const parts = { state, toolbar, search, graph, side, panels, watch };
  state.dropRequestErrors();
  parts.replay = new ReplayBar({ onStep: (k) => graph.showReplay(k) });
  arrange(root, parts);

  const stopFollowing = followModel(parts);
  const stopThemeWatch = drawFirst(parts);
  return () => {
    stopThemeWatch();
    stopFollowing();
    graph.destroy();
    parts.replay.destroy();
    panels.destroy();
    watch.destroy();
  };
}

/**
 * Draw a saved page (hookviz.Widget.save_html): the same render() over a stand-in model that
 * holds the saved state (saved.js), so the saved page runs this page's code and nothing else.
 */
export function renderSaved(el, state) {
  return render({ model: savedModel(state), el });
}

export default { render };
