// The toolbar: the view kind, collapse and expand, fit, full screen, the device and re-run, the
// run's summary; and the message line under it (a saved page's note, a malformed message).
import { errorLine, fill, h } from "./dom.js";

export class Toolbar {
  /**
   * state: the page's ViewState; search: the SearchBox (its group leads the toolbar); root: the
   * widget's element (full screen); onFit(): fit the whole graph into the view.
   */
  constructor(state, search, root, onFit) {
    this.state = state;
    this.root = root;
    const button = (cls, text, onclick, title) => h("button", { class: cls, title, onclick }, text);
    this.viewOps = button(
      "hv-view-ops",
      "Overview",
      () => state.setView("ops"),
      "the module tree opened as deep as fits",
    );
    this.viewModules = button(
      "hv-view-modules",
      "Module tree",
      () => state.setView("modules"),
      "every module open down to the innermost ones",
    );
    const fullscreen = button(
      "hv-fullscreen",
      "Full screen",
      () => (document.fullscreenElement ? document.exitFullscreen() : root.requestFullscreen?.()),
      "full screen (Esc leaves)",
    );
    this.staleNote = h("span", { class: "hv-stale", hidden: true });
    this.device = h("select", { class: "hv-device", "aria-label": "device" });
    this.rerun = button("hv-rerun", "Re-run backward", () => {
      state.mark("rerun");
      state.send({ type: "rerun", device: this.device.value });
    });
    this.summary = h("span", { class: "hv-summary" });
    this.diagnosing = h("span", { class: "hv-diagnosing", hidden: true }, "diagnosing this run…");
    this.rerunError = errorLine("");
    this.viewError = errorLine("");
    this.el = h(
      "div",
      { class: "hv-toolbar" },
      h("span", { class: "hv-brand" }, "hookviz"),
      search.el,
      h("span", { class: "hv-group" }, this.viewOps, this.viewModules, this.viewError),
      h(
        "span",
        { class: "hv-group" },
        button("hv-collapse-all", "Collapse all", () => state.collapseAll()),
        button("hv-expand-all", "Expand all", () => state.expandAll()),
        button("hv-fit", "Fit", onFit),
        fullscreen,
      ),
      h(
        "span",
        { class: "hv-group" },
        h("label", {}, "device ", this.device),
        this.rerun,
        this.staleNote,
        this.rerunError,
      ),
      this.summary,
      this.diagnosing,
    );
    this.message = errorLine("");
    const note = state.staticNote;
    if (note) {
      this.rerun.disabled = true;
      this.device.disabled = true;
      this.rerun.title = this.device.title = note;
      this.message.textContent = note;
      this.message.classList.add("hv-static-note");
    }
  }

  /** The run's summary line and which view kind is on. */
  drawSummary() {
    const s = this.state.get("summary") || {};
    this.summary.textContent = s.text || "";
    const view = this.state.get("view");
    this.viewOps.classList.toggle("hv-on", view !== "modules");
    this.viewModules.classList.toggle("hv-on", view === "modules");
  }

  /** The device picker: the devices the model can run on, the run's own picked. */
  drawDevices() {
    const current = this.state.get("device");
    fill(
      this.device,
      (this.state.get("devices") || []).map((d) => h("option", { value: d }, d)),
    );
    this.device.value = current;
  }

  /** The errors of re-run, device and view requests, and the message line. */
  drawErrors() {
    const e = this.state.errors();
    const note = this.state.staticNote;
    this.rerunError.textContent = e.rerun || e.device || "";
    // A refused device does not stay picked: the picker shows the device of the run on screen.
    if (e.device) this.device.value = this.state.get("device");
    this.viewError.textContent = e.view || "";
    this.message.textContent = e.message || note;
    this.message.classList.toggle("hv-static-note", !e.message && !!note);
  }

  /** Re-run (and the widget) marked when the edits changed since the run shown. */
  drawEditState() {
    // A saved page cannot re-run: it never asks for one (the button is disabled with the note).
    const stale = !!(this.state.get("edit_state") || {}).stale && !this.state.staticNote;
    this.rerun.classList.toggle("hv-pending", stale);
    this.root.classList.toggle("hv-edits-pending", stale);
    this.rerun.textContent = stale ? "Re-run backward •" : "Re-run backward";
    this.staleNote.hidden = !stale;
    this.staleNote.textContent = stale ? "edits changed since this run: the graph shows the old run, press Re-run" : "";
  }

  /** "diagnosing this run…" while a large run's diagnosis comes with its details. */
  drawDiagnosing() {
    this.diagnosing.hidden = !(this.state.get("diagnosis") || {}).pending;
  }
}
