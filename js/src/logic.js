// Pure logic of the widget: grouping/collapse, replay state, what the page reads of the payload.
// No DOM and no cytoscape here, so vitest can import it directly. Numbers and colours come as the
// payload's text and colours (hookviz.text, hookviz.colors: their one home); the page draws them.

export const EDIT_COLOR = "#ff6d00";
export const HOOK_COLOR = "#d500f9";

/** A JSON-safe number from Python ("nan", "inf", "-inf" or null are allowed), to sort or draw by. */
export function parseNumber(v) {
  if (v === null || v === undefined) return null;
  if (typeof v === "number") return v;
  if (v === "NaN" || v === "nan") return NaN;
  if (v === "Infinity" || v === "inf") return Infinity;
  if (v === "-Infinity" || v === "-inf") return -Infinity;
  const n = Number(v);
  return Number.isNaN(n) ? null : n;
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
 * level (openOneLevel: its child modules drawn as closed boxes), an open one closes.
 * groups: the graph payload's groups ({module, parent: "group:<module>"}).
 */
export function toggleGroup(collapsed, module, groups) {
  const s = new Set(collapsed || []);
  if (s.has(module)) return openOneLevel(collapsed, module, groups);
  s.add(module);
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

/** Map replay state (in node ids) onto visible elements (a collapsed group lights when any member ran). */
export function replayOnVisible(state, representative) {
  const lit = new Set();
  for (const id of state.lit) lit.add(representative.get(id) ?? id);
  const current = state.current === null ? null : (representative.get(state.current) ?? state.current);
  return { ...state, lit, current };
}

// ----- diagnosis banner and watch view -------------------------------------------------------

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

/**
 * Colour of a drawn element in the watch view: the colour of the watch's norm for that element id
 * (parameter leaf, "group:<module>"), which Python sent; `missing_color` when the watch has no
 * value for it. overlay: {node_colors: {id: "#rrggbb"}, missing_color}.
 */
export function overlayColor(id, overlay) {
  const colors = overlay?.node_colors || {};
  return Object.prototype.hasOwnProperty.call(colors, id) ? colors[id] : overlay?.missing_color;
}

// Height in px of one step row under a watch's heatmap (update ratio, learning rate), and of the
// gap above them.
export const STEP_ROW_HEIGHT = 18;
const STEP_ROWS_GAP = 40;
// The step rows' own y axis (a figure's own axes are y, y2).
const ROWS_AXIS = "y9";

/**
 * The watch heatmap (plotly figure JSON) with the shown step marked by a vertical line, drawn as
 * the figure's `step_marker` says (hookviz.widget.watch_json.STEP_MARKER), and its `step_rows`
 * (hookviz.widget.watch_rows.step_rows: a layer's update ratio, a learning rate, per step) drawn
 * as rows of squares under the figure on its step axis, each cell in the colour and with the
 * hover text Python sent; the steps the GradScaler skipped are dotted lines across it all.
 * Returns a new {data, layout} whose layout.height is the figure's own (a live figure sets one;
 * else by its heatmap's rows) plus the step rows'; the figure passed in is not changed.
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
            line: figure?.step_marker?.line,
          },
        ];
  const rows = figure?.step_rows;
  const skipped = (rows?.skipped?.steps || []).map((s) => ({
    type: "line",
    xref: "x",
    yref: "paper",
    x0: s,
    x1: s,
    y0: 0,
    y1: 1,
    line: { color: rows.skipped.color, width: 2, dash: "dot" },
  }));
  layout.shapes = [...(layout.shapes || []), ...skipped, ...marker];
  const data = figure?.data || [];
  const base = layout.height || Math.min(600, 140 + 16 * (data[0]?.y || []).length);
  layout.height = base;
  if (!rows?.rows?.length) return { data, layout };
  // The rows take the bottom of the figure; the figure's own plots move up, keeping their order.
  const extraHeight = STEP_ROWS_GAP + STEP_ROW_HEIGHT * rows.rows.length;
  layout.height = base + extraHeight;
  const share = extraHeight / layout.height;
  for (const key of Object.keys(layout).filter((k) => /^yaxis\d*$/.test(k))) {
    const [lo, hi] = layout[key]?.domain || [0, 1];
    layout[key] = { ...layout[key], domain: [share + lo * (1 - share), share + hi * (1 - share)] };
  }
  if (!layout.yaxis) layout.yaxis = { domain: [share, 1] };
  layout.yaxis9 = {
    domain: [0, share * (1 - STEP_ROWS_GAP / extraHeight)],
    type: "category",
    autorange: "reversed",
    automargin: true,
    fixedrange: true,
  };
  const traces = rows.rows.map((row) => ({
    type: "scatter",
    mode: "markers",
    x: rows.steps,
    y: rows.steps.map(() => row.label),
    yaxis: ROWS_AXIS,
    marker: { symbol: "square", size: STEP_ROW_HEIGHT - 4, color: row.colors },
    text: row.text,
    hovertemplate: "%{text}<extra></extra>",
    name: row.label,
    showlegend: false,
    meta: { stepRow: row.kind },
  }));
  // What the cells' colours mean, under the rows: each key a square in its colour and its words.
  const keys = rows.legend || [];
  layout.annotations = [
    ...(layout.annotations || []),
    ...keys.map((key, i) => ({
      xref: "paper",
      yref: "paper",
      x: i / keys.length,
      y: 0,
      xanchor: "left",
      yanchor: "top",
      yshift: -22,
      showarrow: false,
      text: `<span style="color:${key.color}">■</span> ${key.text}`,
      font: { size: 10 },
    })),
  ];
  return { data: [...data, ...traces], layout };
}

// ----- the module tree: names, identical blocks, what is open ------------------------------------
// The one home of the view's rules (hookviz only sends the graph: groups with their parent and
// signature). Python never computes which boxes are open: the page does, and writes the result to
// the `collapsed` traitlet.

export const MODULE_PREFIX = "module:";
// What the root module's box is called besides its class (hookviz.widget.tree.ROOT_MARK).
export const ROOT_MARK = "(root)";
// About this many drawn elements (op nodes, leaves and boxes) keep a first view readable when it
// is fitted into a notebook cell; the first view opens the module tree as deep as fits in it. The
// widget's `visible_budget` traitlet overrides it.
export const VISIBLE_BUDGET = 40;
// The first view opens a box only when it holds at most this many child modules, so GPT-2
// small's twelve blocks stay one `h` box (opened by a click) and a six-layer GPT-2 opens to them.
export const ROW_BUDGET = 8;
// The Module tree view opens levels while no column holds more than this many boxes: a column of
// 16 boxes fitted into a notebook cell keeps 8 px labels.
export const TREE_COLUMN_BUDGET = 16;
// Siblings with one signature are marked "≡ identical blocks" from this many on (a pair is not a
// pattern worth a mark; the first view still opens identical siblings together from two on).
// Only blocks are marked: modules that hold modules (GPT-2's h.0 … h.11). The layers of an MLP
// (Linear, Sigmoid, Linear, …) repeat too, but a mark on every box tells nothing apart.
export const IDENTICAL_BLOCKS_MIN = 3;

/** "a.b.c" -> "a.b", "a" -> null (the name's own parent; the root module's box, "", holds the
 * top-level modules in the payload's `parent` links). */
export function parentModule(module) {
  const i = module.lastIndexOf(".");
  return i < 0 ? null : module.slice(0, i);
}

/** The modules enclosing `module`, outermost first, without `module` itself. */
export function ancestors(module) {
  const out = [];
  for (let m = module ? parentModule(module) : null; m; m = parentModule(m)) out.unshift(m);
  return out;
}

/**
 * What a box shows: the last part of the path, with its list's name when the part is an index or
 * sits in a list item: transformer.h.3 -> h.3, transformer.h.3.attn -> h.3.attn,
 * transformer.h.3.attn.c_attn -> c_attn, 0 -> 0.
 */
/**
 * The label the graph draws on a node: a leaf's last name part; an op without autograd's
 * "Backward0" suffix, with its operand hint ("Mul ×5" for MulBackward0 of `5 * z`). The inspector
 * titles a node the same way (the Node's full name below it).
 */
export function opLabel(n) {
  if (n.kind === "leaf") return n.id.includes(".") ? n.id.slice(n.id.lastIndexOf(".") + 1) : n.id;
  const op = (n.op || n.id).replace(/Backward\d*$/, "") || n.op;
  return n.hint ? `${op} ${n.hint}` : op;
}

export function shortName(module) {
  const parts = module.split(".");
  if (parts.length === 1) return module;
  const isIndex = (p) => /^\d+$/.test(p);
  if (isIndex(parts[parts.length - 1])) return parts.slice(-2).join(".");
  if (isIndex(parts[parts.length - 2])) return `${shortName(parts.slice(0, -1).join("."))}.${parts[parts.length - 1]}`;
  return parts[parts.length - 1];
}

/**
 * Complete a graph payload in place, once per graph: each group gets its `label` (shortName) and,
 * when it is a block (it holds child modules) and at least IDENTICAL_BLOCKS_MIN siblings share its
 * `signature` (same type, same own ops, parameters of the same shapes, children identical in
 * pairs: hookviz sends it), `repeat = {index, count}` (1-based among them, in the order the
 * payload lists them: hookviz sorts siblings, natural order among equals); else repeat is null.
 * Returns the graph.
 */
export function prepareGraph(graph) {
  const groups = graph?.groups || [];
  const classes = new Map();
  const parents = new Set(groups.map((g) => g.parent).filter(Boolean));
  for (const g of groups) {
    // the root module's box: named by its class, as hookviz sends it ("Canonical (root)")
    g.label = g.module === "" ? g.label || ROOT_MARK : shortName(g.module);
    g.repeat = null;
    if (!parents.has(g.id)) continue; // a layer, not a block
    const key = `${g.parent}\u0000${g.signature}`;
    if (!classes.has(key)) classes.set(key, []);
    classes.get(key).push(g);
  }
  for (const members of classes.values()) {
    members.forEach((g, i) => {
      g.repeat = members.length >= IDENTICAL_BLOCKS_MIN ? { index: i + 1, count: members.length } : null;
    });
  }
  return graph;
}

/** module -> its child modules (names), from the payload's `parent` links; the top level under null. */
function childModules(groups) {
  const children = new Map([[null, []]]);
  for (const g of groups || []) {
    const parent = g.parent ? g.parent.slice("group:".length) : null;
    if (!children.has(parent)) children.set(parent, []);
    children.get(parent).push(g.module);
  }
  return children;
}

/**
 * The first level of the module tree the views open: the modules under the root module's box
 * (which is always open: it is the whole model) and the top-level boxes beside it ((loss)).
 */
function topModules(children) {
  return (children.get(null) || []).flatMap((m) => (m === "" ? children.get("") || [] : [m]));
}

/**
 * Walk the module tree level by level from the top. At each level, identical siblings (same
 * parent, same signature: the six blocks of a GPT-2) form one class, and tryOpen(members, depth)
 * says whether that class opens; the children of opened modules make the next level.
 */
function openLevels(groups, children, tryOpen) {
  const signature = new Map((groups || []).map((g) => [g.module, g.signature]));
  const kids = (m) => children.get(m) || [];
  let level = [...topModules(children)].sort();
  let depth = 0;
  while (level.length) {
    const classes = new Map();
    for (const module of level) {
      if (!kids(module).length) continue;
      const key = `${parentModule(module)}\u0000${signature.get(module)}`;
      if (!classes.has(key)) classes.set(key, []);
      classes.get(key).push(module);
    }
    const next = [];
    for (const members of classes.values()) if (tryOpen(members, depth)) for (const m of members) next.push(...kids(m));
    level = next.sort();
    depth += 1;
  }
}

/**
 * Whether the children of the box `module` take turns with ops outside it: a residual stack's
 * ModuleList, whose blocks each feed an `Add` of the enclosing module and take their input from
 * the Add before. Closed, such a box is one node under a fan of edges in and out, and the skip
 * connections are hidden; open, each `Add` sits beside its block. True when more than half of its
 * (at least two) children both take an edge from outside the box and give one to outside it.
 */
export function interleaved(graph, module) {
  const kids = (graph?.groups || []).filter((g) => g.parent === groupId(module)).map((g) => g.module);
  if (kids.length < 2) return false;
  // The child of the box that holds a node's module (itself or an enclosing one), null outside it.
  const prefix = `${module}.`;
  const childOf = new Map();
  for (const n of graph.nodes || []) {
    if (!n.module.startsWith(prefix)) continue;
    const next = n.module.indexOf(".", prefix.length);
    childOf.set(n.id, next < 0 ? n.module : n.module.slice(0, next));
  }
  const fromOutside = new Set();
  const toOutside = new Set();
  for (const [source, target] of graph.edges || []) {
    const a = childOf.get(source);
    const b = childOf.get(target);
    if (a !== undefined && b === undefined) toOutside.add(a);
    if (a === undefined && b !== undefined) fromOutside.add(b);
  }
  return kids.filter((k) => fromOutside.has(k) && toOutside.has(k)).length * 2 > kids.length;
}

/**
 * The modules collapsed in the first view of the graph (the "Overview"): the module tree opened as
 * deep as fits. Every top-level module starts as one box; boxes that hold other modules open level
 * by level while the drawn elements stay within `budget` and a box holds at most ROW_BUDGET child
 * modules, or its children take turns with ops outside it (interleaved: a residual stack
 * opens, so each `Add` sits beside its block); identical siblings open together or not at all.
 * Modules that hold only ops open only when the whole graph fits, so a small model shows its ops
 * and a large one its blocks. `selected` (a node id or "module:<name>"): the boxes around it open
 * too (revealTarget), so a selection made before the first view is drawn.
 */
export function defaultCollapsed(graph, budget = VISIBLE_BUDGET, selected = null) {
  const nodes = graph?.nodes || [];
  const groups = graph?.groups || [];
  if (!groups.length || nodes.length + groups.length <= budget) return [];
  const collapsed = openedAround(graph, budget);
  return selected ? revealTarget(collapsed, selected, graph) : collapsed;
}

// The first view's collapsed list before the selection is revealed (see defaultCollapsed).
function openedAround(graph, budget) {
  const nodes = graph?.nodes || [];
  const groups = graph?.groups || [];
  const children = childModules(groups);
  const kids = (m) => children.get(m) || [];
  const direct = new Map();
  for (const n of nodes) direct.set(n.module, (direct.get(n.module) || 0) + 1);
  const collapsed = new Set(topModules(children));
  let count = (direct.get("") || 0) + collapsed.size + (children.get(null).includes("") ? 1 : 0);
  openLevels(groups, children, (members) => {
    const added = members.reduce((sum, m) => sum + (direct.get(m) || 0) + kids(m).length, 0);
    const wide = (m) => kids(m).length > ROW_BUDGET && !interleaved(graph, m);
    if (count + added > budget || members.some(wide)) return false;
    count += added;
    for (const m of members) {
      collapsed.delete(m);
      for (const k of kids(m)) collapsed.add(k);
    }
    return true;
  });
  return [...collapsed].sort();
}

/**
 * The modules collapsed when the Module tree view opens: the tree opened level by level while
 * every depth's column holds at most `budget` boxes; identical siblings open together or not at
 * all. Every module that has children is listed unless opened.
 */
export function treeCollapsed(groups, budget = TREE_COLUMN_BUDGET) {
  const children = childModules(groups);
  const kids = (m) => children.get(m) || [];
  const collapsed = new Set((groups || []).map((g) => g.module).filter((m) => m !== "" && kids(m).length));
  const column = new Map([[0, topModules(children).length]]);
  openLevels(groups, children, (members, depth) => {
    const added = members.reduce((sum, m) => sum + kids(m).length, 0);
    if ((column.get(depth + 1) || 0) + added > budget) return false;
    column.set(depth + 1, (column.get(depth + 1) || 0) + added);
    for (const m of members) collapsed.delete(m);
    return true;
  });
  return [...collapsed].sort();
}

/**
 * The collapsed list a view kind starts with: "modules" (treeCollapsed) or "ops"
 * (defaultCollapsed); either way the boxes around `selected` (a node id or "module:<name>": a
 * selection made before the page drew, such as w.select in the cell that made the widget) are open.
 */
export function firstCollapsed(graph, view, budget = VISIBLE_BUDGET, selected = null) {
  if (view !== "modules") return defaultCollapsed(graph, budget, selected);
  const collapsed = treeCollapsed(graph?.groups);
  return selected ? revealTarget(collapsed, selected, graph) : collapsed;
}

/** "Collapse all": every top-level module as one closed box (inside the root's open box). */
export function collapseAll(groups) {
  return topModules(childModules(groups)).sort();
}

/** `collapsed` with `module` open and its child modules drawn as closed boxes. */
export function openOneLevel(collapsed, module, groups) {
  const s = new Set(collapsed || []);
  s.delete(module);
  for (const k of childModules(groups).get(module) || []) s.add(k);
  return [...s].sort();
}

/**
 * `collapsed` with every module around `module` open (one level each), so an element of `module`
 * is drawn; `module` itself too when openItself (to show one of its ops).
 */
export function reveal(collapsed, module, groups, openItself) {
  // the root module's box ("") holds every other module (a graph without one has no "" to open)
  const around = module ? ["", ...ancestors(module)] : [];
  const chain = [...around, ...(openItself ? [module] : [])];
  let state = [...(collapsed || [])].sort();
  for (const name of chain) if (state.includes(name)) state = openOneLevel(state, name, groups);
  return state;
}

/** The collapsed list that draws the element `id` (a node id or "module:<name>") of `graph`. */
export function revealTarget(collapsed, id, graph) {
  if (id.startsWith(MODULE_PREFIX)) return reveal(collapsed, id.slice(MODULE_PREFIX.length), graph.groups, false);
  const node = (graph.nodes || []).find((n) => n.id === id);
  return node ? reveal(collapsed, node.module, graph.groups, true) : [...(collapsed || [])].sort();
}

/**
 * The best match of a search: a module name, op node id or leaf name containing `query`
 * (case-insensitive). An exact name wins, then a name that ends with "." + it, then the shortest;
 * modules before nodes of equal rank. Returns "module:<name>" or a node id; null when nothing matches.
 */
export function find(query, graph) {
  const needle = (query || "").trim().toLowerCase();
  if (!needle) return null;
  let best = null;
  const consider = (name, kind, id) => {
    const lowered = name.toLowerCase();
    if (!lowered.includes(needle)) return;
    const rank = [lowered !== needle, !(lowered === needle || lowered.endsWith(`.${needle}`)), name.length, kind, name];
    if (!best || lessThan(rank, best.rank)) best = { rank, id };
  };
  for (const g of graph?.groups || []) {
    // the root module's box by the names it shows: "Canonical (root)", "Canonical", "(root)"
    const names = g.module === "" ? [g.label || ROOT_MARK, g.type, ROOT_MARK].filter(Boolean) : [g.module];
    for (const name of names) consider(name, 0, MODULE_PREFIX + g.module);
  }
  for (const n of graph?.nodes || []) consider(n.id, 1, n.id);
  return best && best.id;
}

function lessThan(a, b) {
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return a[i] < b[i];
  return false;
}

/**
 * What the inspector can say about an element from the graph alone (no kernel): for a node its op,
 * module, gradient norm and neighbours; for a module box its type, its child modules and the
 * gradient norms of the parameters (leaves) it holds, each with its norm and the norm's text
 * (norm_text, as Python wrote it). `id` is a node id or
 * "module:<name>". Returns null for an id the graph does not have.
 */
export function graphSummary(graph, id) {
  const nodes = graph?.nodes || [];
  const groups = graph?.groups || [];
  if (id.startsWith(MODULE_PREFIX)) {
    const module = id.slice(MODULE_PREFIX.length);
    const group = groups.find((g) => g.module === module);
    if (!group) return null;
    const children = groups
      .filter((g) => g.parent === group.id)
      .map((g) => ({
        module: g.module,
        label: shortName(g.module),
        type: g.type,
        norm: g.norm,
        nan: g.nan,
        norm_text: g.norm_text,
      }));
    const inside = module === "" ? (m) => m !== "(loss)" : (m) => m === module || m.startsWith(`${module}.`);
    const parameters = nodes
      .filter((n) => n.kind !== "op" && inside(n.module))
      .map((n) => ({
        id: n.id,
        // its name inside the module (h.0.attn.c_attn.weight in transformer.h): the table stays narrow
        name: module && n.id.startsWith(`${module}.`) ? n.id.slice(module.length + 1) : n.id,
        module: n.module,
        norm: n.norm,
        nan: n.nan,
        norm_text: n.norm_text,
      }));
    const ops = nodes.filter((n) => n.kind === "op" && n.module === module).length;
    return {
      kind: "module",
      id,
      module,
      label: group.label || (module === "" ? ROOT_MARK : module),
      type: group.type,
      norm: group.norm,
      nan: group.nan,
      norm_text: group.norm_text,
      size: group.size,
      children,
      parameters,
      ops,
    };
  }
  const node = nodes.find((n) => n.id === id);
  if (!node) return null;
  const inputs = [];
  const outputs = [];
  for (const [source, target] of graph.edges || []) {
    if (target === id) inputs.push(source);
    if (source === id) outputs.push(target);
  }
  return {
    kind: node.kind,
    id,
    label: opLabel(node),
    op: node.op,
    module: node.module,
    norm: node.norm,
    nan: node.nan,
    norm_text: node.norm_text,
    hint: node.hint,
    inputs,
    outputs,
  };
}
