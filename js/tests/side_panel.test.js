// @vitest-environment happy-dom
// The side panel over a saved page's state (fixture "page"), with and without a kernel.
import { describe, expect, it } from "vitest";
import { SidePanel } from "../src/side_panel.js";
import { payload } from "./fixtures.js";
import { pageState } from "./state.js";

function sidePanel(changes = {}) {
  const { state, model, sent } = pageState("page", changes);
  return { side: new SidePanel(state), state, model, sent };
}

describe("the side panel", () => {
  it("opens with a selection and draws the kernel's inspector once it has come for it", () => {
    const { side, model } = sidePanel({ selected: "", inspector: {} });
    expect(side.draw()).toBe("");
    expect(side.el.hidden).toBe(true);
    model.set("selected", "AddmmBackward0_1"); // the saved page answers with the saved inspector
    expect(side.draw()).toBe("AddmmBackward0_1");
    expect(side.el.hidden).toBe(false);
    expect(side.inspector.querySelector(".hv-title").textContent).toBe("AddmmNode AddmmBackward0");
    expect(side.inspector.querySelector(".hv-values-note")).toBeNull();
  });

  it("says what the graph says while the kernel's answer has not come", () => {
    const { side, model } = sidePanel({ static_note: "" });
    model.set("inspector", {});
    side.draw();
    expect(side.inspector.querySelector(".hv-values-note").textContent).toBe(
      "tensor statistics and values: asking the kernel…",
    );
  });

  it("stays closed on the selection it was closed on, until a click on the graph", () => {
    const { side, state } = sidePanel();
    side.draw();
    side.el.querySelector(".hv-side-close").click();
    expect(side.el.hidden).toBe(true);
    side.draw();
    expect(side.el.hidden).toBe(true);
    side.reopen(state.get("selected"));
    expect(side.el.hidden).toBe(false);
  });

  it("applies an edit at a hook site of the selection with a kernel, and not in a saved page", () => {
    const { side, model, sent, state } = sidePanel({ static_note: "", selected: "ReluBackward0_0" });
    model.set("inspector", payload("page").__inspectors.ReluBackward0_0);
    side.draw();
    const expression = side.editor.querySelector(".hv-expr");
    expression.value = "grad * 0";
    expression.dispatchEvent(new Event("input"));
    side.editor.querySelector(".hv-apply").click();
    expect(sent).toEqual([
      {
        type: "apply_edit",
        target: "ReluBackward0_0",
        slot: side.editor.querySelector(".hv-site").value,
        expression: "grad * 0",
      },
    ]);
    expect(state.marks.apply).toBeGreaterThanOrEqual(state.marks.render);
    side.drawEditor(); // redrawn (the edits changed): what the user typed stays
    expect(side.editor.querySelector(".hv-expr").value).toBe("grad * 0");
    const saved = sidePanel({ selected: "ReluBackward0_0", inspector: payload("page").__inspectors.ReluBackward0_0 });
    saved.side.draw();
    expect(saved.side.editor.querySelector(".hv-apply").disabled).toBe(true);
  });
});
