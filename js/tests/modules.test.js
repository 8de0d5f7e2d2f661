// The page is small modules with one job each, wired by index.js (docs/architecture.md lists
// them): no module is a room of its own, and the pure ones (the page's rules) touch no DOM.
import { readdirSync, readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

const dir = fileURLToPath(new URL("../src/", import.meta.url));
const sources = Object.fromEntries(
  readdirSync(dir)
    .filter((f) => f.endsWith(".js"))
    .map((f) => [f, readFileSync(dir + f, "utf8")]),
);
const lines = (f) => sources[f].split("\n").length - 1;

// The rules and arithmetic of the page: what they read is the payload, what they give is data.
const PURE = [
  "collapse.js",
  "colors.js",
  "find.js",
  "findings.js",
  "graph_elements.js",
  "graph_summary.js",
  "heatmap_figure.js",
  "layout.js",
  "names.js",
  "numbers.js",
  "replay_state.js",
  "view_state.js",
  "viewport.js",
  "visible_graph.js",
];

describe("the page's modules", () => {
  it("index.js wires the parts and builds no element of its own", () => {
    expect(lines("index.js")).toBeLessThanOrEqual(150);
    expect(sources["index.js"]).not.toMatch(/\bh\(|document\.|createElement|addEventListener|querySelector/);
  });

  it("no module is over 400 lines", () => {
    const sizes = Object.keys(sources).map((f) => [f, lines(f)]);
    expect(sizes.length).toBeGreaterThan(30);
    expect(sizes.filter(([, n]) => n > 400)).toEqual([]);
  });

  it("the pure modules touch no DOM and import only pure modules", () => {
    const dom = /\bdocument\b|\bwindow\b|HTMLElement|getComputedStyle|requestAnimationFrame|ResizeObserver/;
    const checked = PURE.filter((f) => {
      expect(sources[f], f).toBeDefined();
      expect(sources[f], f).not.toMatch(dom);
      const imports = [...sources[f].matchAll(/from "\.\/([\w.]+)"/g)].map((m) => m[1]);
      expect(
        imports.filter((i) => !PURE.includes(i)),
        f,
      ).toEqual([]);
      return true;
    });
    expect(checked.length).toBe(PURE.length);
  });
});
