// The page's state over the model: a saved page's state as hookviz.Widget.save_html wrote it from
// a real run (fixture "page"), behind the saved page's stand-in model (saved.js).
import { describe, expect, it } from "vitest";
import { collapseAll, firstCollapsed, revealTarget, toggleGroup, VISIBLE_BUDGET } from "../src/collapse.js";
import { REQUEST_ERRORS } from "../src/view_state.js";
import { payload } from "./fixtures.js";
import { pageState as stateOf } from "./state.js";

// The 6-layer GPT-2's graph (fixture "gpt2") in that page, nothing selected.
const gpt2 = () => stateOf("page", { graph: payload("gpt2"), selected: "" });

describe("the page's state", () => {
  it("parses a JSON buffer once per new value and labels the graph's boxes", () => {
    const graph = payload("page").graph;
    const bytes = new TextEncoder().encode(JSON.stringify(graph));
    const { state, model } = stateOf("page", { graph: bytes });
    const parsed = state.graph();
    expect(parsed.nodes.map((n) => n.id)).toEqual(graph.nodes.map((n) => n.id));
    expect(parsed.groups.every((g) => typeof g.label === "string")).toBe(true);
    expect(state.graph()).toBe(parsed);
    model.set("graph", new TextEncoder().encode(JSON.stringify(graph)));
    expect(state.graph()).not.toBe(parsed);
  });

  it("gives a leaf whose gradient did not change its baseline as this run's", () => {
    const rows = payload("page").leaf_summary.map(({ after, ...leaf }) => leaf);
    const { state } = stateOf("page", { leaf_summary: rows });
    expect(state.leaves()).toHaveLength(4);
    expect(state.leaves().filter((l) => l.after === l.before).length).toBe(4);
  });

  it("makes the first view when the collapsed list is null, once", () => {
    const { state, model } = gpt2();
    expect(model.get("collapsed")).toBeNull();
    expect(state.ensureCollapsed()).toBe(true);
    expect(model.get("collapsed")).toEqual(firstCollapsed(state.graph(), "ops", VISIBLE_BUDGET, null));
    expect(state.ensureCollapsed()).toBe(false);
  });

  it("selects an element and opens the boxes around it, unless the replay selects it", () => {
    const { state, model } = gpt2();
    state.collapseAll();
    expect(model.get("collapsed")).toEqual(collapseAll(state.graph().groups));
    const node = state.graph().nodes.find((n) => n.module.startsWith("transformer.h.2.attn"));
    const opened = revealTarget(model.get("collapsed"), node.id, state.graph());
    state.select(node.id, { reveal: false });
    expect(model.get("selected")).toBe(node.id);
    expect(model.get("collapsed")).toEqual(collapseAll(state.graph().groups));
    state.revealSelected(); // the replay's own selection opens nothing
    expect(model.get("collapsed")).toEqual(collapseAll(state.graph().groups));
    state.select(node.id);
    expect(model.get("collapsed")).toEqual(opened);
    expect(opened).not.toContain("transformer.h.2.attn");
  });

  it("opens and closes a box by the page's rule, and sets the view kind's first view", () => {
    const { state, model } = gpt2();
    state.collapseAll();
    const before = model.get("collapsed");
    state.toggleGroup("transformer");
    expect(model.get("collapsed")).toEqual(toggleGroup(before, "transformer", state.graph().groups));
    state.setView("modules");
    expect(model.get("view")).toBe("modules");
    expect(model.get("collapsed")).toEqual(firstCollapsed(state.graph(), "modules", VISIBLE_BUDGET));
    state.expandAll();
    expect(model.get("collapsed")).toEqual([]);
  });

  it("drops the errors of an earlier page's requests and keeps the others", () => {
    const errors = Object.fromEntries([...REQUEST_ERRORS, "rerun", "watch"].map((k) => [k, `${k} failed`]));
    const { state, model } = stateOf("page", { errors });
    state.dropRequestErrors();
    expect(model.get("errors")).toEqual({ rerun: "rerun failed", watch: "watch failed" });
  });

  it("says why a saved page cannot re-run, and marks the user's actions", () => {
    const { state } = stateOf("page");
    expect(state.staticNote).toBe(payload("page").static_note);
    expect(state.staticNote.length).toBeGreaterThan(0);
    state.mark("tap");
    expect(state.marks.tap).toBeGreaterThanOrEqual(state.marks.render);
  });
});
