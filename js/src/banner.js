// The diagnosis banner above the graph: the findings by kind, a click selects a finding's node.
import { add, errorLine, h } from "./dom.js";
import { FINDING_LABELS, findingsSummary, groupFindings } from "./findings.js";

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
  // Meanwhile the toolbar says so (toolbar.js): a banner here would push the graph down, then let it
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
