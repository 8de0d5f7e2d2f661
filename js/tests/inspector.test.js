// @vitest-environment happy-dom
// The inspector of every element of a saved page (fixture "page": a Linear-ReLU-Linear run and
// the kernel's inspector of each of its elements, as hookviz.Widget.save_html saved them).
import { describe, expect, it } from "vitest";
import { graphSummary } from "../src/graph_summary.js";
import { renderInspector } from "../src/inspector.js";
import { prepareGraph } from "../src/names.js";
import { histogram, tensorView } from "../src/tensor_view.js";
import { payload } from "./fixtures.js";

const page = payload("page");
const graph = prepareGraph(page.graph);
const inspectors = Object.values(page.__inspectors);

function inspector(data, summary, note = "") {
  const el = document.createElement("div");
  renderInspector(el, data, summary, note);
  return el;
}

describe("the inspector", () => {
  it("titles each element the same before and after the kernel answers", () => {
    const compared = inspectors.filter((data) => {
      const summary = graphSummary(graph, data.id);
      const before = inspector({}, summary, "asking the kernel…").querySelector(".hv-title").textContent;
      const after = inspector(data, summary).querySelector(".hv-title").textContent;
      expect(after.startsWith(before.replace(/full name .*$/, "")), data.id).toBe(true);
      return true;
    });
    expect(compared.length).toBe(14);
    const relu = inspector(page.__inspectors.ReluBackward0_0, graphSummary(graph, "ReluBackward0_0"));
    expect(relu.querySelector(".hv-title").textContent).toBe("ReluNode ReluBackward0");
  });

  it("draws what each hook sees: an op's grad_outputs and grad_inputs, a module's two hook views", () => {
    const op = inspector(page.__inspectors.AddmmBackward0_0, graphSummary(graph, "AddmmBackward0_0"));
    const heads = [...op.querySelectorAll(".hv-section h4")].map((h) => h.textContent);
    expect(heads).toEqual([
      "forward value",
      "grad_outputs (pre-hook sees)",
      "grad_inputs (post-hook sees)",
      "saved tensors",
      "hooks here",
    ]);
    const module = inspector(page.__inspectors["module:0"], graphSummary(graph, "module:0"));
    expect([...module.querySelectorAll(".hv-hook-view > h4")].map((h) => h.textContent)).toEqual([
      "register_full_backward_hook",
      "register_backward_hook (legacy)",
    ]);
    expect(module.querySelector(".hv-title").textContent).toBe("module 0 · Linear");
    expect(module.querySelector(".hv-parameters h4").textContent).toBe("parameters' gradient norms (2)");
  });

  it("says what the graph says while the kernel has not answered, and why", () => {
    const el = inspector(
      {},
      graphSummary(graph, "module:"),
      "tensor values of this element are not in this saved page",
    );
    expect(el.querySelector(".hv-values-note").textContent).toBe(
      "tensor values of this element are not in this saved page",
    );
    const leaves = graph.nodes.filter((n) => n.kind === "leaf" && n.module !== "(loss)");
    expect(leaves.length).toBe(4); // the run's parameters (its input does not require grad)
    expect(el.querySelector(".hv-parameters h4").textContent).toBe(`leaves' gradient norms (${leaves.length})`);
    expect(inspector({}, null).textContent).toBe("Click a node of the graph to inspect it.");
  });
});

describe("a tensor", () => {
  const tensors = inspectors.flatMap((d) => [...(d.grad_outputs || []), ...(d.grad_inputs || [])]).filter(Boolean);

  it("shows its value as Python wrote it, or its statistics and histogram", () => {
    expect(tensors.length).toBeGreaterThan(10);
    const compared = tensors.filter((t) => {
      const view = tensorView(t);
      expect(view.querySelector(".hv-shape").textContent).toBe(`${t.dtype}[${t.shape.join(", ")}] ${t.device || ""}`);
      if (t.text.value !== undefined) expect(view.querySelector(".hv-value").textContent).toBe(t.text.value);
      else expect(view.querySelector(".hv-stats").textContent).toContain(`norm ${t.text.norm}`);
      return true;
    });
    expect(compared.length).toBe(tensors.length);
  });

  it("draws a histogram bar per bin", () => {
    const t = tensors.find((x) => x.histogram?.counts?.length);
    const svg = histogram(t.histogram, t.numel, t.text.histogram);
    expect(svg.querySelectorAll("rect").length).toBe(t.histogram.counts.length);
    expect(tensorView(null, null, "None: x does not require grad").textContent).toBe("None: x does not require grad");
  });
});
