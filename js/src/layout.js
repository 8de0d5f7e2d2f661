// The ELK graph of what is drawn, and the positions ELK returns. Pure: no DOM, no cytoscape, so
// vitest runs it with elkjs on the main thread while the page runs it in the worker (elk.js).

// Inside an open module box: room for its title above the content, a margin elsewhere.
export const BOX_PADDING = { top: 24, side: 10 };

/**
 * ELK layered options for the whole drawing. Hierarchy handling lays out every level of the
 * module tree in one pass, so an edge from inside one box to inside another is routed across
 * levels. With `wrap`, a long chain (a deep MLP) wraps into rows that fill a view of the given
 * aspect ratio (width / height).
 */
export function layoutOptions(aspect, wrap = false) {
  const wrapping = wrap
    ? {
        "elk.layered.wrapping.strategy": "MULTI_EDGE",
        "elk.aspectRatio": String(Math.max(0.5, Math.min(4, aspect || 1.6))),
      }
    : {};
  return {
    "elk.algorithm": "layered",
    "elk.direction": "RIGHT",
    "elk.hierarchyHandling": "INCLUDE_CHILDREN",
    "elk.layered.spacing.nodeNodeBetweenLayers": "28",
    "elk.spacing.nodeNode": "14",
    "elk.spacing.componentComponent": "24",
    "elk.layered.spacing.edgeNodeBetweenLayers": "8",
    "elk.layered.considerModelOrder.strategy": "NODES_AND_EDGES",
    "elk.padding": "[top=10,left=10,bottom=10,right=10]",
    ...wrapping,
  };
}

/**
 * The ELK JSON graph of drawn elements.
 * nodes: [{id, parent, width, height, compound}] (compound: an open box; its size comes from its
 * children); edges: [{id, source, target}] between drawn non-compound nodes; aspect, wrap: see
 * layoutOptions.
 */
export function elkGraph(nodes, edges, aspect, wrap = false) {
  const byId = new Map();
  const root = { id: "__root", layoutOptions: layoutOptions(aspect, wrap), children: [], edges: [] };
  for (const n of nodes) {
    const item = { id: n.id, children: [] };
    if (n.compound) {
      item.layoutOptions = {
        "elk.padding": `[top=${BOX_PADDING.top},left=${BOX_PADDING.side},bottom=${BOX_PADDING.side},right=${BOX_PADDING.side}]`,
      };
    } else {
      item.width = n.width;
      item.height = n.height;
    }
    byId.set(n.id, item);
  }
  for (const n of nodes) {
    const parent = n.parent && byId.has(n.parent) ? byId.get(n.parent) : root;
    parent.children.push(byId.get(n.id));
  }
  const drawn = new Set(nodes.filter((n) => !n.compound).map((n) => n.id));
  for (const e of edges) {
    if (drawn.has(e.source) && drawn.has(e.target))
      root.edges.push({ id: e.id, sources: [e.source], targets: [e.target] });
  }
  return root;
}

/**
 * Absolute positions from ELK's result (ELK's x, y are relative to the parent and name the
 * top-left corner): {id: {x, y, width, height}} with x, y the centre, as cytoscape positions nodes.
 */
export function positionsOf(result) {
  const out = {};
  const walk = (item, dx, dy) => {
    for (const child of item.children || []) {
      const x = dx + (child.x || 0);
      const y = dy + (child.y || 0);
      out[child.id] = { x: x + child.width / 2, y: y + child.height / 2, width: child.width, height: child.height };
      walk(child, x, y);
    }
  };
  walk(result, 0, 0);
  return out;
}

/**
 * Whether a drawing is laid out again wrapped into rows: only when, laid out left to right, it
 * would fit this view only with labels smaller than `minLabelPx` on screen (`straightZoom` x
 * `fontSize`), which the page hides. A straight drawing with readable labels is kept: wrapping
 * cuts the data flow into rows whose joining edges run back across the view (a GPT-2's loss ops
 * wrapped under its transformer box).
 */
export function wrapsIntoRows(straightZoom, fontSize, minLabelPx) {
  return straightZoom * fontSize < minLabelPx;
}

/** The zoom at which a laid-out drawing (from positionsOf) fits a view of width x height. */
export function fitZoom(positions, width, height) {
  let x1 = Infinity;
  let y1 = Infinity;
  let x2 = -Infinity;
  let y2 = -Infinity;
  for (const p of Object.values(positions)) {
    x1 = Math.min(x1, p.x - p.width / 2);
    y1 = Math.min(y1, p.y - p.height / 2);
    x2 = Math.max(x2, p.x + p.width / 2);
    y2 = Math.max(y2, p.y + p.height / 2);
  }
  if (!Number.isFinite(x1)) return 1;
  return Math.min(width / Math.max(1, x2 - x1), height / Math.max(1, y2 - y1));
}
