// The ELK graph of what is drawn, and the positions ELK returns. Pure: no DOM, no cytoscape, so
// vitest runs it with elkjs on the main thread while the page runs it in the worker (elk.js).

// Inside an open module box: room for its title above the content, a margin elsewhere. The
// title (a 12 px bold line, about 16 px high) sits above the box's drawn border, which cytoscape
// draws `side` above the content: top - side leaves it that room.
export const BOX_PADDING = { top: 28, side: 10 };
// Room kept between a box's title and an edge that passes through the title's band.
const TITLE_CLEARANCE = 4;

// Spacing of every level (ELK reads spacing per nested graph, also with INCLUDE_CHILDREN). Tight
// between layers: a 24-layer attention block opened in a 560 px view stays readable.
const SPACING = {
  "elk.layered.spacing.nodeNodeBetweenLayers": "16",
  "elk.spacing.nodeNode": "12",
  "elk.layered.spacing.edgeNodeBetweenLayers": "6",
  "elk.layered.spacing.edgeEdgeBetweenLayers": "5",
  "elk.spacing.edgeNode": "6",
  "elk.spacing.edgeEdge": "5",
};

/**
 * ELK layered options for the whole drawing. Hierarchy handling lays out every level of the
 * module tree in one pass, so an edge from inside one box to inside another is routed across
 * levels; every edge gets an orthogonal route around the nodes (drawn as is, see edgeRouteStyle),
 * in absolute coordinates. Data flows `direction` ("DOWN" for the op graph: op labels are wide and
 * short, so a chain is denser top to bottom; "RIGHT" for the module tree). With `wrap`, a long
 * chain (a deep MLP) is cut into pieces placed side by side to fill a view of the given aspect
 * ratio (width / height).
 */
export function layoutOptions(aspect, wrap = false, direction = "DOWN") {
  return {
    "elk.algorithm": "layered",
    "elk.direction": direction,
    "elk.hierarchyHandling": "INCLUDE_CHILDREN",
    "elk.edgeRouting": "ORTHOGONAL",
    "elk.json.edgeCoords": "ROOT",
    ...SPACING,
    "elk.spacing.componentComponent": "24",
    "elk.layered.considerModelOrder.strategy": "NODES_AND_EDGES",
    "elk.padding": "[top=10,left=10,bottom=10,right=10]",
    ...wrapping(aspect, wrap),
    // The Module tree: its boxes (the root, "(loss)" beside it) apart, its edges' elbows room
    ...(direction === "RIGHT"
      ? {
          "elk.layered.spacing.nodeNodeBetweenLayers": "40",
          "elk.spacing.componentComponent": "40",
        }
      : {}),
  };
}

// ELK's options that cut a chain into pieces side by side (see layoutOptions); none without wrap.
function wrapping(aspect, wrap) {
  if (!wrap) return {};
  return {
    "elk.layered.wrapping.strategy": "MULTI_EDGE",
    "elk.aspectRatio": String(Math.max(0.5, Math.min(4, aspect || 1.6))),
  };
}

/**
 * The ELK JSON graph of drawn elements.
 * nodes: [{id, parent, width, height, compound, minWidth}] (compound: an open box; its size comes
 * from its children, at least minWidth wide when given); edges: [{id, source, target}] between drawn non-compound nodes; aspect, wrap,
 * direction: see layoutOptions. ELK wraps each level of the hierarchy by that level's own options,
 * so with `wrap` an open box (only the root module's box, see wraps) wraps the chain it holds too.
 */
