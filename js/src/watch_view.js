// The watch view: the bar over a watch's kept training steps (its slider, rank picker, notes and
// a button back to the run) and the heatmap of its norms, the step shown marked. Picking a step or
// rank asks the kernel, which sets the watch_view traitlet; the graph, the leaf table and the
// banner follow it.
import { errorLine, fill, h } from "./dom.js";
import { destroyChart, renderHeatmap } from "./chart.js";

/** Watch bar: a slider over the watch's kept training steps, and a button back to the run. */
export class WatchBar {
  constructor({ onStep, onClose, onRank }) {
    const el = h("div", { class: "hv-watch", hidden: true });
    this.el = el;
    this.steps = [];
    this.slider = h("input", {
      class: "hv-watch-slider",
      type: "range",
      min: "0",
      max: "0",
      value: "0",
      "aria-label": "training step",
    });
    this.slider.addEventListener("input", () => {
      const step = this.steps[Number(this.slider.value)];
      if (step !== undefined) onStep(step);
    });
    this.label = h("span", { class: "hv-watch-step" }, "");
    this.title = h("b", {}, "");
    this.error = errorLine("");
    // A gathered history (DDP / FSDP2): reduced norms or one rank's local, pre-reduce ones.
    this.rank = h("select", { class: "hv-watch-rank", "aria-label": "rank" });
    this.rank.addEventListener("change", () => onRank(this.rank.value === "reduced" ? null : Number(this.rank.value)));
    const close = h("button", { class: "hv-watch-close", onclick: onClose }, "Back to the run");
    // What each part of the page shows (rank, step, local or reduced), as Python words it.
    this.parts = h("ul", { class: "hv-watch-parts hv-muted" });
    // What a reader of the numbers must know (what a step is, a loss scale in them), as Python words it.
    this.notes = h("ul", { class: "hv-watch-notes" });
    fill(
      el,
      h("div", { class: "hv-row" }, this.title, this.slider, this.label, this.rank, close),
      this.notes,
      this.parts,
      this.error,
    );
  }

  /** Turn the controls that ask the kernel off, with `note` (why) as their tooltip: a saved page. */
  disable(note) {
    for (const control of this.el.querySelectorAll("input, select, button")) {
      control.disabled = true;
      control.title = note;
    }
  }

  /** view: the watch_view traitlet ({steps, step, index, model, rank}); empty = no watch shown.
   * ranks: the watch_ranks traitlet (empty unless a gathered history is shown). */
  set(view, error, ranks = []) {
    this.error.textContent = error || "";
    this.el.hidden = !view || !view.steps;
    if (this.el.hidden) return;
    this.rank.hidden = !ranks.length;
    fill(
      this.rank,
      // one process (no all-reduce) has no reduced norms to offer
      view.reduced ? h("option", { value: "reduced" }, "all ranks (reduced)") : null,
      ranks.map((r) => h("option", { value: String(r) }, `rank ${r} (local)`)),
    );
    this.rank.value = view.rank === null || view.rank === undefined ? "reduced" : String(view.rank);
    this.steps = view.steps;
    this.slider.max = String(view.steps.length - 1);
    this.slider.value = String(view.index);
    this.title.textContent = view.live
      ? `Live watch of ${view.model}, training: gradient norms at step`
      : `Watch of ${view.model}: gradient norms at training step`;
    this.label.textContent = `${view.step} (${view.index + 1}/${view.steps.length} kept)`;
    // a step the GradScaler skipped says so where the step is named
    this.label.dataset.skipped = view.step_note ? "true" : "false";
    this.label.title = view.step_note || "";
    this.label.style.color = view.step_note ? view.step_note_color : "";
    if (view.step_note) this.label.textContent += `: ${view.step_note}`;
    fill(
      this.notes,
      (view.notes || []).map((text) => h("li", {}, text)),
    );
    fill(
      this.parts,
      (view.parts || []).map((text) => h("li", {}, text)),
    );
  }
}

export class WatchView {
  /** state: the page's ViewState. */
  constructor(state) {
    this.state = state;
    const step = (step) => state.send({ type: "watch_step", step });
    this.bar = new WatchBar({
      onStep: step,
      onClose: () => state.send({ type: "hide_watch" }),
      onRank: (rank) => state.send({ type: "watch_rank", rank }),
    });
    if (state.get("static_note")) this.bar.disable(state.get("static_note"));
    this.el = this.bar.el;
    this.heatmap = h("div", { class: "hv-heatmap" });
    this.onHeatmapStep = step;
    this.attached = false; // plotly needs a width: the heatmap is drawn once the page is
  }

  drawBar() {
    this.bar.set(this.state.get("watch_view"), this.state.errors().watch, this.state.get("watch_ranks") || []);
  }

  drawHeatmap() {
    if (!this.attached) return;
    const view = this.state.get("watch_view") || {};
    renderHeatmap(this.heatmap, view.steps ? this.state.get("watch_heatmap") : null, view.step, this.onHeatmapStep);
  }

  destroy() {
    destroyChart(this.heatmap);
  }
}
