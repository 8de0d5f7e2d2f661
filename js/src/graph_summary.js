// What the inspector can say of an element from the graph on the page alone, before (or
// without) the kernel's answer. No DOM.
import { MODULE_PREFIX, moduleName, opLabel, shortName } from "./names.js";

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
      label: group.label || moduleName(graph, module),
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
    // the module that holds it, as every view names it ("Canonical (root)" for the root's ops)
    module_name: moduleName(graph, node.module),
    norm: node.norm,
    nan: node.nan,
    norm_text: node.norm_text,
    hint: node.hint,
    inputs,
    outputs,
  };
}
