// Side and bottom panels: edit panel, active edits + copy as code, leaf summary, hook log, replay bar.
import { add, errorLine, fill, h } from "./dom.js";
import { FINDING_LABELS, findingsSummary, parseNumber } from "./logic.js";

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

// Rows per page of the leaf table: a large model's thousands of parameters are paged, every one
// reachable.
export const LEAF_PAGE_ROWS = 50;

// The leaf table's sortable columns: header, value of a row for sorting and for the cell.
const LEAF_COLUMNS = [
  { key: "name", title: "leaf", value: (l) => l.name },
  { key: "norm", title: "‖grad‖", value: (l) => parseNumber(l.after?.norm) },
  { key: "min", title: "min", value: (l) => parseNumber(l.after?.min) },
  { key: "max", title: "max", value: (l) => parseNumber(l.after?.max) },
  { key: "ratio", title: "× baseline", value: (l) => leafRatio(l) },
];

// Orders of the rows: the columns', and "most changed" (|log10 of × baseline|, largest first).
const LEAF_SORTS = { ...Object.fromEntries(LEAF_COLUMNS.map((c) => [c.key, c.value])), change: (l) => leafChange(l) };

/**
 * ‖grad‖ in this run over ‖grad‖ in the baseline, as Python sent it (null when either is missing
 * or zero: hookviz.widget.leaf_table).
 */
export function leafRatio(leaf) {
  return parseNumber(leaf.ratio);
}

/**
 * How much a leaf's gradient norm changed against the baseline, both ways alike: |log10(now /
 * then)| (x 1000 and x 0.001 both give 3); Infinity when one of them is 0 and the other not, 0
 * when both are; null when either is missing or not finite.
 */
export function leafChange(leaf) {
  const now = parseNumber(leaf.after?.norm);
  const then = parseNumber(leaf.before?.norm);
  if (now === null || then === null || !Number.isFinite(now) || !Number.isFinite(then)) return null;
  if (now === then) return 0;
  if (now === 0 || then === 0) return Infinity;
  return Math.abs(Math.log10(now / then));
}

/** The rows in the order `sort` ({key, descending}) gives; rows without a value go last. Without a
 * sort: changed leaves first, in the run's order. */
export function sortLeaves(leaves, sort) {
  const rows = [...leaves.filter((l) => l.changed), ...leaves.filter((l) => !l.changed)];
  const value = LEAF_SORTS[sort?.key];
  if (!value) return rows;
  const sign = sort.descending ? -1 : 1;
  const missing = (v) => v === null || v === undefined || Number.isNaN(v);
  return rows.sort((a, b) => {
    const x = value(a);
    const y = value(b);
    if (missing(x) || missing(y)) return missing(x) - missing(y);
    return x < y ? -sign : x > y ? sign : 0;
  });
}

/** Every leaf's grad, baseline -> current run, in sortable columns (click a header) or most
 * changed first, a page at a time. The order and page the user chose stay on `el` for every later
 * run. `pending`: a large run's table comes after its graph is drawn (hookviz.Widget.fill_details). */
