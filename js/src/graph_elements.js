// The cytoscape elements of what a collapse state draws (op graph or Module tree view), each
// with its label, tooltip title, colours, marks and size. `measure(text)` gives a label's width
// in px (graph_style.textWidth in the page). No DOM.
import { overlayColor, textColorOn } from "./colors.js";
import { moduleName, opLabel } from "./names.js";
import { moduleTree, visibleGraph } from "./visible_graph.js";

/**
 * The label of a module box: its short name, one line (the full path and type are in the
 * tooltip). A block with identical siblings (the six blocks of a GPT-2) carries "≡".
 */
function boxLabel(group) {
  return group.repeat ? `${group.label} ≡` : group.label;
}

function boxTitle(group) {
  if (group.module === "") return group.label; // the root module's box: "Canonical (root)"
  const kind = group.type ? ` (${group.type})` : "";
  const same = group.repeat ? `, ${group.repeat.index} of ${group.repeat.count} identical blocks` : "";
  return `${group.module}${kind}${same}`;
}

/**
 * An element's colour (the watch overlay's, else its norm's: both sent by Python, which colours
 * on the range fixed by the baseline) and the text colour that reads on it.
 */
function painter(overlay) {
  return (item) => {
    const color = overlay ? overlayColor(item.id, overlay) : item.color;
    return { color, textColor: textColorOn(color), beyond: !overlay && !!item.beyond };
  };
}

function pendingTargets(editState) {
  return new Set([...(editState?.pending_targets || []), ...(editState?.removed_targets || [])]);
}

/** (group, collapsed) -> the data of a module's box, in both views. */
function boxData(paint, pending, measure) {
  return (group, collapsed) => {
    const label = boxLabel(group);
    return {
      id: group.id,
      label,
      title: boxTitle(group),
      ...paint(group),
      isGroup: true,
      collapsed,
      module: group.module,
      // its own sites edited, or (closed) an edit of something it hides
      edited: !!group.edited || (collapsed && !!group.edits_inside),
      pending: pending.has(group.module),
      hooks: group.user_hooks > 0,
      width: Math.ceil(measure(label)) + 16,
      height: 28,
    };
  };
}

/** Cytoscape element definitions (with their sizes) of what a collapse state draws: {els, representative}. */
export function elementsFor(graph, collapsed, overlay, editState, measure) {
  const els = [];
  const pending = pendingTargets(editState);
  const paint = painter(overlay);
  const box = boxData(paint, pending, measure);
  const vis = visibleGraph(graph, collapsed);
  for (const { group, collapsed: isCollapsed, parent } of vis.groups) {
    els.push({ group: "nodes", data: { ...box(group, isCollapsed), parent: parent || undefined } });
  }
  for (const { node: n, parent } of vis.nodes) {
    const label = opLabel(n);
    els.push({
      group: "nodes",
      data: {
        id: n.id,
        label,
        title: n.kind === "leaf" ? n.id : `${n.id} in ${moduleName(graph, n.module)}`,
        ...paint(n),
        kind: n.kind,
        edited: !!n.edited,
        pending: pending.has(n.id),
        hooks: n.user_hooks > 0,
        parent: parent || undefined,
        target: n.id,
        width: Math.ceil(measure(label)) + 14,
        height: 24,
      },
    });
  }
  for (const e of vis.edges) els.push({ group: "edges", data: e });
  return { els, representative: vis.representative };
}

/** Cytoscape elements of the Module tree view: a box per drawn module, edges to its children. */
export function treeElementsFor(graph, collapsed, overlay, editState, measure) {
  const box = boxData(painter(overlay), pendingTargets(editState), measure);
  const tree = moduleTree(graph, collapsed);
  const els = tree.groups.map(({ group, collapsed: closed, hasChildren }) => ({
    group: "nodes",
    data: { ...box(group, closed), tree: true, openable: hasChildren },
  }));
  for (const e of tree.edges) els.push({ group: "edges", data: { ...e, tree: true } });
  return { els, representative: tree.representative };
}
