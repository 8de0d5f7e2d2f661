// hookviz widget entry point (anywidget ESM). The run comes from Python (graph, tables, chart);
// the view is the page's own: which boxes are open, the selection, search and the view kind are
// decided here (logic.js holds the rules) and written to the `collapsed`, `selected`, `query`
// and `view` traitlets, which Python reads and may set (w.select, w.search, w.set_view); the page
// follows. Requests that need Python (edits, re-run, details) go with model.send({type, ...}).
import css from "./style.css";
import { errorLine, fill, h } from "./dom.js";
import { GraphView } from "./graphview.js";
import { renderInspector } from "./inspector.js";
import { renderBanner, renderEditor, renderEdits, renderLeaves, renderLog, ReplayBar, WatchBar } from "./panels.js";
import { renderChart, renderHeatmap, destroyChart } from "./chart.js";
import { onThemeChange } from "./theme.js";
import { renderWatchLeaves } from "./watch_leaves.js";
import {
  EDIT_COLOR,
  HOOK_COLOR,
  replayState,
  toggleGroup,
  collapseAll as collapseAllOf,
  find,
  firstCollapsed,
  graphSummary,
  prepareGraph,
  revealTarget,
  VISIBLE_BUDGET,
} from "./logic.js";
import { savedModel } from "./saved.js";

/** The legend Python sent ({title, stops: [{color, text}], keys: [{color, text}]}: hookviz.colors.legend). */
function legend(spec) {
  const stops = spec?.stops || [];
  const sw = (color, text, extra = "") =>
    h("span", { class: "hv-sw" }, h("i", { style: `background:${color};${extra}` }), text);
  return [
    h("div", { class: "hv-legend-title" }, spec?.title || ""),
    h("div", {
      class: "hv-legend-bar",
      style: `background:linear-gradient(to right, ${stops.map((s) => s.color).join(",")})`,
    }),
    h(
      "div",
      { class: "hv-legend-ticks" },
      stops.map((s) => h("span", {}, s.text)),
    ),
    h(
      "div",
      { class: "hv-legend-keys" },
      (spec?.keys || []).map((k) => sw(k.color, k.text)),
      sw("#fff", "edited", `border:3px solid ${EDIT_COLOR}`),
      sw("#fff", "user hook", `border:3px dashed ${HOOK_COLOR}`),
      h(
        "span",
        { class: "hv-sw" },
        "▭ closed module box (click opens) · ≡ identical blocks · dotted border: beyond the scale",
      ),
    ),
  ];
}