export function renderLeaves(el, leaves, pending = false) {
  const sort = el.hvSort || { key: null, descending: true };
  el.replaceChildren();
  add(el, h("h4", {}, "Leaf gradients (this run, against the baseline)"));
  if (!leaves || !leaves.length) {
    add(el, h("div", { class: "hv-muted" }, pending ? "Summarising the leaves after the graph…" : "No leaves."));
    return;
  }
  const rows = sortLeaves(leaves, sort);
  const pages = Math.ceil(rows.length / LEAF_PAGE_ROWS);
  const page = Math.min(Math.max(0, el.hvPage || 0), pages - 1);
  const shown = rows.slice(page * LEAF_PAGE_ROWS, (page + 1) * LEAF_PAGE_ROWS);
  const redraw = (changes) => {
    Object.assign(el, changes);
    renderLeaves(el, leaves, pending);
  };
  const header = LEAF_COLUMNS.map((c) =>
    h(
      "th",
      {
        class: "hv-sortable",
        "data-sort": c.key,
        title: "sort",
        onclick: () =>
          redraw({ hvSort: { key: c.key, descending: sort.key === c.key ? !sort.descending : true }, hvPage: 0 }),
      },
      c.title + (sort.key === c.key ? (sort.descending ? " ▼" : " ▲") : ""),
    ),
  );
  const mostChanged = sort.key === "change";
  add(
    el,
    h(
      "div",
      { class: "hv-row hv-leaf-controls" },
      h(
        "button",
        {
          class: `hv-most-changed${mostChanged ? " hv-on" : ""}`,
          "aria-pressed": String(mostChanged),
          title: "largest change against the baseline first, increase or decrease: |log10(× baseline)|",
          onclick: () => redraw({ hvSort: mostChanged ? null : { key: "change", descending: true }, hvPage: 0 }),
        },
        "Most changed first",
      ),
      h(
        "button",
        { class: "hv-page-prev", disabled: page === 0, onclick: () => redraw({ hvPage: page - 1 }) },
        "◀ Previous",
      ),
      h(
        "span",
        { class: "hv-page" },
        `leaves ${page * LEAF_PAGE_ROWS + 1}–${page * LEAF_PAGE_ROWS + shown.length} of ${rows.length}`,
      ),
      h(
        "button",
        { class: "hv-page-next", disabled: page >= pages - 1, onclick: () => redraw({ hvPage: page + 1 }) },
        "Next ▶",
      ),
    ),
    h(
      "table",
      { class: "hv-leaves-table" },
      h("tr", {}, header, h("th", {}, "value in this run")),
      shown.map((l) =>
        h(
          "tr",
          { class: l.changed ? "hv-changed" : "", "data-leaf": l.name },
          h("td", { class: "hv-slot", title: l.name }, l.name),
          // Each column in one number format: Python wrote the cells (hookviz.widget.leaf_table).
          h("td", { class: "hv-num", "data-column": "norm" }, l.text?.norm ?? "–"),
          h("td", { class: "hv-num", "data-column": "min" }, l.text?.min ?? "–"),
          h("td", { class: "hv-num", "data-column": "max" }, l.text?.max ?? "–"),
          h("td", { class: "hv-num", "data-column": "ratio" }, l.text?.ratio ?? "–"),
          h("td", { class: "hv-leaf-after" }, leafCell(l.before, l.after, l.changed)),
        ),
      ),
    ),
  );
}

// The value once (this run's); a changed leaf's baseline value is its tooltip, the × baseline
// column says by how much it changed.
function leafCell(before, after, changed) {
  if (!after) return h("span", { class: "hv-muted" }, "None");
  const small = (t) => t?.text?.value !== undefined;
  if (!small(after)) return h("span", { class: "hv-shape" }, `[${(after.shape || []).join("×")}]`);
  const title = changed && small(before) ? `baseline: ${before.text.value}` : undefined;
  return h("code", { class: "hv-value", title }, after.text.value);
}

/**
 * What the user's hooks printed, kept only in runs loaded from files of hookviz versions that
 * copied it (hookviz.Run.log): hooks print where they print, in the cell's output, so a new run
 * has nothing here and the panel is hidden.
 */
export function renderLog(el, log) {
  el.replaceChildren();
  el.hidden = !log || !log.length;
  if (el.hidden) return;
  add(
    el,
    h("h4", {}, `Printed by hooks when this run was recorded (${log.length})`),
    h(
      "pre",
      { class: "hv-log-text" },
      log.map((e) => `[${e.hook}${e.where ? " @ " + e.where : ""}] ${e.text}`).join("\n"),
    ),
  );
}

/**
 * Replay bar: an explicit on/off switch, play/pause and a slider over the recorded backward
 * execution order. Off (the default), the graph shows the whole run and nothing is faded; on, the
 * bar is marked and says that the nodes not run yet are faded. onStep(k) gets the step shown, -1
 * when replay is off.
 */
