// @vitest-environment happy-dom
// The whole page drawn by index.js from a saved page's state (fixture "page", written by
// hookviz.Widget.save_html from a real run), as a saved page draws it: every part in its place.
// (cytoscape needs the page's layout, which happy-dom has not: the graph view itself is tested in
// the browser tests, tests/e2e/.)
import { afterEach, describe, expect, it } from "vitest";
import { renderSaved } from "../src/index.js";
import { payload } from "./fixtures.js";

let stop = () => {};
afterEach(() => stop());

function page(name = "page", changes = {}) {
  const el = document.createElement("div");
  document.body.append(el);
  stop = renderSaved(el, { ...payload(name), ...changes });
  return el.querySelector(".hookviz-widget");
}

describe("the page", () => {
  it("places every part, top to bottom", () => {
    const root = page();
    const parts = [...root.children].map((c) => c.className.split(" ")[0]);
    expect(parts).toEqual([
      "hv-toolbar",
      "hv-error",
      "hv-banner",
      "hv-watch",
      "hv-main",
      "hv-legend",
      "hv-replay",
      "hv-bottom",
      "hv-chart",
      "hv-heatmap",
    ]);
    expect([...root.querySelector(".hv-main").children].map((c) => c.className)).toEqual(["hv-graph", "hv-side"]);
    expect(root.previousElementSibling.tagName).toBe("STYLE");
  });

  it("draws the saved state: summary, selection, banner, edits, replay and the saved page's note", () => {
    const state = payload("page");
    const root = page();
    expect(root.querySelector(".hv-summary").textContent).toBe(state.summary.text);
    expect(root.querySelector(".hv-side").hidden).toBe(false);
    expect(root.querySelector(".hv-inspector .hv-title").textContent).toContain("module 2");
    expect(root.querySelector(".hv-rerun").disabled).toBe(true);
    expect(root.querySelector(".hv-static-note").textContent).toBe(state.static_note);
    expect(root.querySelector(".hv-edits h4").textContent).toBe("Active edits (0)");
    expect(root.querySelector(".hv-step").textContent).toBe(`${state.replay.length} backward steps recorded`);
    expect(root.querySelector(".hv-watch").hidden).toBe(true);
    expect(root.hookviz.model.get("selected")).toBe(state.selected);
    expect(root.hookviz.marks.inspector).toBeGreaterThanOrEqual(root.hookviz.marks.render);
  });

  it("follows a selection and a search made in Python", () => {
    const root = page();
    const model = root.hookviz.model;
    model.set("selected", "0.weight");
    // the saved page's inspector of the leaf (the kernel's answer, saved with the page)
    const saved = payload("page").__inspectors["0.weight"];
    expect(root.querySelector(".hv-inspector .hv-title").textContent).toBe(saved.op);
    expect(root.querySelector(".hv-inspector .hv-meta td").textContent).toBe("0.weight");
    model.set("query", "ReluBackward0");
    expect(model.get("selected")).toBe("ReluBackward0_0");
    expect(root.querySelector(".hv-inspector .hv-title").textContent).toContain("Relu");
    model.set("query", "no such name");
    expect(root.querySelector(".hv-search-group .hv-error").textContent).toContain(
      "nothing is named like 'no such name'",
    );
  });

  it("stops following the model once taken down", () => {
    const root = page();
    stop();
    stop = () => {};
    const before = root.querySelector(".hv-inspector").innerHTML;
    root.hookviz.model.set("selected", "0.weight");
    expect(root.querySelector(".hv-inspector").innerHTML).toBe(before);
  });
});
