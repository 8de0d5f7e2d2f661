// The page's skeleton: the widget's root element and where each part's elements sit in it, top
// to bottom.
import { h } from "./dom.js";

/** The widget's root element, with the page's style, appended to anywidget's `el`. */
export function pageRoot(el, css) {
  const root = h("div", { class: "hookviz-widget" });
  el.append(h("style", {}, css), root);
  return root;
}

/**
 * Put the parts' elements in `root`: the toolbar and its message line, the diagnosis banner, the
 * watch bar, the graph beside the side panel, the legend, the replay bar, the bottom panels, the
 * gradient-flow chart and the watch heatmap. A page without a graph (a watch shown alone) hides
 * the graph's parts (GraphPanel.hideWhenGraphless).
 */
export function arrange(root, { toolbar, graph, side, panels, watch, replay }) {
  const main = h("div", { class: "hv-main" }, graph.el, side.el);
  root.append(
    toolbar.el,
    toolbar.message,
    panels.banner,
    watch.el,
    main,
    graph.legend,
    replay.el,
    panels.bottom,
    panels.chart,
    watch.heatmap,
  );
  graph.hideWhenGraphless([main, graph.legend, replay.el, panels.bottom, panels.chart]);
}
