// The inspector: what one node (or module) saw during the run, before -> after, and its hooks.
import { add, h } from "./dom.js";
import { ROOT_MARK, shortName } from "./names.js";
import { moduleTitle, opTitle, structureSections, watchNote } from "./inspector_sections.js";
import { tensorList, tensorView } from "./tensor_view.js";

// Why a node has no forward value (a leaf, pending details, a step inside one torch call) is the
// payload's output_note, written by hookviz.widget.inspector.
function forwardValue(data) {
  if (data.output) return tensorView(data.output, data.heatmap_colors);
  return h("div", { class: "hv-muted hv-not-seen" }, data.output_note || "None");
}

/**
 * What a module's two kinds of backward hook see, side by side: the full hook's grad_input (one
 * per tensor input of forward, by name) and the legacy hook's (the grad_inputs of the module's
 * last op, each named by the op's argument and the Node that made it), with their grad_output.
 */
/** A snake_case name that wraps only after an underscore (register_full_ / backward_hook), never
 * inside a word: a line-break opportunity (<wbr>) after each "_"; its text is unchanged. */
export function wrapAtUnderscores(name) {
  return name.split(/(?<=_)/).flatMap((part, i, parts) => (i < parts.length - 1 ? [part, h("wbr")] : [part]));
}

function hookViews(data, before, changed, none = {}, colors = null) {
  const legacyAt = data.output_node ? `the module's last op, ${data.output_node}` : "the module's last op";
  const column = (cls, title, note, sections) =>
    h(
      "div",
      { class: `hv-hook-view ${cls}` },
      h("h4", {}, ...wrapAtUnderscores(title)),
      h("div", { class: "hv-muted hv-small" }, note),
      ...sections,
    );
  return h(
    "div",
    { class: "hv-hook-views" },
    column(
      "hv-hook-full",
      "register_full_backward_hook",
      `grad_input: one gradient per tensor input of forward (${(data.grad_input || []).length})`,
      [
        tensorList(
          "grad_input",
          data.grad_input,
          before.grad_input,
          changed.grad_input,
          data.grad_input_names,
          "grad_input",
          none.grad_input,
          colors,
        ),
        tensorList(
          "grad_output",
          data.grad_output,
          before.grad_output,
          changed.grad_output,
          null,
          "grad_output",
          none.grad_output,
          colors,
        ),
      ],
    ),
    column(
      "hv-hook-legacy",
      "register_backward_hook (legacy)",
      `grad_input: the ${(data.legacy_grad_input || []).length} grad_inputs of ${legacyAt}`,
      [
        tensorList(
          "grad_input",
          data.legacy_grad_input,
          null,
          null,
          data.legacy_grad_input_names,
          "grad_input",
          none.legacy_grad_input,
          colors,
        ),
        tensorList(
          "grad_output",
          data.legacy_grad_output,
          null,
          null,
          null,
          "grad_output",
          none.legacy_grad_output,
          colors,
        ),
      ],
    ),
  );
}

/**
 * Fill the inspector element. `summary` is what the graph already on the page says about the
 * selection (graph_summary.graphSummary: no kernel needed); `data` the kernel's full inspector (tensor
 * statistics and values, the `inspector` traitlet) when it has come for this selection, else null;
 * `note` says why it has not (asking the kernel, or a saved page without one).
 */
