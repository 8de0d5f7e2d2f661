// @vitest-environment happy-dom
// Small stalls: a hook's name wraps only after an underscore; a module box is marked "edited" for
// its own sites, and for an edit inside only while it is closed (fixture "canonical").
import { describe, expect, it } from "vitest";
import { elementsFor } from "../src/graph_elements.js";
import { wrapAtUnderscores } from "../src/inspector.js";
import { prepareGraph } from "../src/names.js";
import { payload } from "./fixtures.js";

describe("small stalls", () => {
  it("wraps register_full_backward_hook only after its underscores", () => {
    const el = document.createElement("h4");
    el.append(...wrapAtUnderscores("register_full_backward_hook"));
    expect(el.textContent).toBe("register_full_backward_hook");
    expect(el.querySelectorAll("wbr").length).toBe(3);
    const texts = [...el.childNodes].filter((n) => n.nodeType === 3).map((n) => n.textContent);
    expect(texts).toEqual(["register_", "full_", "backward_", "hook"]);
  });

  it("marks the root box edited for an edit of its Sub only while the box is closed", () => {
    const graph = prepareGraph(payload("canonical"));
    const sub = graph.nodes.find((n) => n.id === "SubBackward0_0");
    const root = graph.groups.find((g) => g.module === "");
    // the graph as Python sends it after an edit of the Sub node inside the root module
    sub.edited = true;
    root.edited = false;
    root.edits_inside = true;
    const measure = (t) => t.length * 7;
    const boxOf = (collapsed) =>
      elementsFor(graph, collapsed, null, null, measure).els.find((e) => e.data.id === "group:");
    expect(boxOf(new Set()).data.edited).toBe(false);
    expect(boxOf(new Set([""])).data.edited).toBe(true);
  });
});
