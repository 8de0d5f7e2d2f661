// Live updates: how the page follows its model. Each traitlet change (a re-run, an edit, a
// selection made in Python, a live watch's new step, another view of the same widget) redraws
// the parts of the page it touches; the page's first draw is every part once, the graph and the
// charts once the widget is in the page.
import { onThemeChange } from "./theme.js";

/**
 * The page's redraws that take more than one part. parts: {state, toolbar, search, graph, side,
 * panels, watch, replay} (index.js makes them).
 */
function redraws({ state, toolbar, graph, side, panels, watch }) {
  const draw = {
    inspector: () => graph.showSelection(side.draw()),
    errors: () => {
      toolbar.drawErrors();
      graph.drawError();
      side.drawError();
      watch.drawBar();
    },
    editState: () => {
      toolbar.drawEditState();
      panels.drawEdits();
      graph.draw();
    },
    banner: () => {
      toolbar.drawDiagnosing();
      panels.drawBanner();
    },
    watch: () => {
      watch.drawBar();
      panels.drawLeaves();
      graph.draw();
      watch.drawHeatmap();
    },
  };
  // A selection made in Python (w.select) or by another view: the boxes around it open here.
  draw.selected = () => {
    state.revealSelected();
    draw.inspector();
  };
  return draw;
}

/** Follow the model's changes; returns the function that stops following. */
export function followModel(parts) {
  const { state, toolbar, search, graph, side, panels, watch, replay } = parts;
  const draw = redraws(parts);
  const handlers = {
    "change:graph": () => {
      search.clearError(); // a new run: an old search's error no longer applies
      graph.draw();
    },
    "change:collapsed": () => graph.draw(),
    "change:view": () => {
      // Replay's fading belongs to the view it was turned on in: another view starts without it.
      replay.setOn(false);
      graph.draw();
      toolbar.drawSummary();
    },
    "change:summary": () => toolbar.drawSummary(),
    "change:devices": () => toolbar.drawDevices(),
    "change:device": () => toolbar.drawDevices(),
    "change:inspector": draw.inspector,
    "change:selected": draw.selected,
    "change:query": () => search.followQuery(),
    "change:visible_budget": () => state.get("view") !== "modules" && state.setView("ops"),
    "change:errors": () => {
      draw.errors();
      draw.inspector();
      panels.drawEdits();
    },
    "change:edits": () => {
      panels.drawEdits();
      side.drawEditor();
    },
    "change:edit_state": draw.editState,
    "change:code": () => panels.drawEdits(),
    "change:leaf_summary": () => panels.drawLeaves(),
    "change:details_pending": () => panels.drawLeavesPending(),
    "change:log": () => panels.drawLog(),
    "change:replay": () => replay.setSteps(state.replaySteps()),
    "change:chart": () => panels.drawChart(),
    "change:diagnosis": draw.banner,
    "change:watch_view": draw.watch,
    "change:watch_ranks": draw.watch,
    "change:watch_heatmap": () => watch.drawHeatmap(),
    // View changes Python asks for by name (w.toggle_group, w.collapse_all): made by the page's rules.
    "msg:custom": (msg) => {
      if (msg?.type !== "view") return;
      if (msg.command === "toggle_group") state.toggleGroup(msg.module);
      else if (msg.command === "collapse_all") state.collapseAll();
    },
  };
  const { model } = state;
  for (const [event, fn] of Object.entries(handlers)) model.on(event, fn);
  return () => {
    for (const [event, fn] of Object.entries(handlers)) model.off(event, fn);
  };
}

/**
 * The page's first draw: every part from the model as it is, then, once the widget is in the
 * page (cytoscape and plotly need its size), the graph first and the leaf table and the charts
 * once it is on screen. Returns the function that stops watching the theme.
 */
export function drawFirst(parts) {
  const { state, toolbar, graph, panels, watch, replay } = parts;
  const draw = redraws(parts);
  toolbar.drawDevices();
  toolbar.drawSummary();
  draw.errors();
  draw.inspector();
  panels.drawEdits();
  draw.banner();
  draw.editState();
  panels.drawLog();
  replay.setSteps(state.replaySteps());
  let stopThemeWatch = () => {};
  graph.whenAttached(toolbar.el, () => {
    watch.attached = true;
    // A theme switch (JupyterLab Light <-> Dark) restyles what copied the theme's colours.
    stopThemeWatch = onThemeChange(() => {
      graph.restyle();
      panels.drawChart();
      watch.drawHeatmap();
    });
    graph.draw().then(() => {
      panels.drawLeaves();
      panels.drawChart();
      watch.drawHeatmap();
    });
  });
  return () => stopThemeWatch();
}
