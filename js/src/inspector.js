// The inspector: what one node (or module) saw during the run, before -> after, and its hooks.
import { add, h } from "./dom.js";
import { parseNumber, shortName } from "./logic.js";

const SVG = "http://www.w3.org/2000/svg";

/**
 * A small bar chart of a histogram ({counts, edges}) of a tensor of `numel` elements; `range`: the
 * text of its first and last edge (the tensor's text.histogram).
 */
export function histogram(hist, numel, range = "") {
  if (!hist || !hist.counts || !hist.counts.length) return null;
  const counts = hist.counts;
  const w = 160;
  const ht = 36;
  const max = Math.max(1, ...counts);
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("width", w);
  svg.setAttribute("height", ht);
  svg.setAttribute("class", "hv-hist");
  const bw = w / counts.length;
  counts.forEach((c, i) => {
    const r = document.createElementNS(SVG, "rect");
    const bh = (c / max) * (ht - 2);
    r.setAttribute("x", i * bw);
    r.setAttribute("y", ht - bh);
    r.setAttribute("width", Math.max(1, bw - 1));
    r.setAttribute("height", bh);
    svg.append(r);
  });
  const counted = counts.reduce((a, b) => a + b, 0);
  const sampled = numel > counted ? ` · a fixed sample of ${counted} of ${numel} elements` : "";
  return h("div", { class: "hv-histwrap" }, svg, h("div", { class: "hv-muted" }, `${range}${sampled}`));
}

/** "#rrggbb" -> [r, g, b]. */
const rgb = (hex) => [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16));

/**
 * A small heatmap of a 2-D value (rows x columns), one cell per element, shading from `colors.zero`
 * at 0 to `colors.negative` / `colors.positive` at the largest |value| (NaN/Inf: `colors.nan`);
 * `caption` replaces the default one (an overview's says what its cells are); `top`: the text of
 * the largest |value| (the tensor's text.abs_max or text.overview_max).
 */
export function heatmap(value, caption = null, top = "", colors = null) {
  // The colours come with the payload (hookviz.colors.HEATMAP_COLORS: no red but for NaN/Inf).
  if (!colors || !Array.isArray(value) || !Array.isArray(value[0])) return null;
  const rows = value.length;
  const cols = value[0].length;
  const cell = Math.max(1, Math.min(8, Math.floor(200 / Math.max(rows, cols))));
  const canvas = h("canvas", { class: "hv-heat", width: cols * cell, height: rows * cell });
  const ctx = canvas.getContext?.("2d");
  if (!ctx) return null;
  const [zero, negative, positive] = [colors.zero, colors.negative, colors.positive].map(rgb);
  let largest = 0;
  for (const row of value) for (const v of row) largest = Math.max(largest, Math.abs(parseNumber(v) || 0));
  value.forEach((row, i) =>
    row.forEach((v, j) => {
      const n = parseNumber(v);
      const t = largest > 0 && Number.isFinite(n) ? n / largest : 0;
      const end = t >= 0 ? positive : negative;
      ctx.fillStyle = Number.isFinite(n)
        ? `rgb(${zero.map((z, k) => Math.round(z + (end[k] - z) * Math.abs(t))).join(",")})`
        : colors.nan;
      ctx.fillRect(j * cell, i * cell, cell, cell);
    }),
  );
  return h(
    "div",
    { class: "hv-heatwrap" },
    canvas,
    h(
      "div",
      { class: "hv-muted hv-small" },
      caption ? `${caption}, max ${top}` : `${rows}×${cols}: blue < 0 < brown, |max| ${top}`,
    ),
  );
}

/** The raw values behind a toggle, every digit as recorded, written out only when opened. */
function rawValues(value) {
  const text = h("code", { class: "hv-value" });
  const details = h("details", { class: "hv-raw" }, h("summary", {}, "raw values"), text);
  details.addEventListener("toggle", () => {
    if (details.open && !text.textContent) text.textContent = JSON.stringify(value).replaceAll(",", ", ");
  });
  return details;
}

/**
 * One tensor summary: header line, then the value when Python sent its text (a tensor of at most
 * hookviz.widget.payload.SHOWN_ELEMENTS elements); else statistics, a histogram, a heatmap for 2-D values, and the raw values behind a toggle; a
 * tensor too large to keep has no values, and a 2-D one a heatmap of its block overview.
 */
