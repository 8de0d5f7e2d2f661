// What a collapse state draws of the op graph: module boxes open or closed, the op nodes inside
// open boxes, the edges between what is drawn; and the Module tree view's boxes. No DOM.

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
