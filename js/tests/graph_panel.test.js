// @vitest-environment happy-dom
// The graph area over saved pages' states (fixtures "page", "watch_page"). happy-dom lays nothing
// out (every width is 0), so the graph view itself is not made here: the browser tests
// (tests/e2e/) draw it; these check what the area does around it.
import { afterEach, describe, expect, it, vi } from "vitest";
import { GraphPanel } from "../src/graph_panel.js";
import { replayState } from "../src/replay_state.js";
import { payload } from "./fixtures.js";
import { pageState } from "./state.js";

afterEach(() => vi.useRealTimers());

function graphPanel(name = "page", changes = {}) {
  const { state, model, sent } = pageState(name, changes);
  const root = document.createElement("div");
  root.hookviz = {};
  const toolbar = document.createElement("div");
  toolbar.className = "hv-toolbar";
  toolbar.innerHTML = '<span class="hv-group"></span><span class="hv-group"></span>';
  root.append(toolbar);
  const selected = [];
  const panel = new GraphPanel(state, root, {
    onSelect: (id, options) => selected.push([id, options]),
    onTap: () => {},
    onToggle: () => {},
  });
  root.append(panel.el, panel.legend);
  return { panel, state, model, sent, root, selected };
}

describe("the graph area", () => {
  it("draws the run's legend, the colours and marks Python sent", () => {
    const { panel } = graphPanel();
    panel.draw();
    const { legend } = payload("page").graph;
    expect(panel.legend.querySelector(".hv-legend-title").textContent).toBe(legend.title);
    expect([...panel.legend.querySelectorAll(".hv-legend-ticks span")].map((s) => s.textContent)).toEqual(
      legend.stops.map((s) => s.text),
    );
    expect(panel.legend.querySelector(".hv-legend-keys").textContent).toContain("user hook");
  });

  it("draws the watch's legend while a watch is shown on the graph", () => {
    const { panel } = graphPanel("watch_page");
    panel.draw();
    const watch = payload("watch_page").watch_view.legend;
    expect(watch.title).not.toBe(payload("watch_page").graph.legend.title);
    expect(panel.legend.querySelector(".hv-legend-title").textContent).toBe(watch.title);
  });

  it("hides the toolbar's graph controls for a watch shown alone (no graph)", () => {
    const { panel, root } = graphPanel("watch_page", { graph: {} });
    panel.draw();
    expect([...root.querySelectorAll(".hv-group")].map((g) => g.hidden)).toEqual([true, true]);
    expect(panel.legend.children.length).toBe(0);
  });

  it("asks for a large run's details once per run, never in a saved page", () => {
    const kernel = graphPanel("page", { details_pending: true, static_note: "" });
    kernel.panel.askDetails();
    kernel.panel.askDetails();
    expect(kernel.sent).toEqual([{ type: "details" }]);
    const saved = graphPanel("page", { details_pending: true });
    saved.panel.askDetails();
    expect(saved.sent).toEqual([]);
  });

  it("selects a replay step's node once the slider rests, opening no box for it", () => {
    vi.useFakeTimers();
    const { panel, selected } = graphPanel();
    const steps = payload("page").replay;
    panel.showReplay(0);
    panel.showReplay(2);
    vi.advanceTimersByTime(249);
    expect(selected).toEqual([]);
    vi.advanceTimersByTime(1);
    expect(selected).toEqual([[replayState(steps, 2).current, { reveal: false }]]);
    expect(selected[0][0]).toBe(steps[2].node);
    panel.showReplay(-1);
    vi.advanceTimersByTime(1000);
    expect(selected).toHaveLength(1);
  });

  it("shows a request's error about the graph", () => {
    const { panel, model } = graphPanel();
    model.set("errors", { group: "no module named 'x'" });
    panel.drawError();
    expect(panel.error.textContent).toBe("no module named 'x'");
  });
});
