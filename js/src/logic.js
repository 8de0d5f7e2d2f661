// Pure logic of the widget: colour scale, grouping/collapse, replay state, number formatting.
// No DOM and no cytoscape here, so vitest can import it directly.

export const NAN_COLOR = "#e53935";
export const NO_GRAD_COLOR = "#bdbdbd";
export const ZERO_GRAD_COLOR = "#263238";
export const EDIT_COLOR = "#ff6d00";
export const HOOK_COLOR = "#d500f9";

// Viridis, sampled at 9 stops; no red in it, so red can mean NaN/Inf.
const VIRIDIS = [
  [68, 1, 84],
  [72, 40, 120],
  [62, 74, 137],
  [49, 104, 142],
  [38, 130, 142],
  [31, 158, 137],
  [53, 183, 121],
  [109, 205, 89],
  [180, 222, 44],
  [253, 231, 37],
];

function toHex([r, g, b]) {
  const h = (v) => Math.round(v).toString(16).padStart(2, "0");
  return `#${h(r)}${h(g)}${h(b)}`;
}

/** Colour of a fraction t in [0, 1] on the viridis scale (clamped). */
export function viridis(t) {
  if (!Number.isFinite(t)) t = 0;
  t = Math.min(1, Math.max(0, t));
  const x = t * (VIRIDIS.length - 1);
  const i = Math.min(VIRIDIS.length - 2, Math.floor(x));
  const f = x - i;
  const a = VIRIDIS[i];
  const b = VIRIDIS[i + 1];
  return toHex([0, 1, 2].map((k) => a[k] + (b[k] - a[k]) * f));
}

/** Parse a JSON-safe number from Python ("NaN", "Infinity", "-Infinity" or null are allowed). */
export function parseNumber(v) {
  if (v === null || v === undefined) return null;
  if (typeof v === "number") return v;
  if (v === "NaN" || v === "nan") return NaN;
  if (v === "Infinity" || v === "inf") return Infinity;
  if (v === "-Infinity" || v === "-inf") return -Infinity;
  const n = Number(v);
  return Number.isNaN(n) ? null : n;
}

/**
 * Colour of a node from its gradient norm.
 * range: {lo, hi} in log10 units. nan: the node's gradient holds NaN/Inf.
 */
export function normColor(norm, range, nan = false) {
  if (nan) return NAN_COLOR;
  const n = parseNumber(norm);
  if (n === null) return NO_GRAD_COLOR;
  if (!Number.isFinite(n)) return NAN_COLOR;
  if (n === 0) return ZERO_GRAD_COLOR;
  const lo = range?.lo ?? -8;
  const hi = range?.hi ?? 2;
  const span = hi - lo > 0 ? hi - lo : 1;
  return viridis((Math.log10(Math.abs(n)) - lo) / span);
}

/** Black or white, whichever reads better on a background colour "#rrggbb" (WCAG luminance). */
export function textColorOn(background) {
  const m = /^#([0-9a-f]{2})([0-9a-f]{2})([0-9a-f]{2})$/i.exec(background || "");
  if (!m) return "#212121";
  const [r, g, b] = m.slice(1).map((x) => {
    const c = parseInt(x, 16) / 255;
    return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4;
  });
  const luminance = 0.2126 * r + 0.7152 * g + 0.0722 * b;
  return luminance > 0.2 ? "#111111" : "#ffffff";
}

/**
 * Whether a norm lies outside the colour range (fixed by the baseline run): its colour saturates
 * at the end of the scale, and the page marks it.
 */
export function beyondRange(norm, range) {
  const n = parseNumber(norm);
  if (n === null || !Number.isFinite(n) || n === 0 || !range) return false;
  const log = Math.log10(Math.abs(n));
  return log < range.lo || log > range.hi;
}

/** Legend stops: [{log10, color}] from lo to hi, `count` stops. */
export function legendStops(range, count = 5) {
  const lo = range?.lo ?? -8;
  const hi = range?.hi ?? 2;
  const out = [];
  for (let i = 0; i < count; i++) {
    const v = count === 1 ? lo : lo + ((hi - lo) * i) / (count - 1);
    out.push({ log10: v, color: viridis(count === 1 ? 0 : i / (count - 1)) });
  }
  return out;
}

