// The names the page shows: a module's short name, an op's label, the root module's mark, and
// each module box's label and identical-block mark (prepareGraph). No DOM.

export const MODULE_PREFIX = "module:";
// What the root module's box is called besides its class (hookviz.widget.tree.ROOT_MARK).
export const ROOT_MARK = "(root)";

// Siblings with one signature are marked "≡ identical blocks" from this many on (a pair is not a
// pattern worth a mark; the first view still opens identical siblings together from two on).
// Only blocks are marked: modules that hold modules (GPT-2's h.0 … h.11). The layers of an MLP
// (Linear, Sigmoid, Linear, …) repeat too, but a mark on every box tells nothing apart.
export const IDENTICAL_BLOCKS_MIN = 3;

/**
 * The name every view gives the module `module` of `graph`: its qualified name, the root module
 * ("") by its box's label, its class with ROOT_MARK ("Canonical (root)", as hookviz sends it).
 */
export function moduleName(graph, module) {
  if (module) return module;
  const root = (graph?.groups || []).find((g) => g.module === "");
  return root?.label || ROOT_MARK;
}

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
 * The label the graph draws on a node: a leaf's last name part; an op without autograd's
 * "Backward0" suffix, with its operand hint ("Mul ×5" for MulBackward0 of `5 * z`). The inspector
 * titles a node the same way (the Node's full name below it).
 */
export function opLabel(n) {
  if (n.kind === "leaf") return n.id.includes(".") ? n.id.slice(n.id.lastIndexOf(".") + 1) : n.id;
  const op = (n.op || n.id).replace(/Backward\d*$/, "") || n.op;
  return n.hint ? `${op} ${n.hint}` : op;
}

/**
 * What a box shows: the last part of the path, with its list's name when the part is an index or
 * sits in a list item: transformer.h.3 -> h.3, transformer.h.3.attn -> h.3.attn,
 * transformer.h.3.attn.c_attn -> c_attn, 0 -> 0.
 */
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