export class ReplayBar {
  constructor(el, { onStep }) {
    this.el = el;
    this.onStep = onStep;
    this.steps = [];
    this.k = -1;
    this.timer = null;
    this.switch = h(
      "button",
      { class: "hv-replay-toggle", "aria-pressed": "false", onclick: () => this.setOn(!this.on) },
      "Replay: off",
    );
    this.play = h("button", { class: "hv-play", onclick: () => this.toggle() }, "▶ Play");
    this.slider = h("input", {
      class: "hv-slider",
      type: "range",
      min: "0",
      max: "0",
      value: "0",
      "aria-label": "backward step",
    });
    this.slider.addEventListener("input", () => {
      this.pause();
      this.set(Number(this.slider.value));
    });
    this.label = h("span", { class: "hv-step" }, "");
    this.state = h("div", { class: "hv-replay-state" });
    this.hooks = h("div", { class: "hv-step-hooks" });
    fill(el, h("div", { class: "hv-row" }, this.switch, this.play, this.slider, this.label), this.state, this.hooks);
    this.set(-1, false);
  }

  /** Whether replay is on (a step is shown and the rest of the graph faded). */
  get on() {
    return this.k >= 0;
  }

  setSteps(steps) {
    this.steps = steps || [];
    this.slider.max = String(Math.max(0, this.steps.length - 1));
    if (this.k >= this.steps.length) this.k = -1;
    this.set(this.k, false);
  }

  /** Turn replay on (at its first step, or where it was) or off (the whole run, nothing faded). */
  setOn(on) {
    if (!on) this.pause();
    this.set(on && this.steps.length ? Math.max(0, this.k) : -1);
  }

  set(k, notify = true) {
    this.k = this.steps.length ? k : -1;
    const on = this.k >= 0;
    const s = on ? this.steps[this.k] : null;
    this.el.classList.toggle("hv-replay-on", on);
    this.switch.textContent = on ? "Replay: on" : "Replay: off";
    this.switch.setAttribute("aria-pressed", String(on));
    this.switch.classList.toggle("hv-on", on);
    this.switch.title = on ? "turn replay off: show the whole run" : "step through backward, node by node";
    this.switch.disabled = !this.steps.length;
    this.play.disabled = !this.steps.length;
    // Moving the slider is a way to turn replay on too (the switch then says "on").
    this.slider.disabled = !this.steps.length;
    this.slider.value = String(Math.max(0, this.k));
    this.label.textContent = s
      ? `step ${this.k + 1}/${this.steps.length}: ${s.op} (${s.node})`
      : `${this.steps.length} backward steps recorded`;
    this.state.textContent = on ? "Replay on: the graph fades the nodes backward has not reached yet." : "";
    this.state.hidden = !on;
    fill(
      this.hooks,
      s && s.hooks && s.hooks.length
        ? s.hooks.map((x) =>
            h(
              "div",
              { class: `hv-fired hv-fired-${x.kind}` },
              `${x.kind === "edit" ? "edit" : "hook"} fired: ${x.detail}`,
            ),
          )
        : s
          ? h("span", { class: "hv-muted" }, "only hookviz's recording hook fired here")
          : null,
    );
    if (notify) this.onStep(this.k);
  }

  toggle() {
    if (this.timer) this.pause();
    else this.start();
  }

  /** Play from the step shown (from the first when replay was off or at the end); stops at the last. */
  start() {
    if (!this.steps.length) return;
    if (this.k < 0 || this.k >= this.steps.length - 1) this.set(0);
    this.play.textContent = "⏸ Pause";
    this.timer = setInterval(() => {
      if (this.k + 1 >= this.steps.length) {
        this.pause();
        return;
      }
      this.set(this.k + 1);
    }, 700);
  }

  pause() {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    this.play.textContent = "▶ Play";
  }

  destroy() {
    this.pause();
  }
}

/** Findings grouped by kind, kinds in the order the counts give (most severe first). */
export function groupFindings(findings, counts) {
  const order = Object.keys(counts || {});
  const groups = new Map(order.map((k) => [k, []]));
  for (const f of findings || []) {
    if (!groups.has(f.kind)) groups.set(f.kind, []);
    groups.get(f.kind).push(f);
  }
  return [...groups.entries()].filter(([, list]) => list.length);
}

