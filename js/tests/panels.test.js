// @vitest-environment happy-dom
// The panels around the graph over saved pages' states (fixtures "page", "watch_page").
import { describe, expect, it } from "vitest";
import { Panels } from "../src/panels.js";
import { payload } from "./fixtures.js";
import { pageState } from "./state.js";

function panels(name = "page", changes = {}) {
  const { state, model, sent } = pageState(name, changes);
  const selected = [];
  return { panels: new Panels(state, (id) => selected.push(id)), state, model, sent, selected };
}

describe("the panels", () => {
  it("draw the run's leaf table, every leaf a row", () => {
    const { panels: p } = panels();
    p.drawLeaves();
    const rows = [...p.leaves.querySelectorAll("tr[data-leaf]")].map((r) => r.dataset.leaf);
    expect(rows.sort()).toEqual(
      payload("page")
        .leaf_summary.map((l) => l.name)
        .sort(),
    );
  });

  it("draw the watch's table at the step picked while a watch is shown", () => {
    const { panels: p } = panels("watch_page");
    p.drawLeaves();
    const table = payload("watch_page").watch_view.leaves;
    expect(p.leaves.querySelector("h4").textContent).toBe(table.title);
    expect(p.leaves.querySelectorAll("tr[data-leaf]").length).toBe(table.rows.length);
  });

  it("draw the diagnosis banner; a click on a finding selects its node", () => {
    const { panels: p, state, selected } = panels("watch_page");
    p.drawBanner();
    const { diagnosis } = payload("watch_page");
    expect(p.banner.hidden).toBe(false);
    const clickable = p.banner.querySelector(".hv-finding.hv-clickable");
    expect(clickable).not.toBeNull();
    clickable.click();
    expect(selected).toEqual([clickable.dataset.node]);
    expect(state.marks.tap).toBeGreaterThanOrEqual(state.marks.render);
    expect(diagnosis.onset.length + diagnosis.findings.length).toBeGreaterThan(0);
  });

  it("draw the active edits, and remove one with a kernel", () => {
    const edit = { id: 7, target: "ReluBackward0_0", slot: "grad_inputs[0]", source: "grad * 0", pending: true };
    const { panels: p, sent, state } = panels("page", { static_note: "", edits: [edit] });
    p.drawEdits();
    expect(p.edits.querySelector("h4").textContent).toBe("Active edits (1)");
    expect(p.edits.querySelector(".hv-badge-pending").textContent).toBe("pending");
    p.edits.querySelector(".hv-remove").click();
    expect(sent).toEqual([{ type: "remove_edit", id: 7 }]);
    expect(state.marks.edits).toBeGreaterThanOrEqual(state.marks.render);
  });

  it("hide the log of a run that kept none, and show a loaded run's", () => {
    const { panels: p, model } = panels();
    p.drawLog();
    expect(p.log.hidden).toBe(true);
    model.set("log", [{ hook: "print_grad", where: "ReluBackward0_0", text: "tensor([1.])" }]);
    p.drawLog();
    expect(p.log.querySelector("pre").textContent).toBe("[print_grad @ ReluBackward0_0] tensor([1.])");
  });

  it("hide the chart box when the run has no layers to chart", () => {
    const { panels: p } = panels("page", { chart: {} });
    p.drawChart();
    expect(p.chart.hidden).toBe(true);
    p.destroy();
  });
});