export function elkGraph(nodes, edges, aspect, wrap = false, direction = "DOWN") {
  const byId = new Map();
  const root = {
    id: "__root",
    layoutOptions: layoutOptions(aspect, wrap, direction),
    children: [],
    edges: [],
  };
  for (const n of nodes) {
    const item = { id: n.id, children: [] };
    if (n.compound) {
      item.layoutOptions = {
        ...SPACING,
        "elk.padding": `[top=${BOX_PADDING.top},left=${BOX_PADDING.side},bottom=${BOX_PADDING.side},right=${BOX_PADDING.side}]`,
        ...wrapping(aspect, wrap),
        // ELK layered reads a box's minimum size in its own layered coordinates, where DOWN is
        // RIGHT turned: (height, width) for DOWN (tests/layout.test.js checks the width it gets).
        ...(n.minWidth
          ? {
              "elk.nodeSize.constraints": "[MINIMUM_SIZE]",
              "elk.nodeSize.minimum": direction === "DOWN" ? `(0, ${n.minWidth})` : `(${n.minWidth}, 0)`,
            }
          : {}),
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
 * The route ELK computed for each edge: {edgeId: [{x, y}, ...]} in absolute coordinates (the
 * layout asks for them, "elk.json.edgeCoords": "ROOT"), from the start point on the source's
 * border through the bend points to the end point on the target's border.
 */
export function routesOf(result) {
  const out = {};
  const walk = (item) => {
    for (const e of item.edges || []) {
      const s = e.sections && e.sections[0];
      if (s) out[e.id] = [s.startPoint, ...(s.bendPoints || []), s.endPoint].map((p) => ({ x: p.x, y: p.y }));
    }
    for (const child of item.children || []) walk(child);
  };
  walk(result);
  return out;
}

/**
 * Cytoscape style that draws an ELK route as it is: a `segments` edge whose end points sit where
 * ELK put them (offsets from the node centres) and whose bends are given as cytoscape asks, each
 * as a weight along the line from the start to the end point and a distance from it
 * (`edge-distances: endpoints`). route: [{x, y}] from routesOf; source, target: the end nodes'
 * centres. Null when the route cannot be drawn so (start and end at one point).
 */
export function edgeRouteStyle(route, source, target) {
  if (!route || route.length < 2 || !source || !target) return null;
  const start = route[0];
  const end = route[route.length - 1];
  const dx = end.x - start.x;
  const dy = end.y - start.y;
  const length = Math.hypot(dx, dy);
  if (length < 1e-6) return null;
  const weights = [];
  const distances = [];
  for (const p of route.slice(1, -1)) {
    const px = p.x - start.x;
    const py = p.y - start.y;
    weights.push((px * dx + py * dy) / (length * length));
    distances.push((px * -dy + py * dx) / length);
  }
  // Weights scale with the edge's length: five decimals keep a 1000 px edge's bends within 0.01 px.
  const round = (v) => Math.round(v * 1e5) / 1e5;
  return {
    "curve-style": weights.length ? "segments" : "straight",
    "edge-distances": "endpoints",
    "source-endpoint": `${round(start.x - source.x)}px ${round(start.y - source.y)}px`,
    "target-endpoint": `${round(end.x - target.x)}px ${round(end.y - target.y)}px`,
    ...(weights.length
      ? { "segment-weights": weights.map(round).join(" "), "segment-distances": distances.map(round).join(" ") }
      : {}),
  };
}

/**
 * Whether a drawing is laid out again wrapped (cut into pieces side by side): only when it holds
 * no open box but the root module's box (a wrap would cut through boxes; the root module's box,
 * always open, holds the whole chain and wraps it inside itself) and, laid out straight, it would
 * fit this view only with labels smaller than `minLabelPx` on screen (`straightZoom` x
 * `fontSize`), which the page hides. A straight drawing with readable labels is kept: wrapping
 * cuts the data flow into pieces whose joining edges run back across the view.
 * hasOpenBox: whether a box other than the root module's is open.
 */
export function wraps(straightZoom, fontSize, minLabelPx, hasOpenBox = false) {
  return !hasOpenBox && straightZoom * fontSize < minLabelPx;
}

/**
 * Where each open box's title goes so that no edge runs through it: the edges that enter a box
 * cross the band its top padding makes (BOX_PADDING.top, above the content), so the title takes
 * the leftmost stretch of that band no edge crosses. items: the elkGraph nodes ({id, parent,
 * compound}); edges: [{id, source, target}]; drawing: {positions, routes} (positionsOf,
 * routesOf); titleWidth(id): a box title's width in model units. Cytoscape centres a compound
 * node's title on what the box holds (its children as placed), so the shift is taken from there.
 * Returns {boxId: {dx, clear}}: dx the shift (cytoscape's text-margin-x), clear whether the band
 * had room (else the title stays at the band's left; see layOut's widening).
 */
export function titlePlacement(items, edges, { positions, routes }, titleWidth) {
  const held = new Map();
  for (const n of items) if (n.parent) held.set(n.parent, [...(held.get(n.parent) || []), n.id]);
  const lines = edges.map((e) =>
    // as cytoscape draws it: its route, else a line between the centres of its ends
    edgeRouteStyle(routes[e.id], positions[e.source], positions[e.target])
      ? routes[e.id]
      : [positions[e.source], positions[e.target]].filter(Boolean),
  );
  const out = {};
  for (const n of items) {
    const p = positions[n.id];
    const inside = (held.get(n.id) || []).map((id) => positions[id]).filter(Boolean);
    if (!n.compound || !p || !inside.length) continue;
    const x1 = Math.min(...inside.map((c) => c.x - c.width / 2));
    const x2 = Math.max(...inside.map((c) => c.x + c.width / 2));
    const width = titleWidth(n.id);
    const left = p.x - p.width / 2 + BOX_PADDING.side;
    const right = p.x + p.width / 2 - BOX_PADDING.side;
    const top = p.y - p.height / 2;
    const blocked = [];
    for (const line of lines) {
      for (let i = 0; i + 1 < line.length; i++) {
        const span = spanInBand(line[i], line[i + 1], left, right, top, top + BOX_PADDING.top);
        if (span) blocked.push([span[0] - TITLE_CLEARANCE, span[1] + TITLE_CLEARANCE]);
      }
    }
    blocked.sort((a, b) => a[0] - b[0]);
    let x = left;
    for (const [from, to] of blocked) {
      if (from >= x + width) break;
      x = Math.max(x, to);
    }
    const clear = x + width <= right;
    out[n.id] = { dx: (clear ? x : left) + width / 2 - (x1 + x2) / 2, clear };
  }
  return out;
}

/**
 * The width an open box needs for its title beside the edges that enter it: its width now plus
 * the title's and a clearance on each side (layOut lays a box out again this wide when its band
 * had no room, titlePlacement's clear false). ELK keeps the box's content at its left, so the
 * room is on the right, where no edge enters.
 */
export function widerBox(width, titleWidth) {
  return Math.ceil(width + titleWidth + 2 * TITLE_CLEARANCE);
}

// The x range of the piece of segment a-b inside the rectangle [left, right] x [top, bottom];
// null when it does not enter it (Liang-Barsky clipping).
function spanInBand(a, b, left, right, top, bottom) {
  let t0 = 0;
  let t1 = 1;
  const dx = b.x - a.x;
  const dy = b.y - a.y;
  for (const [p, q] of [
    [-dx, a.x - left],
    [dx, right - a.x],
    [-dy, a.y - top],
    [dy, bottom - a.y],
  ]) {
    if (p === 0) {
      if (q < 0) return null;
    } else {
      const r = q / p;
      if (p < 0) t0 = Math.max(t0, r);
      else t1 = Math.min(t1, r);
    }
  }
  if (t0 > t1) return null;
  const x0 = a.x + dx * t0;
  const x1 = a.x + dx * t1;
  return [Math.min(x0, x1), Math.max(x0, x1)];
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