function findingLine(f, onSelect) {
  return h(
    "li",
    {
      class: `hv-finding hv-finding-${f.kind}${f.node ? " hv-clickable" : ""}`,
      "data-node": f.node || undefined,
      title: f.node ? `select ${f.node}` : undefined,
      onclick: f.node ? () => onSelect(f.node) : undefined,
    },
    h("span", { class: "hv-finding-kind" }, FINDING_LABELS[f.kind] ?? f.kind),
    f.from_edit
      ? h(
          "span",
          { class: "hv-badge hv-badge-pending", title: "the baseline run does not have it" },
          "caused by your edits",
        )
      : null,
    " ",
    f.message,
  );
}

/**
 * Diagnosis banner above the graph: one line per kind of finding, most severe first (its first
 * finding, and the modules of the others behind a toggle); clicking a finding selects its node.
 * Nothing is drawn for an empty diagnosis; a failed one shows its error.
 * diagnosis: {source, step, findings: [{kind, module, node, message, from_edit}], counts, error}.
 */
export function renderBanner(el, diagnosis, onSelect) {
  const d = diagnosis || {};
  const findings = d.findings || [];
  el.replaceChildren();
  // A large run is drawn first; its diagnosis comes with its details (hookviz.Widget.fill_details).
  // Meanwhile the toolbar says so (index.js): a banner here would push the graph down, then let it
  // jump back up when the run has nothing to report.
  // A watch's onsets (when each trouble started, and where) hold over every step: kept at any step.
  const onsets = d.onset || [];
  el.hidden = d.pending || (!findings.length && !d.error && !onsets.length);
  if (el.hidden) return;
  // A gathered history's findings are a rank's (or the reduced ones): named as the picker names them.
  const where = d.source === "watch" ? `Watch step ${d.step}${d.of ? ` (${d.of})` : ""}` : "This run";
  const started = onsets.length
    ? h(
        "div",
        { class: "hv-onsets" },
        h("div", { class: "hv-banner-head" }, `⚠ When it started, and where${d.of ? ` (${d.of})` : ""}:`),
        h(
          "ul",
          { class: "hv-findings" },
          onsets.map((f) => findingLine(f, onSelect)),
        ),
      )
    : null;
  const lines = groupFindings(findings, d.counts).map(([kind, list]) => {
    const [first, ...rest] = list;
    if (!rest.length) return findingLine(first, onSelect);
    const modules = rest.map((f) => f.module || f.node).filter(Boolean);
    const more = h(
      "ul",
      { class: "hv-findings hv-findings-more", hidden: true },
      rest.map((f) => findingLine(f, onSelect)),
    );
    const toggle = h(
      "button",
      {
        class: "hv-finding-toggle",
        onclick: () => {
          more.hidden = !more.hidden;
          toggle.textContent = more.hidden ? `+ ${rest.length} more` : "less";
        },
        title: `also: ${modules.join(", ")}`,
      },
      `+ ${rest.length} more`,
    );
    const span = modules.length > 1 ? ` (${modules[modules.length - 1]} … ${modules[0]})` : ` (${modules[0] ?? ""})`;
    return h(
      "li",
      { class: `hv-finding-group hv-finding-group-${kind}` },
      h("ul", { class: "hv-findings" }, findingLine(first, onSelect)),
      h("span", { class: "hv-muted" }, `${list.length} ${FINDING_LABELS[kind] ?? kind} in all${span} `),
      toggle,
      more,
    );
  });
  add(
    el,
    started,
    findings.length ? h("div", { class: "hv-banner-head" }, `⚠ ${where}: ${findingsSummary(d.counts)}`) : null,
    findings.length ? h("ul", { class: "hv-findings" }, lines) : null,
    d.error ? errorLine(d.error) : null,
  );
}

/** Watch bar: a slider over the watch's kept training steps, and a button back to the run. */
export class WatchBar {
  constructor(el, { onStep, onClose, onRank }) {
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
