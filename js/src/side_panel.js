// The side panel: the inspector of the selection and its edit box. It opens with a selection and
// can be closed to give the graph the whole width.
import { errorLine, h } from "./dom.js";
import { renderEditor } from "./editor.js";
import { graphSummary } from "./graph_summary.js";
import { renderInspector } from "./inspector.js";

export class SidePanel {
  /** state: the page's ViewState. */
  constructor(state) {
    this.state = state;
    this.closedFor = null; // the selection the panel was closed on
    this.typed = {}; // what the user typed in the edit box, kept when the panel is redrawn
    this.inspector = h("div", { class: "hv-inspector" });
    this.editor = h("div", { class: "hv-editor" });
    this.error = errorLine("");
    const close = h(
      "button",
      {
        class: "hv-side-close",
        title: "close the panel (the graph takes the whole width)",
        onclick: () => {
          this.closedFor = state.get("selected") || null;
          this.el.hidden = true;
        },
      },
      "✕",
    );
    this.el = h("div", { class: "hv-side", hidden: true }, close, this.error, this.editor, this.inspector);
  }

  /** A click on the graph reopens a closed panel, also on the element it was closed on. */
  reopen(id) {
    this.closedFor = null;
    if (this.state.get("selected") === id) this.el.hidden = false;
  }

  /** The kernel's inspector (values, statistics, hook sites) once it has come for the selection. */
  answered() {
    const id = this.state.get("selected") || "";
    const full = this.state.get("inspector") || {};
    return id && full.id === id ? full : {};
  }

  /**
   * Draw the inspector of the selection: the kernel's answer once it has come; meanwhile, or with
   * no kernel, what the graph on the page says. Returns the selection ("" for none).
   */
  draw() {
    const { state } = this;
    const id = state.get("selected") || "";
    const data = this.answered();
    const summary = id ? graphSummary(state.graph(), id) : null;
    this.el.hidden = (!id && !state.errors().select) || (!!id && id === this.closedFor);
    if (id !== this.closedFor) this.closedFor = null;
    const note = state.staticNote
      ? "tensor values of this element are not in this saved page"
      : "tensor statistics and values: asking the kernel…";
    renderInspector(this.inspector, data, summary, note);
    this.drawEditor(data);
    state.mark("inspector");
    if (data.id) state.mark("values"); // the kernel's answer is drawn (read by the benchmark)
    return id;
  }

  /** The edit box of the selection; drawn again when the edits change (it says which edit Apply
   * replaces). `data`: the kernel's inspector of the selection. */
  drawEditor(data = this.answered()) {
    const { state } = this;
    renderEditor(
      this.editor,
      data,
      state.errors().edit,
      this.typed,
      (msg) => {
        state.mark("apply");
        state.send(msg);
      },
      state.staticNote,
      state.get("edits") || [],
    );
  }

  /** A refused selection's error. */
  drawError() {
    this.error.textContent = this.state.errors().select || "";
  }
}
