// The findings of a diagnosis as the banner names and orders them. No DOM.

/** How the banner names each kind of finding (hookviz.Finding.kind). */
export const FINDING_LABELS = {
  nan: "NaN/Inf origin",
  exploding: "exploding",
  vanishing: "vanishing",
  dead: "dead",
  saturated: "saturated",
  update_too_large: "update too large",
  update_too_small: "update too small",
};

/** The banner's headline from the counts per kind: "2 vanishing, 1 NaN/Inf origin". */
export function findingsSummary(counts) {
  return Object.entries(counts || {})
    .filter(([, n]) => n > 0)
    .map(([kind, n]) => `${n} ${FINDING_LABELS[kind] ?? kind}`)
    .join(", ");
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
