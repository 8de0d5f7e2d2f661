// @vitest-environment happy-dom
// How the page follows its model: traitlet changes on saved pages' states (fixtures "page",
// "watch_page") redraw the parts they touch, and messages from Python change the view by the
// page's rules.
import { afterEach, describe, expect, it } from "vitest";
import { collapseAll, toggleGroup } from "../src/collapse.js";
import { GraphPanel } from "../src/graph_panel.js";
import { Panels } from "../src/panels.js";
import { ReplayBar } from "../src/replay_bar.js";
import { SearchBox } from "../src/search.js";
import { SidePanel } from "../src/side_panel.js";
import { Toolbar } from "../src/toolbar.js";
import { drawFirst, followModel } from "../src/updates.js";
import { WatchView } from "../src/watch_view.js";
import { payload } from "./fixtures.js";
import { pageState } from "./state.js";

let stops = [];
afterEach(() => {
  for (const stop of stops) stop();
  stops = [];
});

/** The page's parts over the saved page `name`, following its model; `handlers`: what it listens to. */
function followed(name = "page", changes = {}) {
  const { state, model, sent } = pageState(name, changes);
  const handlers = {};
  const on = model.on;
  model.on = (event, fn) => {
    handlers[event] = fn;
    on(event, fn);
  };
  const root = document.createElement("div");
  root.hookviz = {};
  const select = (id, options) => state.select(id, options);
  const search = new SearchBox(state, root, select);
  const side = new SidePanel(state);
  const graph = new GraphPanel(state, root, { onSelect: select, onTap: () => {}, onToggle: () => {} });
  const parts = {
    state,
    search,
    side,
    graph,
    toolbar: new Toolbar(state, search, root, () => {}),
    panels: new Panels(state, select),
    watch: new WatchView(state),
  };
  parts.replay = new ReplayBar({ onStep: (k) => graph.showReplay(k) });
  root.append(parts.toolbar.el, parts.watch.el, graph.el, side.el, parts.replay.el, parts.panels.bottom);
  stops.push(followModel(parts), drawFirst(parts), () => graph.destroy());
  return { ...parts, model, sent, handlers, root };
}

describe("the page follows its model", () => {
  it("draws every part once at first", () => {
    const { toolbar, side, panels, replay } = followed();
    expect(toolbar.summary.textContent).toBe(payload("page").summary.text);
    expect(side.el.hidden).toBe(false);
    expect(panels.edits.querySelector("h4").textContent).toBe("Active edits (0)");
    expect(replay.label.textContent).toBe(`${payload("page").replay.length} backward steps recorded`);
  });

  it("turns replay off when the view kind changes", () => {
    const { replay, model, toolbar } = followed();
    replay.setOn(true);
    expect(replay.on).toBe(true);
    model.set("view", "modules");
    expect(replay.on).toBe(false);
    expect(toolbar.viewModules.classList.contains("hv-on")).toBe(true);
  });

  it("draws a request's error where the request was made", () => {
    const { model, toolbar, side, graph } = followed();
    model.set("errors", { view: "no view 'x'", select: "no element 'y'", group: "no module 'z'" });
    expect([toolbar.viewError.textContent, side.error.textContent, graph.error.textContent]).toEqual([
      "no view 'x'",
      "no element 'y'",
      "no module 'z'",
    ]);
  });

  it("opens the boxes around a selection made in Python", () => {
    const { model, state, side } = followed("page", { graph: payload("gpt2"), selected: "", collapsed: [] });
    state.collapseAll();
    const node = state.graph().nodes.find((n) => n.module === "transformer.h.4.mlp.c_fc");
    model.set("selected", node.id);
    expect(model.get("collapsed")).not.toContain("transformer");
    expect(model.get("collapsed")).not.toContain("transformer.h.4.mlp");
    expect(side.el.hidden).toBe(false);
  });

  it("opens and closes boxes Python asks for by name, by the page's rules", () => {
    const { model, state, handlers } = followed("page", { graph: payload("gpt2"), collapsed: [] });
    handlers["msg:custom"]({ type: "view", command: "collapse_all" });
    const all = collapseAll(state.graph().groups);
    expect(model.get("collapsed")).toEqual(all);
    handlers["msg:custom"]({ type: "view", command: "toggle_group", module: "transformer" });
    expect(model.get("collapsed")).toEqual(toggleGroup(all, "transformer", state.graph().groups));
    handlers["msg:custom"]({ type: "other" });
    expect(model.get("collapsed")).toEqual(toggleGroup(all, "transformer", state.graph().groups));
  });

  it("follows the watch: its bar, the leaf table at the step, back to the run's", () => {
    const { model, watch, panels } = followed("watch_page");
    expect(watch.el.hidden).toBe(false);
    // (the leaf table is first drawn after the graph, once the page is laid out: not in happy-dom)
    model.set("watch_view", { ...payload("watch_page").watch_view }); // a new step from Python
    expect(panels.leaves.querySelector("h4").textContent).toBe(payload("watch_page").watch_view.leaves.title);
    model.set("watch_view", {});
    expect(watch.el.hidden).toBe(true);
    expect(panels.leaves.querySelector("h4").textContent).toBe("Leaf gradients (this run, against the baseline)");
  });
});
