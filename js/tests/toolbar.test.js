// @vitest-environment happy-dom
// The toolbar over a saved page's state (fixture "page"), as a notebook's page (with a kernel)
// and as a saved page (without one).
import { describe, expect, it } from "vitest";
import { collapseAll, firstCollapsed } from "../src/collapse.js";
import { SearchBox } from "../src/search.js";
import { Toolbar } from "../src/toolbar.js";
import { payload } from "./fixtures.js";
import { pageState } from "./state.js";

function toolbar(changes = { static_note: "" }) {
  const { state, model, sent } = pageState("page", changes);
  const root = document.createElement("div");
  let fitted = 0;
  const bar = new Toolbar(state, new SearchBox(state, root, () => {}), root, () => (fitted += 1));
  const click = (cls) => bar.el.querySelector(`.${cls}`).click();
  return { bar, state, model, sent, root, click, fitted: () => fitted };
}

describe("the toolbar", () => {
  it("switches the view kind and opens or closes every box by the page's rules", () => {
    const { bar, state, model, click } = toolbar();
    click("hv-view-modules");
    expect(model.get("view")).toBe("modules");
    expect(model.get("collapsed")).toEqual(firstCollapsed(state.graph(), "modules"));
    click("hv-collapse-all");
    expect(model.get("collapsed")).toEqual(collapseAll(state.graph().groups));
    click("hv-expand-all");
    expect(model.get("collapsed")).toEqual([]);
    click("hv-view-ops");
    expect(model.get("view")).toBe("ops");
    bar.drawSummary();
    expect(bar.viewOps.classList.contains("hv-on")).toBe(true);
    expect(bar.viewModules.classList.contains("hv-on")).toBe(false);
    expect(bar.summary.textContent).toBe(payload("page").summary.text);
  });

  it("fits the graph and asks Python to re-run on the device picked", () => {
    const { bar, sent, click, fitted } = toolbar();
    click("hv-fit");
    expect(fitted()).toBe(1);
    bar.drawDevices();
    expect([...bar.device.options].map((o) => o.value)).toEqual(payload("page").devices);
    click("hv-rerun");
    expect(sent).toEqual([{ type: "rerun", device: payload("page").device }]);
  });

  it("marks re-run when the edits changed since the run shown, and shows request errors", () => {
    const { bar, model, root } = toolbar();
    model.set("edit_state", { ...payload("page").edit_state, stale: true });
    bar.drawEditState();
    expect(bar.rerun.textContent).toBe("Re-run backward •");
    expect(root.classList.contains("hv-edits-pending")).toBe(true);
    expect(bar.staleNote.hidden).toBe(false);
    model.set("errors", { rerun: "re-run failed: ValueError", view: "no such view", message: "bad message" });
    bar.drawErrors();
    expect([bar.rerunError.textContent, bar.viewError.textContent, bar.message.textContent]).toEqual([
      "re-run failed: ValueError",
      "no such view",
      "bad message",
    ]);
    model.set("diagnosis", { pending: true });
    bar.drawDiagnosing();
    expect(bar.diagnosing.hidden).toBe(false);
  });

  it("turns re-run off in a saved page, with the page's note", () => {
    const { bar, model } = toolbar({});
    const note = payload("page").static_note;
    expect([bar.rerun.disabled, bar.device.disabled, bar.rerun.title]).toEqual([true, true, note]);
    expect(bar.message.textContent).toBe(note);
    model.set("edit_state", { stale: true });
    bar.drawEditState();
    expect(bar.rerun.textContent).toBe("Re-run backward"); // a saved page never asks for one
    bar.drawErrors();
    expect(bar.message.classList.contains("hv-static-note")).toBe(true);
  });
});