function render({ model, el }) {
  const send = (msg) => model.send(msg);
  // The graph, leaf table and replay steps come from the kernel as buffers of JSON
  // (hookviz.widget._json_buffer), and as plain values in a saved page: parsed once per new value.
  const decoder = new TextDecoder();
  const parsed = {};
  const jsonState = (name, empty, prepare = (v) => v) => {
    const raw = model.get(name);
    if (!parsed[name] || parsed[name].raw !== raw) {
      const bytes = raw instanceof ArrayBuffer || ArrayBuffer.isView(raw);
      parsed[name] = { raw, value: prepare(bytes ? JSON.parse(decoder.decode(raw)) : (raw ?? empty)) };
    }
    return parsed[name].value;
  };
  const graphOf = () => jsonState("graph", {}, prepareGraph);
  const replayOf = () => jsonState("replay", []);
  // A leaf whose gradient did not change comes without "after" (hookviz.widget._leaf_rows_buffer).
  const leavesOf = () => {
    const leaves = jsonState("leaf_summary", []);
    for (const leaf of leaves) if (!("after" in leaf)) leaf.after = leaf.before;
    return leaves;
  };
  const root = h("div", { class: "hookviz-widget" });
  el.append(h("style", {}, css), root);

  // Toolbar: view toggle, collapse, device, re-run.
  const viewOps = h(
    "button",
    {
      class: "hv-view-ops",
      title: "the module tree opened as deep as fits",
      onclick: () => setView("ops"),
    },
    "Overview",
  );
  const viewModules = h(
    "button",
    {
      class: "hv-view-modules",
      title: "every module open down to the innermost ones",
      onclick: () => setView("modules"),
    },
    "Module tree",
  );
  const search = h("input", {
    class: "hv-search",
    type: "search",
    placeholder: "search  /",
    "aria-label": "search a module, op or leaf",
    spellcheck: "false",
  });
  const searchError = errorLine("");
  search.addEventListener("keydown", (e) => {
    // Keep JupyterLab's notebook shortcuts (Esc, Enter, letters) out of the search box.
    e.stopPropagation();
    if (e.key === "Enter" && search.value.trim()) {
      mark("search");
      runSearch(search.value);
      setState({ query: search.value });
    } else if (e.key === "Escape") {
      search.value = "";
      searchError.textContent = "";
      search.blur();
    }
  });
  search.addEventListener("keyup", (e) => e.stopPropagation());
  const fullscreen = h(
    "button",
    {
      class: "hv-fullscreen",
      title: "full screen (Esc leaves)",
      onclick: () => (document.fullscreenElement ? document.exitFullscreen() : root.requestFullscreen?.()),
    },
    "Full screen",
  );
  const collapseAll = h(
    "button",
    { class: "hv-collapse-all", onclick: () => setState({ collapsed: collapseAllOf(graphOf().groups) }) },
    "Collapse all",
  );
  const expandAll = h("button", { class: "hv-expand-all", onclick: () => setState({ collapsed: [] }) }, "Expand all");
  const fitBtn = h("button", { class: "hv-fit", onclick: () => graphView?.fit() }, "Fit");
  const staleNote = h("span", { class: "hv-stale", hidden: true });
  const device = h("select", { class: "hv-device", "aria-label": "device" });
  const rerun = h(
    "button",
    {
      class: "hv-rerun",
      onclick: () => {
        mark("rerun");
        send({ type: "rerun", device: device.value });
      },
    },
    "Re-run backward",
  );
  const summary = h("span", { class: "hv-summary" });
  const diagnosing = h("span", { class: "hv-diagnosing", hidden: true }, "diagnosing this run…");
  const rerunError = errorLine("");
  const viewError = errorLine("");
  const toolbar = h(
    "div",
    { class: "hv-toolbar" },
    h("span", { class: "hv-brand" }, "hookviz"),
    h("span", { class: "hv-group hv-search-group" }, search, searchError),
    h("span", { class: "hv-group" }, viewOps, viewModules, viewError),
    h("span", { class: "hv-group" }, collapseAll, expandAll, fitBtn, fullscreen),
    h("span", { class: "hv-group" }, h("label", {}, "device ", device), rerun, staleNote, rerunError),
    summary,
    diagnosing,
  );

  const cyEl = h("div", { class: "hv-cy", tabindex: "0" });
  const tooltip = h("div", { class: "hv-tooltip", hidden: true });
  const legendEl = h("div", { class: "hv-legend" });
  const graphError = errorLine("");
  const inspectorEl = h("div", { class: "hv-inspector" });
  const editorEl = h("div", { class: "hv-editor" });
  const selectError = errorLine("");
  // The side panel opens with a selection and can be closed to give the graph the whole width.
  let sideClosedFor = null;
  const closeSide = h(
    "button",
    {
      class: "hv-side-close",
      title: "close the panel (the graph takes the whole width)",
      onclick: () => {
        sideClosedFor = model.get("selected") || null;
        side.hidden = true;
      },
    },
    "✕",
  );
  const side = h("div", { class: "hv-side", hidden: true }, closeSide, selectError, editorEl, inspectorEl);
  const main = h("div", { class: "hv-main" }, h("div", { class: "hv-graph" }, cyEl, tooltip, graphError), side);
  const bannerEl = h("div", { class: "hv-banner", role: "status", hidden: true });
  const watchEl = h("div", { class: "hv-watch", hidden: true });
  const heatmapEl = h("div", { class: "hv-heatmap" });
  const replayEl = h("div", { class: "hv-replay" });
  const leavesEl = h("div", { class: "hv-leaves" });
  const editsEl = h("div", { class: "hv-edits" });
  const logEl = h("div", { class: "hv-log" });
  const chartEl = h("div", { class: "hv-chart" });
  const messageError = errorLine("");
  root.append(
    toolbar,
    messageError,
    bannerEl,
    watchEl,
    main,
    legendEl,
    replayEl,
    h("div", { class: "hv-bottom" }, leavesEl, editsEl, logEl),
    chartEl,
    heatmapEl,
  );

  // A saved page (hookviz.Widget.save_html) has no kernel, and a run opened from a file
  // (hookviz.load, the `read_only` traitlet) cannot re-run: edits and re-run are off there.
  const staticNote = model.get("static_note") || model.get("read_only") || "";
  if (staticNote) {
    rerun.disabled = true;
    device.disabled = true;
    rerun.title = device.title = staticNote;
    messageError.textContent = staticNote;
    messageError.classList.add("hv-static-note");
  }
  const paints = [];
  // Timestamps (performance.now()) of user actions and their answers, read by the benchmark.
  const marks = { render: performance.now() };
  const mark = (name) => {
    marks[name] = performance.now();
  };
  root.hookviz = { cy: null, paints, marks, model };

  // ----- the view: the page's own state -------------------------------------------------------
  // Written to the model and synced: Python reads it (w.collapsed, w.selected) and a kernel that
  // is busy or gone changes nothing here.
  const setState = (changes) => {
    for (const [name, value] of Object.entries(changes)) model.set(name, value);
    model.save_changes();
  };
  const collapsedNow = () => model.get("collapsed") || [];
  const sameList = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);
  // The first view of a graph the collapsed list was not made for (Python sends null with a new
  // graph structure and a new view kind): the rules of logic.firstCollapsed.
  const ensureCollapsed = () => {
    const g = graphOf();
    if (model.get("collapsed") === null || model.get("collapsed") === undefined) {
      if (!g.groups) return false;
      // A selection made before the page drew (w.select in the cell that made the widget) is drawn.
      const budget = model.get("visible_budget") ?? VISIBLE_BUDGET;
      setState({ collapsed: firstCollapsed(g, model.get("view"), budget, model.get("selected") || null) });
      return true;
    }
    return false;
  };
  const setView = (view) => {
    setState({ view, collapsed: firstCollapsed(graphOf(), view, model.get("visible_budget") ?? VISIBLE_BUDGET) });
  };
  // Select an element (a node id or "module:<name>") and open the boxes around it so it is drawn.
  let quietSelection = null; // the replay's selection: no boxes open for it
  const selectElement = (id, { reveal = true } = {}) => {
    searchError.textContent = ""; // a failed search's error goes with the next selection
    const changes = {};
    if (reveal) {
      const opened = revealTarget(collapsedNow(), id, graphOf());
      if (!sameList(opened, [...collapsedNow()].sort())) changes.collapsed = opened;
    } else quietSelection = id;
    changes.selected = id;
    setState(changes);
  };
  let searchedFor = null;
  const runSearch = (query) => {
    searchedFor = query;
    const hit = find(query, graphOf());
    searchError.textContent = hit
      ? ""
      : `nothing is named like '${query.trim()}': search takes part of a module name (h.3.mlp), an op (AddmmBackward0_3) or a leaf (c_fc.weight)`;
    if (hit) selectElement(hit);
  };
  // Errors that answer one request of this page (a refused edit, a malformed message) belong to
  // the page that asked: a page opened later (a reload) does not show an old one.
  const REQUEST_ERRORS = ["edit", "edits", "message", "select", "group", "view"];
  const stale = REQUEST_ERRORS.filter((name) => (model.get("errors") || {})[name]);
  if (stale.length) {
    const kept = { ...(model.get("errors") || {}) };
    for (const name of stale) delete kept[name];
    setState({ errors: kept });
  }
  // cytoscape needs its container in the page with a size: anywidget calls render() before
  // attaching el, so the graph view is made once el is connected.
  let graphView = null;
  const makeGraphView = () => {
    graphView = new GraphView(cyEl, {
      tooltip,
      onSelect: (id) => {
        mark("tap");
        // A click reopens a closed panel, also on the node it was closed on.
        sideClosedFor = null;
        if (model.get("selected") === id) side.hidden = false;
        cyEl.focus({ preventScroll: true });
        selectElement(id);
      },
      onToggleGroup: (module) => {
        mark("toggle");
        searchError.textContent = "";
        // Opened in the page, with no round trip: the kernel may be busy (recording a large run's
        // details, or another cell); it learns the new state when the change is synced.
        setState({ collapsed: toggleGroup(collapsedNow(), module, graphOf().groups) });
      },
      // The new layout's elements are in place (its animation starts): read by the benchmark.
      onPlaced: () => mark("placed"),
      onError: (message) => (graphError.textContent = message),
      onPaint: (p) => {
        paints.push({ ...p, run: graphOf().run, at: performance.now() });
        root.dataset.painted = String(paints.length);
      },
    });
    // For tests and benchmarks: the cytoscape instance and paint timings on the root element.
    root.cy = graphView.cy;
    root.hookviz.cy = graphView.cy;
    root.hookviz.graphView = graphView;
    // The box can be resized (its corner) and go full screen: cytoscape must learn its new size.
    resizeObserver = new ResizeObserver(() => graphView?.resize());
    resizeObserver.observe(cyEl);
    // A toolbar that grows or shrinks (a note that wraps it) moves the graph down or up the page
    // without resizing it: cytoscape would keep mapping clicks to where the graph was.
    toolbarObserver = new ResizeObserver(() => graphView?.cy.resize());
    toolbarObserver.observe(toolbar);
  };
  let resizeObserver = null;
  let toolbarObserver = null;
  // Cytoscape blurs the focused element when the pointer goes down on it, so the graph would never
  // hold the focus that keyboard shortcuts ("/") need: take it once the pointer is up.
  cyEl.addEventListener("pointerup", () => setTimeout(() => cyEl.focus({ preventScroll: true })));
  // "/" anywhere in the widget goes to the search box, as in Model Explorer and GitHub.
  root.addEventListener("keydown", (e) => {
    if (e.key !== "/" || e.target instanceof HTMLInputElement || e.target instanceof HTMLTextAreaElement) return;
    e.preventDefault();
    e.stopPropagation();
    search.focus();
  });

  let replayK = -1;
  let replayTimer = 0;
  const replay = new ReplayBar(replayEl, {
    // Each step is drawn here at once; the step's node is selected once the slider rests.
    onStep: (k) => {
      replayK = k;
      const steps = replayOf();
      const state = replayState(steps, k);
      graphView?.showReplay(state);
      if (state.current) graphView?.focus(state.current);
      clearTimeout(replayTimer);
      if (state.current) replayTimer = setTimeout(() => selectElement(state.current, { reveal: false }), 250);
    },
  });

  const watchBar = new WatchBar(watchEl, {
    onStep: (step) => send({ type: "watch_step", step }),
    onClose: () => send({ type: "hide_watch" }),
    onRank: (rank) => send({ type: "watch_rank", rank }),
  });
  if (model.get("static_note")) watchBar.disable(model.get("static_note"));

  const errors = () => model.get("errors") || {};
  const drawErrors = () => {
    const e = errors();
    rerunError.textContent = e.rerun || e.device || "";
    // A refused device does not stay picked: the picker shows the device of the run on screen.
    if (e.device) device.value = model.get("device");
    viewError.textContent = e.view || "";
    graphError.textContent = e.group || "";
    selectError.textContent = e.select || "";
    messageError.textContent = e.message || staticNote;
    messageError.classList.toggle("hv-static-note", !e.message && !!staticNote);
    watchBar.set(model.get("watch_view"), e.watch, model.get("watch_ranks") || []);
  };
  const bottom = root.querySelector(".hv-bottom");
  const drawGraph = () => {
    const g = graphOf();
    // A watch shown alone (hookviz.show(watch)) has no graph: only its bar, findings and heatmap.
    const graphless = !g.nodes;
    for (const part of [main, legendEl, replayEl, bottom, chartEl]) part.hidden = graphless && !!graphView;
    for (const group of root.querySelectorAll(".hv-toolbar .hv-group, .hv-watch-close")) group.hidden = graphless;
    if (graphless) return Promise.resolve();
    const watchView = model.get("watch_view") || {};
    const overlay = watchView.steps ? watchView : null;
    fill(legendEl, legend(overlay ? overlay.legend : g.legend));
    if (!graphView) return Promise.resolve();
    // A first view is made here and written to the model, which draws it (change:collapsed).
    if (ensureCollapsed()) return lastDraw;
    lastDraw = graphView
      .render(g, {
        collapsed: collapsedNow(),
        view: model.get("view"),
        selected: model.get("selected") || undefined,
        overlay,
        editState: model.get("edit_state") || {},
      })
      .then(() => {
        graphView.showReplay(replayState(replayOf(), replayK));
        askDetails();
      });
    return lastDraw;
  };
  let lastDraw = Promise.resolve();
  // A large run arrives with its norms only (hookviz.Widget.fill_details): once its graph is on
  // screen, ask the kernel for the rest (values, the diagnosis), once per run.
  let detailsAskedFor = null;
  const askDetails = () => {
    const run = graphOf().run;
    // (A read-only run, hookviz.show(run), has a kernel too; only a saved page has none.)
    if (!model.get("details_pending") || model.get("static_note") || detailsAskedFor === run) return;
    detailsAskedFor = run;
    send({ type: "details" });
  };
  const drawSummary = () => {
    const s = model.get("summary") || {};
    summary.textContent = s.text || "";
    const view = model.get("view");
    viewOps.classList.toggle("hv-on", view !== "modules");
    viewModules.classList.toggle("hv-on", view === "modules");
  };
  const drawDevices = () => {
    const current = model.get("device");
    fill(
      device,
      (model.get("devices") || []).map((d) => h("option", { value: d }, d)),
    );
    device.value = current;
  };
  let focused = null;
  const typed = {}; // what the user typed in the edit box, kept when the panel is redrawn
  // The edit box of the selection; drawn again when the edits change (it says which edit Apply replaces).
  const drawEditor = (data) =>
    renderEditor(
      editorEl,
      data,
      errors().edit,
      typed,
      (msg) => {
        mark("apply");
        send(msg);
      },
      staticNote,
      model.get("edits") || [],
    );
  const drawInspector = () => {
    const id = model.get("selected") || "";
    const full = model.get("inspector") || {};
    // The kernel's inspector (values, statistics, hook sites) once it has come for this
    // selection; meanwhile, or with no kernel, what the graph on the page says.
    const data = id && full.id === id ? full : {};
    const summary = id ? graphSummary(graphOf(), id) : null;
    side.hidden = (!id && !errors().select) || (!!id && id === sideClosedFor);
    if (id !== sideClosedFor) sideClosedFor = null;
    const note = staticNote
      ? "tensor values of this element are not in this saved page"
      : "tensor statistics and values: asking the kernel…";
    renderInspector(inspectorEl, data, summary, note);
    drawEditor(data);
    mark("inspector");
    if (data.id) mark("values"); // the kernel's answer is drawn (read by the benchmark)
    graphView?.select(id || undefined);
    // A new selection (click, search, finding, w.select) is brought into view once.
    if (id && id !== focused) graphView?.focus(id);
    focused = id || null;
  };
  // A selection made in Python (w.select) or by another view: open the boxes around it here.
  const onSelected = () => {
    const id = model.get("selected") || "";
    if (id && id !== quietSelection) {
      const opened = revealTarget(collapsedNow(), id, graphOf());
      if (!sameList(opened, [...collapsedNow()].sort())) setState({ collapsed: opened });
    }
    quietSelection = null;
    drawInspector();
  };
  // A search asked from Python (w.search): the page finds the match.
  const onQuery = () => {
    const query = model.get("query") || "";
    if (!query.trim() || query === searchedFor) return;
    search.value = query;
    runSearch(query);
  };
  const drawEditState = () => {
    // A saved page cannot re-run: it never asks for one (the button is disabled with the note).
    const stale = !!(model.get("edit_state") || {}).stale && !staticNote;
    rerun.classList.toggle("hv-pending", stale);
    root.classList.toggle("hv-edits-pending", stale);
    rerun.textContent = stale ? "Re-run backward •" : "Re-run backward";
    staleNote.hidden = !stale;
    staleNote.textContent = stale ? "edits changed since this run: the graph shows the old run, press Re-run" : "";
    drawEdits();
    drawGraph();
  };
  const drawEdits = () =>
    mark("edits") ||
    renderEdits(
      editsEl,
      model.get("edits") || [],
      model.get("code") || "",
      errors().edits,
      send,
      staticNote ? {} : model.get("edit_state") || {},
      staticNote,
    );
  const drawChart = () => renderChart(chartEl, model.get("chart"));
  const drawLeaves = () => {
    // While a watch is shown, the watch's statistics at the rank and step picked (they follow the
    // picker); the run's table comes back with it.
    const watchLeaves = (model.get("watch_view") || {}).leaves;
    if (watchLeaves) renderWatchLeaves(leavesEl, watchLeaves);
    else renderLeaves(leavesEl, leavesOf(), model.get("details_pending"));
  };
  const selectNode = (id) => {
    mark("tap");
    selectElement(id);
  };
  const drawBanner = () => {
    diagnosing.hidden = !(model.get("diagnosis") || {}).pending;
    renderBanner(bannerEl, model.get("diagnosis"), selectNode);
  };
  const drawHeatmap = () => {
    if (!graphView) return; // drawn once the widget is in the page (plotly needs a width)
    const view = model.get("watch_view") || {};
    renderHeatmap(heatmapEl, view.steps ? model.get("watch_heatmap") : null, view.step, (step) =>
      send({ type: "watch_step", step }),
    );
  };
  const drawWatch = () => {
    watchBar.set(model.get("watch_view"), errors().watch, model.get("watch_ranks") || []);
    drawLeaves();
    drawGraph();
    drawHeatmap();
  };

  const handlers = {
    "change:graph": () => {
      searchError.textContent = ""; // a new run: an old search's error no longer applies
      drawGraph();
    },
    "change:collapsed": drawGraph,
    "change:view": () => {
      // Replay's fading belongs to the view it was turned on in: another view starts without it.
      replay.setOn(false);
      drawGraph();
      drawSummary();
    },
    "change:summary": drawSummary,
    "change:devices": drawDevices,
    "change:device": drawDevices,
    "change:inspector": drawInspector,
    "change:selected": onSelected,
    "change:query": onQuery,
    "change:visible_budget": () => model.get("view") !== "modules" && setView("ops"),
    "change:errors": () => {
      drawErrors();
      drawInspector();
      drawEdits();
    },
    "change:edits": () => {
      drawEdits();
      const id = model.get("selected") || "";
      const full = model.get("inspector") || {};
      drawEditor(id && full.id === id ? full : {});
    },
    "change:edit_state": drawEditState,
    "change:code": drawEdits,
    "change:leaf_summary": drawLeaves,
    // Only the "summarising…" line depends on it: a drawn table keeps the order the user sorted.
    "change:details_pending": () => leavesOf().length || drawLeaves(),
    "change:log": () => renderLog(logEl, model.get("log")),
    "change:replay": () => replay.setSteps(replayOf()),
    "change:chart": drawChart,
    "change:diagnosis": drawBanner,
    "change:watch_view": drawWatch,
    "change:watch_ranks": drawWatch,
    "change:watch_heatmap": drawHeatmap,
  };
  // View changes Python asks for by name (w.toggle_group, w.collapse_all): made by the page's rules.
  handlers["msg:custom"] = (msg) => {
    if (msg?.type !== "view") return;
    const groups = graphOf().groups;
    if (msg.command === "toggle_group") setState({ collapsed: toggleGroup(collapsedNow(), msg.module, groups) });
    else if (msg.command === "collapse_all") setState({ collapsed: collapseAllOf(groups) });
  };
  for (const [ev, fn] of Object.entries(handlers)) model.on(ev, fn);

  drawDevices();
  drawSummary();
  drawErrors();
  drawInspector();
  drawEdits();
  drawBanner();
  drawEditState();
  renderLog(logEl, model.get("log"));
  replay.setSteps(replayOf());
  // Draw once the element is in the page, so cytoscape knows its size.
  let frame = 0;
  const whenAttached = () => {
    if (!cyEl.isConnected || cyEl.clientWidth === 0) {
      frame = requestAnimationFrame(whenAttached);
      return;
    }
    makeGraphView();
    // A theme switch (JupyterLab Light <-> Dark) restyles what copied the theme's colours.
    stopThemeWatch = onThemeChange(() => {
      graphView?.restyle();
      drawChart();
      drawHeatmap();
    });
    // The graph first; the leaf table and the chart once it is on screen.
    drawGraph().then(() => {
      drawLeaves();
      drawChart();
      drawHeatmap();
    });
  };
  let stopThemeWatch = () => {};
  frame = requestAnimationFrame(whenAttached);

  return () => {
    stopThemeWatch();
    for (const [ev, fn] of Object.entries(handlers)) model.off(ev, fn);
    cancelAnimationFrame(frame);
    replay.destroy();
    clearTimeout(replayTimer);
    resizeObserver?.disconnect();
    toolbarObserver?.disconnect();
    graphView?.destroy();
    destroyChart(chartEl);
    destroyChart(heatmapEl);
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