/** Short human form of a number: 3 significant digits, exponent when large or small. */
export function formatNumber(v) {
  const n = parseNumber(v);
  if (n === null) return "–";
  if (Number.isNaN(n)) return "NaN";
  if (n === Infinity) return "inf";
  if (n === -Infinity) return "-inf";
  if (n === 0) return "0";
  if (Number.isInteger(n) && Math.abs(n) < 1e9) return String(n);
  const a = Math.abs(n);
  if (a >= 1e5 || a < 1e-3) return n.toExponential(2);
  return String(Number(n.toPrecision(4)));
}

/** A nested list of numbers as text, e.g. [[1, 2], [3, 4]]. */
export function formatValue(v) {
  if (Array.isArray(v)) return `[${v.map(formatValue).join(", ")}]`;
  return formatNumber(v);
}

/**
 * A fraction in [0, 1] as a percentage that never rounds a part to all or nothing (the rule of
 * hookviz.analysis.diagnose.percent): 0.37 -> "37%", 0.995 -> "99.5%", 0.99998 -> "> 99.99%",
 * 2e-5 -> "< 0.01%"; only exactly 0 and 1 give "0%" and "100%".
 */
export function formatPercent(fraction) {
  const f = parseNumber(fraction);
  if (f === null) return "–";
  if (Number.isNaN(f)) return "NaN%";
  if (f <= 0) return "0%";
  if (f >= 1) return "100%";
  for (const digits of [0, 1, 2]) {
    const shown = Number((100 * f).toFixed(digits));
    if (shown > 0 && shown < 100) return `${shown.toFixed(digits)}%`;
  }
  return f < 0.5 ? "< 0.01%" : "> 99.99%";
}

export const groupId = (module) => `group:${module}`;

/**
 * Index the module groups of a graph: id -> group, and the chain of group ids from the
 * outermost to the innermost for a module name.
 */
export function indexGroups(groups) {
  const byId = new Map();
  for (const g of groups || []) byId.set(g.id, g);
  const chainCache = new Map();
  const chain = (id) => {
    if (!id || !byId.has(id)) return [];
    if (chainCache.has(id)) return chainCache.get(id);
    const g = byId.get(id);
    const c = [...chain(g.parent), id];
    chainCache.set(id, c);
    return c;
  };
  return { byId, chain };
}

/**
 * What is visible of an op graph given the set of collapsed module names.
 *
 * graph: {nodes: [{id, module, ...}], edges: [[source, target, slot], ...], groups: [{id, module, parent, ...}]}
 * Returns {nodes, groups, edges, representative}:
 *  - nodes: visible op nodes, each {node, parent} (parent: group id of an expanded group or null)
 *  - groups: visible groups, each {group, collapsed, parent}; a collapsed group is drawn as one node
 *  - edges: [{id, source, target, count}] between visible elements, self loops dropped, merged
 *  - representative: Map node id -> id of the visible element that stands for it
 */
