// Search ranking: the element a search finds in the graph (the search box is search.js). No DOM.
import { MODULE_PREFIX, ROOT_MARK } from "./names.js";

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
