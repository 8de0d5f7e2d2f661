// The graph view's layout: ELK (in its worker, elk.js) places what is drawn, wraps a deep chain
// into pieces side by side when that reads better, and widens a box whose title has no room.
import { elkLayout } from "./elk.js";
import { BOX_PADDING, elkGraph, fitZoom, positionsOf, routesOf, titlePlacement, widerBox, wraps } from "./layout.js";
import { FONT_SIZE, MIN_LABEL_PX, TITLE_FONT, textWidth } from "./graph_style.js";
import { groupId } from "./visible_graph.js";

/**
 * A drawing ({positions, routes, wrap}) with its box titles placed (layout.titlePlacement). A box whose title band had no
 * room between the edges entering it is laid out again wider (layout.widerBox), at most twice.
 */
function titled(items, edges, laid, titleWidth, aspect, direction, tries = 2) {
  const titles = titlePlacement(items, edges, laid, titleWidth);
  const narrow = new Set(Object.keys(titles).filter((id) => !titles[id].clear));
  if (!narrow.size || !tries) return Promise.resolve({ ...laid, titles, passes: 2 - tries });
  const wider = items.map((n) =>
    narrow.has(n.id) ? { ...n, minWidth: widerBox(laid.positions[n.id].width, titleWidth(n.id)) } : n,
  );
  return elkLayout(elkGraph(wider, edges, aspect, laid.wrap, direction)).then((result) =>
    titled(
      wider,
      edges,
      { ...laid, positions: positionsOf(result), routes: routesOf(result) },
      titleWidth,
      aspect,
      direction,
      tries - 1,
    ),
  );
}

/**
 * ELK positions of the drawn elements and routes of their edges: {positions, routes}. Top to
 * bottom; when its labels would be too small to draw in this view and no box but the root
 * module's is open (a deep chain, see wraps), again wrapped into pieces side by side, and the larger of the two. The
 * Module tree view is a tree left to right, one column per depth. `els`: the cytoscape
 * elements, `nodes` those of them that are nodes; `width`, `height`: the view's size in px.
 */
export function layOut(els, nodes, tree, width, height) {
  const compound = new Set(nodes.map((e) => e.data.parent).filter(Boolean));
  const labels = new Map(nodes.map((e) => [e.data.id, e.data.label]));
  const titleWidth = (id) => Math.ceil(textWidth(labels.get(id) || "", TITLE_FONT)) + 2;
  const items = nodes.map((e) => ({
    id: e.data.id,
    parent: e.data.parent,
    width: e.data.width,
    height: e.data.height,
    compound: compound.has(e.data.id),
    // an open box is at least as wide as its title: most titles then find room in one layout
    minWidth: compound.has(e.data.id) ? titleWidth(e.data.id) + 2 * BOX_PADDING.side : undefined,
  }));
  const edges = els.filter((e) => e.group === "edges").map((e) => e.data);
  const aspect = width / Math.max(1, height);
  const direction = tree ? "RIGHT" : "DOWN";
  const drawing = (result) => ({ positions: positionsOf(result), routes: tree ? {} : routesOf(result) });
  const chosen = elkLayout(elkGraph(items, edges, aspect, false, direction)).then((result) => {
    const straight = drawing(result);
    const zoom = fitZoom(straight.positions, width, height);
    // A tree has one column per depth: wrapping would only tangle its edges.
    // The root module's box is always open; it wraps the chain inside itself (elkGraph).
    const openBox = [...compound].some((id) => id !== groupId(""));
    if (tree || !wraps(zoom, FONT_SIZE, MIN_LABEL_PX, openBox)) return { ...straight, wrap: false };
    return elkLayout(elkGraph(items, edges, aspect, true, direction)).then((result) => {
      const wrapped = drawing(result);
      return fitZoom(wrapped.positions, width, height) > zoom
        ? { ...wrapped, wrap: true }
        : { ...straight, wrap: false };
    });
  });
  if (tree) return chosen; // the Module tree's boxes are filled, titled inside
  return chosen.then((laid) => titled(items, edges, laid, titleWidth, aspect, direction));
}
