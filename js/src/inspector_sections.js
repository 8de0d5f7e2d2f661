// The parts of the inspector that the graph on the page can say before the kernel answers: a
// module's or an op's title, its child modules and its parameters' gradient norms; and the note of
// the watch on screen.
import { h } from "./dom.js";

/**
 * A module's child modules and the gradient norms of the parameters inside it (graphSummary).
 * `runLabel`: the words (payload's watch note) that mark these norms as the recorded run's while
 * a watch shows its own beside them; "" without a watch.
 */
export function structureSections(summary, runLabel = "") {
  if (!summary || summary.kind !== "module") return [];
  const norm = (x) => x.norm_text;
  const of = runLabel ? ` (${runLabel})` : "";
  const children = summary.children.length
    ? h(
        "div",
        { class: "hv-section hv-children" },
        h("h4", {}, `child modules (${summary.children.length})`),
        h(
          "table",
          { class: "hv-tensors" },
          h("tr", {}, h("th", {}, "module"), h("th", {}, "type"), h("th", {}, `‖grad‖${of}`)),
          summary.children.map((c) =>
            h("tr", {}, h("td", { class: "hv-slot" }, c.label), h("td", {}, c.type || ""), h("td", {}, norm(c))),
          ),
        ),
      )
    : null;
  const parameters = summary.parameters.length
    ? h(
        "div",
        { class: "hv-section hv-parameters" },
        h(
          "h4",
          {},
          // the root module holds the model's inputs too (x, y, z of the canonical example)
          `${summary.module === "" ? "leaves'" : "parameters'"} gradient norms (${summary.parameters.length})${of}`,
        ),
        h(
          "table",
          { class: "hv-tensors" },
          summary.parameters.map((p) =>
            h("tr", {}, h("td", { class: "hv-slot", title: p.id }, p.name), h("td", {}, norm(p))),
          ),
        ),
      )
    : null;
  return [children, parameters].filter(Boolean);
}

/**
 * What the watch on screen recorded for the selection, as the graph colours it (the payload's
 * `watch`: its norm at the step shown, "no grad", or "not watched" and why); null without a watch.
 */
export function watchNote(note) {
  if (!note?.text) return null;
  return h(
    "div",
    { class: `hv-watch-note hv-watch-${note.state.replace(/ /g, "-")}` },
    note.color ? h("i", { class: "hv-watch-swatch", style: `background:${note.color}` }) : null,
    note.text,
  );
}

/**
 * A module's title, the same before and after the kernel answers: the label its box shows on the
 * graph (`label`: "h.3.attn", "Canonical (root)") with its type, and below it the module's full
 * qualified name (`module`) where the label is shorter. w.select and the search take either.
 */
export function moduleTitle(label, module, type, badges = []) {
  const typed = type && !label.includes(type) ? ` · ${type}` : "";
  return h(
    "h3",
    { class: "hv-title" },
    `module ${label}${typed}`,
    ...badges,
    module && module !== label
      ? h(
          "span",
          { class: "hv-fullname", title: "the module's full name: w.select takes it, or the label" },
          `full name ${module}`,
        )
      : null,
  );
}

/**
 * An op's title, the same before and after the kernel answers: the label its node shows on the
 * graph (`label`: "Mul ×5") and below it the Node's full name (`op`: "MulBackward0") where they
 * differ, as a module's title names its full name.
 */
export function opTitle(label, op, badges = []) {
  return h(
    "h3",
    { class: "hv-title" },
    label || op,
    ...badges,
    label && op && label !== op
      ? h("span", { class: "hv-fullname", title: "the autograd Node's class name" }, `Node ${op}`)
      : null,
  );
}
