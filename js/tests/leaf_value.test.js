// @vitest-environment happy-dom
// A leaf shows its value as forward used it (a parameter's weights), not "None" (fixture "page": a
// saved page of a Linear-ReLU-Linear run, as hookviz.Widget.save_html saved it).
import { describe, expect, it } from "vitest";
import { graphSummary } from "../src/graph_summary.js";
import { renderInspector } from "../src/inspector.js";
import { prepareGraph } from "../src/names.js";
import { payload } from "./fixtures.js";

const page = payload("page");
const graph = prepareGraph(page.graph);

describe("a leaf in the inspector", () => {
  it("shows the value forward used, on a saved page too", () => {
    const leaves = graph.nodes.filter((n) => n.kind === "leaf" && page.__inspectors[n.id]);
    expect(leaves.length).toBe(4);
    for (const leaf of leaves) {
      const data = page.__inspectors[leaf.id];
      const el = document.createElement("div");
      renderInspector(el, data, graphSummary(graph, leaf.id));
      const section = [...el.querySelectorAll(".hv-section")].find(
        (s) => s.querySelector("h4")?.textContent === "value (as forward used it)",
      );
      expect(section, leaf.id).toBeTruthy();
      expect(section.querySelector(".hv-not-seen")).toBeNull();
      expect(section.querySelector(".hv-shape").textContent).toContain(`[${data.output.shape.join(", ")}]`);
      // no note to the page's author in what a reader sees
      expect(el.textContent).not.toContain("save_html");
    }
  });
});
