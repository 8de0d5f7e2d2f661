// The edit panel (a hook site of the selection, an expression, Apply) and the list of active
// edits (remove, reset, copy as code).
import { add, errorLine, h } from "./dom.js";

/**
 * A hook site with what its gradient belongs to: "grad_inputs[1] (mat1)" (a Node's argument, from
 * PyTorch's schema), "grad_input[0] (x)" (a module's forward input, by name).
 */
export function siteLabel(site, names) {
  const m = /^grad_inputs?\[(\d+)\]$/.exec(site);
  return m && names && names[Number(m[1])] ? `${site} (${names[Number(m[1])]})` : site;
}

/** What an edit's target is called on the page: its id or module, the root module by its box's name. */
export function targetLabel(edit) {
  return edit.label || edit.target || "(root)";
}

/**
 * The line under Apply when the chosen site already holds an edit (one edit per site: applying
 * replaces it, hookviz.Session.edit): "Apply replaces the edit grad + 1 at x · grad"; "" else.
 */
export function replaceNote(edits, target, site) {
  const old = (edits || []).find((e) => e.target === target && e.slot === site);
  return old ? `Apply replaces the edit ${old.source} at ${targetLabel(old)} · ${old.slot}` : "";
}

/**
 * Edit panel: pick a site of the selected node, type an expression, apply. `typed` ({target,
 * site, expression}) keeps what the user typed across redraws, so a refused expression stays in
 * the box to be fixed.
 */
export function renderEditor(el, inspector, error, typed, send, disabledNote = "", edits = []) {
  el.replaceChildren();
  if (!inspector || !inspector.id) return;
  const target = inspector.target ?? inspector.id;
  if (typed.target !== target) Object.assign(typed, { target, site: null, expression: "grad" });
  const sites = inspector.sites || [];
  if (!sites.length) {
    add(el, h("div", { class: "hv-muted" }, "No editable hook site here."));
    add(el, errorLine(error));
    return;
  }
  const site = h(
    "select",
    { class: "hv-site", "aria-label": "hook site" },
    sites.map((s) => h("option", { value: s }, siteLabel(s, inspector.grad_input_names))),
  );
  if (typed.site && sites.includes(typed.site)) site.value = typed.site;
  const expr = h("input", {
    class: "hv-expr",
    type: "text",
    value: typed.expression,
    "aria-label": "expression",
    spellcheck: "false",
  });
  const replacing = h("div", { class: "hv-muted hv-small hv-replaces" });
  const showReplacing = () => {
    replacing.textContent = replaceNote(edits, target, site.value);
    replacing.hidden = !replacing.textContent;
  };
  showReplacing();
  site.addEventListener("change", () => {
    typed.site = site.value;
    showReplacing();
  });
  expr.addEventListener("input", () => (typed.expression = expr.value));
  const apply = () => send({ type: "apply_edit", target, slot: site.value, expression: expr.value });
  expr.addEventListener("keydown", (e) => {
    // Keep JupyterLab's notebook shortcuts out of the text box.
    e.stopPropagation();
    if (e.key === "Enter") {
      e.preventDefault();
      apply();
    }
  });
  expr.addEventListener("keyup", (e) => e.stopPropagation());
  add(
    el,
    h("h4", {}, `Edit the gradient a hook returns at ${inspector.label || target || "(root)"}`),
    h(
      "div",
      { class: "hv-row" },
      site,
      expr,
      h(
        "button",
        { class: "hv-apply", onclick: apply, disabled: !!disabledNote, title: disabledNote || undefined },
        "Apply",
      ),
    ),
    disabledNote ? h("div", { class: "hv-muted hv-small" }, disabledNote) : null,
    replacing,
    h("div", { class: "hv-muted hv-small" }, "Expression over grad, e.g. grad * 0, grad + 1, clamp(grad, -1, 1)"),
    errorLine(error),
  );
}

/** Active edits with remove, reset and copy as code; `state` is the edit_state traitlet. */
// disabledNote: why removing and resetting edits is off (a saved page has no kernel; a recorded
// run's edits are part of what ran), shown as the buttons' tooltip.
export function renderEdits(el, edits, code, error, send, state = {}, disabledNote = "") {
  el.replaceChildren();
  const codeBox = h("pre", { class: "hv-code", hidden: true }, code || "");
  const copy = () => {
    codeBox.hidden = !codeBox.hidden;
    try {
      navigator.clipboard?.writeText(code || "").catch(() => {});
    } catch {
      // the code box is shown either way
    }
  };
  add(
    el,
    h("h4", {}, `Active edits (${edits.length})`),
    edits.length
      ? h(
          "ul",
          { class: "hv-edits-list" },
          edits.map((e) =>
            h(
              "li",
              { "data-edit-id": e.id },
              h("code", {}, `${targetLabel(e)} · ${e.slot} ← ${e.source}`),
              e.pending
                ? h("span", { class: "hv-badge hv-badge-pending", title: "applied at the next re-run" }, "pending")
                : null,
              " ",
              h(
                "button",
                {
                  class: "hv-remove",
                  title: disabledNote || "remove this edit",
                  disabled: !!disabledNote,
                  onclick: () => send({ type: "remove_edit", id: e.id }),
                },
                "✕",
              ),
            ),
          ),
        )
      : h(
          "div",
          { class: "hv-muted" },
          state.stale
            ? "No edits now, but the run shown is an edited run: press Re-run."
            : "No edits: gradients are what PyTorch computes.",
        ),
    state.stale && edits.length
      ? h("div", { class: "hv-stale-line" }, "The run shown was made with other edits: press Re-run.")
      : null,
    h(
      "div",
      { class: "hv-row" },
      h(
        "button",
        {
          class: "hv-reset",
          onclick: () => send({ type: "reset_edits" }),
          disabled: !edits.length || !!disabledNote,
          title: disabledNote || undefined,
        },
        "Reset edits",
      ),
      h("button", { class: "hv-copy", onclick: copy }, "Copy as code"),
    ),
    codeBox,
    errorLine(error),
  );
}