export function visibleGraph(graph, collapsed) {
  const collapsedSet = collapsed instanceof Set ? collapsed : new Set(collapsed || []);
  const { byId, chain } = indexGroups(graph.groups);
  const representative = new Map();
  const nodes = [];
  const usedGroups = new Map(); // group id -> collapsed?
  const markUsed = (ids) => {
    for (const id of ids) if (!usedGroups.has(id)) usedGroups.set(id, collapsedSet.has(byId.get(id).module));
  };
  // Per module, not per node (20,000 nodes in a few thousand modules): its outermost collapsed
  // box (null when every box around it is open), and the boxes it shows, marked on first sight.
  const closedBoxOf = new Map();
  const closedBox = (module) => {
    let rep = closedBoxOf.get(module);
    if (rep !== undefined) return rep;
    const c = chain(groupId(module));
    const k = c.findIndex((id) => collapsedSet.has(byId.get(id).module));
    rep = k < 0 ? null : c[k];
    markUsed(k < 0 ? c : c.slice(0, k + 1));
    closedBoxOf.set(module, rep);
    return rep;
  };
  for (const n of graph.nodes) {
    const rep = closedBox(n.module);
    if (rep) {
      representative.set(n.id, rep);
    } else {
      const c = chain(groupId(n.module));
      representative.set(n.id, n.id);
      nodes.push({ node: n, parent: c.length ? c[c.length - 1] : null });
    }
  }
  const groups = [];
  for (const [id, isCollapsed] of usedGroups) {
    const g = byId.get(id);
    groups.push({ group: g, collapsed: isCollapsed, parent: g.parent && usedGroups.has(g.parent) ? g.parent : null });
  }
  const edges = [];
  const merged = new Map(); // source -> target -> its edge
  for (const [u, v] of graph.edges) {
    const a = representative.get(u);
    const b = representative.get(v);
    if (a === undefined || b === undefined || a === b) continue;
    let targets = merged.get(a);
    if (!targets) merged.set(a, (targets = new Map()));
    const e = targets.get(b);
    if (e) e.count += 1;
    else {
      const edge = { id: `e:${a}->${b}`, source: a, target: b, count: 1 };
      targets.set(b, edge);
      edges.push(edge);
    }
  }
  return { nodes, groups, edges, representative };
}

/**
 * The Module tree view: a box for each module whose ancestors are all open and an edge from each
 * drawn module to each of its children; no ops. A collapsed module that has children hides its
 * subtree (the `collapsed` list has the same meaning as in visibleGraph).
 * Returns {groups: [{group, collapsed, hasChildren}], edges: [{id, source, target, count}],
 * representative: Map graph node id -> the drawn box that stands for it (its innermost drawn
 * module; none for a node of the root module)}.
 */
export function moduleTree(graph, collapsed) {
  const collapsedSet = collapsed instanceof Set ? collapsed : new Set(collapsed || []);
  const { byId, chain } = indexGroups(graph.groups);
  const children = new Map();
  for (const g of graph.groups || []) {
    const parent = g.parent && byId.has(g.parent) ? g.parent : null;
    if (!children.has(parent)) children.set(parent, []);
    children.get(parent).push(g);
  }
  const drawn = new Set();
  const groups = [];
  const edges = [];
  const visit = (g, parentId) => {
    const kids = children.get(g.id) || [];
    const closed = kids.length > 0 && collapsedSet.has(g.module);
    drawn.add(g.id);
    groups.push({ group: g, collapsed: closed, hasChildren: kids.length > 0 });
    if (parentId) edges.push({ id: `t:${parentId}->${g.id}`, source: parentId, target: g.id, count: 1 });
    if (!closed) for (const k of kids) visit(k, g.id);
  };
  for (const g of children.get(null) || []) visit(g, null);
  const representative = new Map();
  for (const n of graph.nodes || []) {
    let rep = null;
    for (const id of chain(groupId(n.module))) {
      if (!drawn.has(id)) break;
      rep = id;
    }
    if (rep) representative.set(n.id, rep);
  }
  return { groups, edges, representative };
}

/** Number of elements a collapse state draws (op nodes + groups). */
export function visibleCount(graph, collapsed) {
  const v = visibleGraph(graph, collapsed);
  return v.nodes.length + v.groups.length;
}

/**
 * The collapse state after a click on a module box, as a new sorted list: a closed box opens one
 * level (its child modules drawn as closed boxes: the rule of hookviz.widget_tree.open_one_level),
 * an open one closes. groups: the graph payload's groups ({module, parent: "group:<module>"}).
 */
export function toggleGroup(collapsed, module, groups) {
  const s = new Set(collapsed || []);
  if (s.has(module)) {
    s.delete(module);
    for (const g of groups || []) if (g.parent === `group:${module}`) s.add(g.module);
  } else s.add(module);
  return [...s].sort();
}

