// Vitest reads what esbuild bundles as text (build.mjs) as text too: ELK's worker script, plotly's
// module and the page's style sheet, so the tests import the page's modules as the bundle holds them.
import { fileURLToPath } from "node:url";
import { defineConfig } from "vitest/config";

const here = (path) => fileURLToPath(new URL(path, import.meta.url));

export default defineConfig({
  resolve: {
    alias: [
      {
        find: /^elkjs\/lib\/elk-worker\.min\.js$/,
        replacement: `${here("node_modules/elkjs/lib/elk-worker.min.js")}?raw`,
      },
      {
        find: /^plotly-esm-text$/,
        replacement: `${here("node_modules/plotly.js-cartesian-dist-min/plotly-cartesian.min.js")}?raw`,
      },
      { find: /^\.\/style\.css$/, replacement: `${here("src/style.css")}?raw` },
    ],
  },
});
