// How the graph view looks: its font (labels are measured in it), the theme's colours read from
// JupyterLab's CSS variables, and cytoscape's style sheet.
import { BOX_PADDING } from "./layout.js";
import { EDIT_COLOR, HOOK_COLOR, SELECTION_COLOR } from "./colors.js";

export const FONT_SIZE = 12;
// Labels are measured (node widths, box titles) in the font they are drawn in.
const FONT_FAMILY = `-apple-system, "Segoe UI", Roboto, Helvetica, Arial, sans-serif`;
const FONT = `${FONT_SIZE}px ${FONT_FAMILY}`;
export const TITLE_FONT = `bold ${FONT}`;
// A label drawn smaller than this many pixels on screen is hidden (shown on hover or zoom).
export const MIN_LABEL_PX = 8;

let measureContext = null;
/** The width in px of `text` drawn in `font` (the graph's label font by default). */
export function textWidth(text, font = FONT) {
  measureContext ??= document.createElement("canvas").getContext("2d");
  measureContext.font = font;
  return measureContext.measureText(text).width;
}

/** The theme's colours the graph copies (cytoscape keeps them until restyled). */
export function theme(container) {
  const css = getComputedStyle(container);
  const v = (name, fallback) => css.getPropertyValue(name).trim() || fallback;
  return {
    text: v("--jp-ui-font-color1", "#212121"),
    muted: v("--jp-ui-font-color2", "#616161"),
    edge: v("--jp-border-color1", "#9e9e9e"),
    box: v("--jp-layout-color2", "#eceff1"),
    boxBorder: v("--jp-border-color1", "#90a4ae"),
    select: v("--jp-brand-color1", SELECTION_COLOR),
  };
}

/** Cytoscape's style sheet in the theme's colours `t` (theme()). */
export function styleFor(t) {
  return [
    {
      selector: "node",
      style: {
        "background-color": "data(color)",
        label: "data(label)",
        "font-size": FONT_SIZE,
        "font-family": FONT_FAMILY,
        "min-zoomed-font-size": MIN_LABEL_PX,
        color: "data(textColor)",
        "text-valign": "center",
        "text-halign": "center",
        "text-wrap": "wrap",
        shape: "round-rectangle",
        width: "data(width)",
        height: "data(height)",
        "border-width": 1,
        "border-color": t.boxBorder,
      },
    },
    { selector: 'node[kind = "leaf"]', style: { shape: "rectangle" } },
    { selector: "node[?beyond]", style: { "border-width": 3, "border-style": "dotted", "border-color": t.text } },
    { selector: "node[?hooks]", style: { "border-width": 3, "border-color": HOOK_COLOR, "border-style": "dashed" } },
    { selector: "node[?edited]", style: { "border-width": 4, "border-color": EDIT_COLOR, "border-style": "solid" } },
    { selector: "node[?pending]", style: { "border-width": 4, "border-color": EDIT_COLOR, "border-style": "dashed" } },
    {
      selector: "node[?collapsed]",
      style: { "border-width": 3, "border-style": "double", "border-color": t.boxBorder },
    },
    {
      selector: "node[?isGroup][!collapsed]",
      style: {
        "background-color": "data(color)",
        "background-opacity": 0.1,
        "border-color": "data(color)",
        "border-width": 2,
        color: t.text,
        // The title sits in the band the box's top padding makes, centred at the middle of what
        // the box holds and moved (text-margin-x, set in place()) to where no edge crosses it.
        "text-valign": "top",
        "text-halign": "center",
        "text-wrap": "none",
        "font-weight": "bold",
        padding: BOX_PADDING.side,
        // The title sits above the box's body, where cytoscape takes no click unless its label
        // does: a click on the title selects the box, as on its border.
        "text-events": "yes",
      },
    },
    {
      // The Module tree view: every module is one filled box, open or not.
      selector: "node[?tree][!collapsed]",
      style: {
        "background-opacity": 1,
        "border-color": t.boxBorder,
        "border-width": 1,
        color: "data(textColor)",
        "text-valign": "center",
        "font-weight": "normal",
        padding: 0,
      },
    },
    { selector: "node[?isGroup][?edited]", style: { "border-color": EDIT_COLOR, "border-width": 3 } },
    { selector: "node[?isGroup][?pending]", style: { "border-color": EDIT_COLOR, "border-style": "dashed" } },
    {
      selector: "edge",
      style: {
        width: 1.2,
        "line-color": t.edge,
        "target-arrow-color": t.edge,
        "target-arrow-shape": "triangle",
        "curve-style": "bezier",
        "arrow-scale": 0.7,
      },
    },
    {
      selector: "edge[?tree]",
      style: { "curve-style": "taxi", "taxi-direction": "rightward", "target-arrow-shape": "none" },
    },
    {
      selector: "node:selected",
      style: { "overlay-color": t.select, "overlay-opacity": 0.3, "overlay-padding": 5 },
    },
    { selector: ".dim", style: { opacity: 0.2 } },
    { selector: ".running", style: { "underlay-color": "#00e5ff", "underlay-opacity": 0.9, "underlay-padding": 8 } },
  ];
}