/**
 * Replay state at step k of the recorded backward order.
 * steps: [{node, hooks: [...]}]. k = -1 means "replay off".
 * Returns {active, lit: Set of node ids that have run, current: node id running now or null, hooks}.
 */
export function replayState(steps, k) {
  const n = steps ? steps.length : 0;
  if (k === null || k === undefined || k < 0 || n === 0)
    return { active: false, lit: new Set(), current: null, hooks: [] };
  const kk = Math.min(k, n - 1);
  const lit = new Set();
  for (let i = 0; i <= kk; i++) lit.add(steps[i].node);
  return { active: true, lit, current: steps[kk].node, hooks: steps[kk].hooks || [], step: kk };
}

/** The next step while playing; wraps to -1 (off) after the last one. */
export function nextStep(k, count) {
  if (count <= 0) return -1;
  return k + 1 >= count ? -1 : k + 1;
}

/** Map replay state (in node ids) onto visible elements (a collapsed group lights when any member ran). */
export function replayOnVisible(state, representative) {
  const lit = new Set();
  for (const id of state.lit) lit.add(representative.get(id) ?? id);
  const current = state.current === null ? null : (representative.get(state.current) ?? state.current);
  return { ...state, lit, current };
}

/**
 * Chart series from the `chart` traitlet: {modules, current, baseline, threshold, rule, floor}.
 * A zero norm cannot sit on a log axis: it is drawn at `floor` and listed in `zeros` (the labels
 * of this run's zero points) to be marked; non-finite or missing norms are gaps (null).
 */
export function chartSeries(chart) {
  const floor = parseNumber(chart.floor) || 1e-12;
  const onLog = (xs) =>
    (xs || []).map((v) => {
      const n = parseNumber(v);
      if (n === null || !Number.isFinite(n)) return null;
      return n > 0 ? n : floor;
    });
  const labels = (chart.modules || []).map((m) => (m === "" ? "(root)" : m));
  return {
    labels,
    current: onLog(chart.current),
    baseline: onLog(chart.baseline),
    zeros: labels.filter((_, i) => parseNumber((chart.current || [])[i]) === 0),
    threshold: parseNumber(chart.threshold),
    rule: chart.rule || "",
    floor,
  };
}

// ----- diagnosis banner and watch view -------------------------------------------------------

/** How the banner names each kind of finding (hookviz.Finding.kind). */
export const FINDING_LABELS = {
  nan: "NaN/Inf origin",
  exploding: "exploding",
  vanishing: "vanishing",
  dead: "dead",
  saturated: "saturated",
};

/** The banner's headline from the counts per kind: "2 vanishing, 1 NaN/Inf origin". */
export function findingsSummary(counts) {
  return Object.entries(counts || {})
    .filter(([, n]) => n > 0)
    .map(([kind, n]) => `${n} ${FINDING_LABELS[kind] ?? kind}`)
    .join(", ");
}

/**
 * Colour of a drawn element in the watch view: by the watch's norm for that element id
 * (parameter leaf, "group:<module>", "module:<module>"); grey when the watch has no value for it.
 * overlay: {node_norms: {id: norm}, color_range: {lo, hi}}.
 */
export function overlayColor(id, overlay) {
  const norms = overlay?.node_norms || {};
  if (!Object.prototype.hasOwnProperty.call(norms, id)) return NO_GRAD_COLOR;
  return normColor(norms[id], overlay.color_range);
}

/**
 * The watch heatmap (plotly figure JSON) with the shown step marked by a vertical line.
 * Returns a new {data, layout}; the figure passed in is not changed.
 */
export function heatmapWithStep(figure, step) {
  const layout = { ...(figure?.layout || {}) };
  delete layout.template; // plotly.py's default template is large and only restyles
  const marker =
    step === null || step === undefined
      ? []
      : [
          {
            type: "line",
            xref: "x",
            yref: "paper",
            x0: step,
            x1: step,
            y0: 0,
            y1: 1,
            line: { color: "#e53935", width: 2 },
          },
        ];
  layout.shapes = [...(layout.shapes || []), ...marker];
  return { data: figure?.data || [], layout };
}
