// @vitest-environment happy-dom
// The root module has one name in every view: its class with "(root)" (fixture "canonical": the
// 2*x + 3*y - 5*z module, whose ops all sit in the root). The inspector's module row names the
// module that holds an op, never the op's own label.
import { describe, expect, it } from "vitest";
import { elementsFor } from "../src/graph_elements.js";
import { graphSummary } from "../src/graph_summary.js";
import { renderInspector } from "../src/inspector.js";
import { moduleName, prepareGraph } from "../src/names.js";
import { payload } from "./fixtures.js";

const graph = prepareGraph(payload("canonical"));
const ROOT = "Canonical (root)";

function moduleRow(data, summary) {
  const el = document.createElement("div");
  renderInspector(el, data, summary);
  const row = [...el.querySelectorAll(".hv-meta tr")].find((tr) => tr.querySelector("th").textContent === "module");
  return row?.querySelector("td").textContent;
}

describe("the root module's name", () => {
  it("is the box's label, the inspector's module row and the tooltip's, for every op and leaf in it", () => {
    expect(moduleName(graph, "")).toBe(ROOT);
    const inRoot = graph.nodes.filter((n) => n.module === "");
    expect(inRoot.length).toBe(8); // x, y, z and the five ops of 2*x + 3*y - 5*z
    const tips = new Map(
      elementsFor(graph, new Set(), null, null, (t) => t.length * 7).els.map((e) => [e.data.id, e.data.title]),
    );
    for (const n of inRoot) {
      const summary = graphSummary(graph, n.id);
      // before the kernel answers, and after (its data names the module "", the op its label)
      expect(moduleRow({}, summary), n.id).toBe(ROOT);
      expect(moduleRow({ id: n.id, kind: n.kind, node_kind: n.kind, module: "", label: summary.label }, summary)).toBe(
        ROOT,
      );
      if (n.kind === "op") expect(tips.get(n.id)).toBe(`${n.id} in ${ROOT}`);
    }
    expect(moduleRow({}, graphSummary(graph, "MseLossBackward0_0"))).toBe("(loss)");
  });
});
