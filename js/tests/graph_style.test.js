// @vitest-environment happy-dom
// How the graph view looks: the theme's colours read from JupyterLab's CSS variables (its defaults
// outside JupyterLab), and the marks of cytoscape's style sheet in the page's own colours.
import { describe, expect, it } from "vitest";
import { EDIT_COLOR, HOOK_COLOR } from "../src/colors.js";
import { MIN_LABEL_PX, styleFor, theme } from "../src/graph_style.js";

describe("the graph's style", () => {
  it("reads the theme's colours, with defaults outside JupyterLab", () => {
    const el = document.createElement("div");
    el.style.setProperty("--jp-brand-color1", "#123456");
    document.body.append(el);
    const t = theme(el);
    expect(t.select).toBe("#123456");
    expect(t.text).toBe("#212121");
  });

  it("marks edited and hooked elements in the page's colours, hides labels too small to read", () => {
    const style = Object.fromEntries(styleFor(theme(document.body)).map((s) => [s.selector, s.style]));
    expect(style["node[?edited]"]["border-color"]).toBe(EDIT_COLOR);
    expect(style["node[?hooks]"]["border-color"]).toBe(HOOK_COLOR);
    expect(style["node[?hooks]"]["border-style"]).toBe("dashed");
    expect(style.node["min-zoomed-font-size"]).toBe(MIN_LABEL_PX);
    expect(style["node:selected"]["overlay-color"]).toBe(theme(document.body).select);
  });
});