export function tensorView(t, colors = null, none = "None") {
  // `none`: why there is no tensor (the payload's none_text: "None: x does not require grad").
  if (!t) return h("span", { class: "hv-muted hv-none" }, none || "None");
  const head = `${t.dtype}[${(t.shape || []).join(", ")}] ${t.device || ""}`;
  const bad = (t.nan_count || 0) + (t.inf_count || 0) > 0;
  const parts = [h("span", { class: "hv-shape" }, head)];
  const hasValue = t.value !== null && t.value !== undefined;
  const text = t.text || {};
  if (text.value !== undefined) {
    parts.push(h("code", { class: bad ? "hv-value hv-bad" : "hv-value" }, text.value));
  } else {
    parts.push(
      h(
        "div",
        { class: bad ? "hv-stats hv-bad" : "hv-stats" },
        `norm ${text.norm} · mean ${text.mean} · min ${text.min} · max ${text.max}` +
          ` · zeros ${text.zeros}` +
          (bad ? ` · NaN ${t.nan_count} · Inf ${t.inf_count}` : ""),
      ),
    );
    parts.push(histogram(t.histogram, t.numel, text.histogram));
    if (hasValue) {
      parts.push(heatmap(t.value, null, text.abs_max, colors));
      parts.push(rawValues(t.value));
    } else {
      if (t.overview && t.shape?.length === 2) {
        const [rows, cols] = t.shape;
        const blocks = `${t.overview.length}×${t.overview[0]?.length ?? 0}`;
        parts.push(
          heatmap(
            t.overview,
            `${rows}×${cols} in ${blocks} blocks: root mean square of each`,
            text.overview_max,
            colors,
          ),
        );
      }
      parts.push(
        h(
          "div",
          { class: "hv-muted hv-small hv-not-kept" },
          // a record's own note says why it has no values (e.g. changed in place after it was recorded)
          t.note || "values not kept: more elements than the session's full_tensor_limit",
        ),
      );
    }
  }
  return h("div", { class: "hv-tensor" }, parts);
}

/** Slot label: "[1]", or "[1] mat1" when the op's schema names the argument; `slot` before it
 * ("grad_input[0] x") where a module's two hook views sit side by side. */
function slotLabel(i, names, slot = "") {
  return names && names[i] ? `${slot}[${i}] ${names[i]}` : `${slot}[${i}]`;
}

/**
 * A list of tensors, before -> after where `changed` says so; `names`: the slots' names, `slot`
 * the view's name before each, `none`: why each None is None (the payload's none_text), `colors`:
 * the heatmaps' (heatmap_colors).
 */
function tensorList(title, after, before, changed, names = null, slot = "", none = null, colors = null) {
  if (!after) return null;
  const view = (t, i) => tensorView(t, colors, none?.[i]);
  const rows = after.map((t, i) => {
    const b = before ? before[i] : undefined;
    const showBefore = b !== undefined && changed && changed[i];
    return h(
      "tr",
      {},
      h("td", { class: "hv-slot" }, slotLabel(i, names, slot)),
      h(
        "td",
        {},
        showBefore ? h("div", { class: "hv-before" }, h("span", { class: "hv-tag" }, "before"), view(b, i)) : null,
        h(
          "div",
          { class: showBefore ? "hv-after" : "" },
          showBefore ? h("span", { class: "hv-tag" }, "after") : null,
          view(t, i),
        ),
      ),
    );
  });
  return h(
    "div",
    { class: "hv-section" },
    h("h4", {}, title),
    h("table", { class: "hv-tensors" }, rows.length ? rows : h("tr", {}, h("td", {}, "(none)"))),
  );
}

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
function hookViews(data, before, changed, none = {}, colors = null) {
  const legacyAt = data.output_node ? `the module's last op, ${data.output_node}` : "the module's last op";
  const column = (cls, title, note, sections) =>
    h(
      "div",
      { class: `hv-hook-view ${cls}` },
      h("h4", {}, title),
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
 * A module's child modules and the gradient norms of the parameters inside it (graphSummary).
 * `runLabel`: the words (payload's watch note) that mark these norms as the recorded run's while
 * a watch shows its own beside them; "" without a watch.
 */
function structureSections(summary, runLabel = "") {
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
function watchNote(note) {
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
function moduleTitle(label, module, type, badges = []) {
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
function opTitle(label, op, badges = []) {
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

/**
 * Fill the inspector element. `summary` is what the graph already on the page says about the
 * selection (logic.graphSummary: no kernel needed); `data` the kernel's full inspector (tensor
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
    const module = summary.label || (summary.module === "" ? "(root)" : summary.module);
    const isModule = summary.kind === "module";
    const meta = isModule
      ? [
          ["id", summary.id],
          ["type", summary.type || "module"],
          ["‖grad‖ at its boundary", summary.norm_text],
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
  const moduleName = data.label || (data.module === "" ? "(root)" : data.module);
  // A container's type is its op.
  const type = data.kind === "module" ? data.type || data.op : null;
  const badges = [
    data.edited ? h("span", { class: "hv-badge hv-badge-edit" }, "edited") : null,
    data.asked_grad
      ? h("span", { class: "hv-badge", title: "the model does not ask for this gradient" }, "input_grads=True")
      : null,
  ];
  // A module is titled as its box is labelled on the graph (what the page drew, else its short name).
  const boxLabel =
    summary?.kind === "module" ? summary.label : data.module === "" ? moduleName : shortName(data.module);
  const meta = [
    ["id", data.id],
    ["module", data.kind === "module" ? null : data.module !== "" ? moduleName : summary?.label || "(root)"],
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
    add(el, h("div", { class: "hv-section" }, h("h4", {}, "forward value"), forwardValue(data)));
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
