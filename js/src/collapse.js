// Which module boxes are open: the first view (the module tree opened as deep as fits the
// budget), the Module tree view's, open one level, collapse all, and the boxes opened to reveal
// an element. The one home of the view's rules (hookviz only sends the graph: groups with their
// parent and signature); Python never computes which boxes are open: the page does, and writes
// the result to the `collapsed` traitlet. No DOM.
import { groupId } from "./visible_graph.js";
import { ancestors, MODULE_PREFIX, parentModule } from "./names.js";

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
