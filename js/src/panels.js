// The panels around the graph: the diagnosis banner above it, and below it the leaf table (the
// run's, or the watch's at the step picked), the active edits, what hooks printed and the
// gradient-flow chart.
import { h } from "./dom.js";
import { renderBanner } from "./banner.js";
import { destroyChart, renderChart } from "./chart.js";
import { renderEdits } from "./editor.js";
import { renderLog } from "./hook_log.js";
import { renderLeaves } from "./leaf_table.js";
import { renderWatchLeaves } from "./watch_leaves.js";

export class Panels {
  /** state: the page's ViewState; onSelect(id): a click on a finding selects its element. */
  constructor(state, onSelect) {
    this.state = state;
    this.onSelect = onSelect;
    this.banner = h("div", { class: "hv-banner", role: "status", hidden: true });
    this.leaves = h("div", { class: "hv-leaves" });
    this.edits = h("div", { class: "hv-edits" });
    this.log = h("div", { class: "hv-log" });
    this.bottom = h("div", { class: "hv-bottom" }, this.leaves, this.edits, this.log);
    this.chart = h("div", { class: "hv-chart" });
  }

  drawBanner() {
    renderBanner(this.banner, this.state.get("diagnosis"), (id) => {
      this.state.mark("tap");
      this.onSelect(id);
    });
  }

  drawLeaves() {
    const { state } = this;
    // While a watch is shown, the watch's statistics at the rank and step picked (they follow the
    // picker); the run's table comes back with it.
    const watchLeaves = (state.get("watch_view") || {}).leaves;
    if (watchLeaves) renderWatchLeaves(this.leaves, watchLeaves);
    else renderLeaves(this.leaves, state.leaves(), state.get("details_pending"));
  }

  /** Only the "summarising…" line depends on details_pending: a drawn table keeps the order the
   * user sorted. */
  drawLeavesPending() {
    if (!this.state.leaves().length) this.drawLeaves();
  }

  drawEdits() {
    const { state } = this;
    state.mark("edits");
    renderEdits(
      this.edits,
      state.get("edits") || [],
      state.get("code") || "",
      state.errors().edits,
      (msg) => state.send(msg),
      state.staticNote ? {} : state.get("edit_state") || {},
      state.staticNote,
    );
  }

  drawLog() {
    renderLog(this.log, this.state.get("log"));
  }

  drawChart() {
    renderChart(this.chart, this.state.get("chart"));
  }

  destroy() {
    destroyChart(this.chart);
  }
}
