// The search box: a part of a module name, an op or a leaf; Enter selects the best match
// (find.js ranks them), Esc clears, "/" anywhere in the widget comes here. A search asked from
// Python (w.search sets `query`) runs the same way.
import { errorLine, h } from "./dom.js";
import { find } from "./find.js";

export class SearchBox {
  /**
   * state: the page's ViewState; root: the widget's element (its "/" key); onFound(id): select the
   * match (a node id or "module:<name>").
   */
  constructor(state, root, onFound) {
    this.state = state;
    this.onFound = onFound;
    this.searchedFor = null;
    this.input = h("input", {
      class: "hv-search",
      type: "search",
      placeholder: "search  /",
      "aria-label": "search a module, op or leaf",
      spellcheck: "false",
    });
    this.error = errorLine("");
    this.el = h("span", { class: "hv-group hv-search-group" }, this.input, this.error);
    this.input.addEventListener("keydown", (e) => {
      // Keep JupyterLab's notebook shortcuts (Esc, Enter, letters) out of the search box.
      e.stopPropagation();
      const query = this.input.value;
      if (e.key === "Enter" && query.trim()) {
        state.mark("search");
        this.run(query);
        state.set({ query });
      } else if (e.key === "Escape") {
        this.input.value = "";
        this.clearError();
        this.input.blur();
      }
    });
    this.input.addEventListener("keyup", (e) => e.stopPropagation());
    // "/" anywhere in the widget goes to the search box, as in Model Explorer and GitHub.
    root.addEventListener("keydown", (e) => {
      if (e.key !== "/" || e.target instanceof HTMLInputElement || e.target instanceof HTMLTextAreaElement) return;
      e.preventDefault();
      e.stopPropagation();
      this.input.focus();
    });
  }

  /** Find `query` in the graph on the page: select the match, or say that nothing matches. */
  run(query) {
    this.searchedFor = query;
    const hit = find(query, this.state.graph());
    this.error.textContent = hit
      ? ""
      : `nothing is named like '${query.trim()}': search takes part of a module name (h.3.mlp), an op (AddmmBackward0_3) or a leaf (c_fc.weight)`;
    if (hit) this.onFound(hit);
  }

  /** A search asked from Python (w.search): the page finds the match. */
  followQuery() {
    const query = this.state.get("query") || "";
    if (!query.trim() || query === this.searchedFor) return;
    this.input.value = query;
    this.run(query);
  }

  /** A failed search's error goes with the next selection, toggle or run. */
  clearError() {
    this.error.textContent = "";
  }
}