export function renderInspector(el, data, summary = null, note = "") {
  el.replaceChildren();
  if ((!data || !data.id) && !summary) {
    add(el, h("div", { class: "hv-muted hv-hint" }, "Click a node of the graph to inspect it."));
    return;
  }
  if (!data || !data.id) {
    const module = summary.kind === "module" ? summary.label : summary.module_name;
    const isModule = summary.kind === "module";
    const meta = isModule
      ? [
          ["id", summary.id],
          ["type", summary.type || "module"],
          ["‖grad‖ of its parameters", summary.norm_text],
          ["elements inside", summary.size],
        ]
      : [
          ["id", summary.id],
          ["module", module],
          ["kind", summary.kind],
          ["‖grad‖", summary.norm_text],
          ["inputs from", summary.inputs.join(", ") || "–"],
          ["outputs to", summary.outputs.join(", ") || "–"],
        ];
    add(
      el,
      isModule
        ? moduleTitle(module, summary.module, summary.type)
        : summary.kind === "op"
          ? opTitle(summary.label, summary.op)
          : h("h3", { class: "hv-title" }, summary.op || summary.id),
      h(
        "table",
        { class: "hv-meta" },
        meta.map(([k, v]) => h("tr", {}, h("th", {}, k), h("td", {}, String(v)))),
      ),
      ...structureSections(summary),
      note ? h("div", { class: "hv-muted hv-small hv-values-note" }, note) : null,
    );
    return;
  }
  // the root module's box is titled by its label ("Canonical (root)")
  const rootName = data.label || summary?.label || ROOT_MARK;
  // A container's type is its op.
  const type = data.kind === "module" ? data.type || data.op : null;
  const badges = [
    data.edited ? h("span", { class: "hv-badge hv-badge-edit" }, "edited") : null,
    data.asked_grad
      ? h("span", { class: "hv-badge", title: "the model does not ask for this gradient" }, "input_grads=True")
      : null,
  ];
  // A module is titled as its box is labelled on the graph (what the page drew, else its short name).
  const boxLabel = summary?.kind === "module" ? summary.label : data.module === "" ? rootName : shortName(data.module);
  const meta = [
    ["id", data.id],
    // the module that holds the op (the graph's name for it), never the op's own label
    ["module", data.kind === "module" ? null : summary?.module_name || data.module || ROOT_MARK],
    ["kind", data.node_kind],
    ["type", type],
    ["backward order", data.kind === "module" ? null : (data.order ?? "did not run")],
  ].filter(([, v]) => v !== undefined && v !== null);
  add(
    el,
    data.kind === "module"
      ? moduleTitle(boxLabel, data.module, type, badges)
      : data.node_kind === "op" && summary?.kind === "op"
        ? opTitle(summary.label, data.op, badges)
        : h("h3", { class: "hv-title" }, `${data.op}`, ...badges),
    watchNote(data.watch),
    h(
      "table",
      { class: "hv-meta" },
      meta.map(([k, v]) => h("tr", {}, h("th", {}, k), h("td", {}, String(v)))),
    ),
    data.explanation ? h("div", { class: "hv-explanation" }, data.explanation) : null,
    ...structureSections(summary, data.watch?.run_label || ""),
  );
  const before = data.before || {};
  const changed = data.changed || {};
  const none = data.none_text || {};
  const colors = data.heatmap_colors;
  if (data.kind === "module") {
    if (data.inputs) {
      add(
        el,
        h(
          "div",
          { class: "hv-section" },
          h("h4", {}, "forward inputs"),
          h(
            "table",
            { class: "hv-tensors" },
            Object.entries(data.inputs).map(([k, v]) =>
              h(
                "tr",
                {},
                h("td", { class: "hv-slot" }, k),
                h("td", {}, typeof v === "string" ? v : tensorView(v, colors)),
              ),
            ),
          ),
        ),
      );
    }
    add(el, tensorList("forward output", data.output_list, null, null, null, "", null, colors));
    add(el, hookViews(data, before, changed, none, colors));
  } else {
    // a leaf's value is what forward used (an input, a weight); an op's, what it computed
    const heading = data.node_kind === "leaf" ? "value (as forward used it)" : "forward value";
    add(el, h("div", { class: "hv-section" }, h("h4", {}, heading), forwardValue(data)));
    add(
      el,
      tensorList(
        "grad_outputs (pre-hook sees)",
        data.grad_outputs,
        before.grad_outputs,
        changed.grad_outputs,
        null,
        "",
        none.grad_outputs,
        colors,
      ),
    );
    add(
      el,
      tensorList(
        "grad_inputs (post-hook sees)",
        data.grad_inputs,
        before.grad_inputs,
        changed.grad_inputs,
        data.grad_input_names,
        "",
        none.grad_inputs,
        colors,
      ),
    );
    if (data.grad_inputs_before_edit)
      add(
        el,
        tensorList(
          "grad_inputs before this run's edit",
          data.grad_inputs_before_edit,
          null,
          null,
          null,
          "",
          null,
          colors,
        ),
      );
    if (data.saved && data.saved.length) {
      add(
        el,
        h(
          "div",
          { class: "hv-section" },
          h("h4", {}, "saved tensors"),
          h(
            "table",
            { class: "hv-tensors" },
            data.saved.map((s) =>
              h(
                "tr",
                {},
                h("td", { class: "hv-slot" }, s.name),
                h(
                  "td",
                  {},
                  `${s.dtype}[${(s.shape || []).join(", ")}] · ${s.size ?? `${s.nbytes} B`}${s.of ? ` · from ${s.of}` : ""}`,
                ),
              ),
            ),
          ),
        ),
      );
    }
  }
  if (data.hooks && data.hooks.length) {
    add(
      el,
      h(
        "div",
        { class: "hv-section" },
        h("h4", {}, "hooks here"),
        h(
          "ul",
          { class: "hv-hooks" },
          data.hooks.map((k) =>
            h(
              "li",
              { class: `hv-hook-${k.owner}` },
              h("span", { class: "hv-tag" }, k.owner),
              ` ${k.kind}: ${k.name}`,
              k.where ? h("span", { class: "hv-muted" }, ` @ ${k.where}`) : null,
            ),
          ),
        ),
      ),
    );
  }
}
