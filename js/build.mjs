// Bundle js/src into one ESM file inside the Python package (committed, so users need no Node).
import { readFile } from "node:fs/promises";
import { build } from "esbuild";

// ELK runs in a web worker (src/elk.js) started from elkjs's worker script, bundled as text.
const workerAsText = {
  name: "elk-worker-as-text",
  setup(b) {
    b.onLoad({ filter: /elk-worker\.min\.js$/ }, async (args) => ({
      contents: await readFile(args.path, "utf8"),
      loader: "text",
    }));
  },
};

// Plotly as the text of an ES module (src/chart.js evaluates it on the first chart, not on load).
const plotly = await build({
  stdin: { contents: 'export { default } from "plotly.js-cartesian-dist-min";', resolveDir: "." },
  bundle: true,
  format: "esm",
  minify: true,
  target: "es2020",
  legalComments: "eof",
  write: false,
});
const plotlyAsText = {
  name: "plotly-as-text",
  setup(b) {
    b.onResolve({ filter: /^plotly-esm-text$/ }, () => ({ path: "plotly-esm-text", namespace: "plotly-text" }));
    b.onLoad({ filter: /.*/, namespace: "plotly-text" }, () => ({
      contents: plotly.outputFiles[0].text,
      loader: "text",
    }));
  },
};

await build({
  entryPoints: ["src/index.js"],
  bundle: true,
  format: "esm",
  minify: true,
  target: "es2020",
  loader: { ".css": "text" },
  legalComments: "eof",
  plugins: [workerAsText, plotlyAsText],
  outfile: "../hookviz/widget/static/widget.js",
  logLevel: "info",
});

// The saved page's loader (hookviz.widget.export.save_html puts it in the page as it is).
await build({
  entryPoints: ["src/saved_page.js"],
  format: "esm",
  minify: true,
  target: "es2020",
  outfile: "../hookviz/widget/static/saved_page.js",
  logLevel: "info",
});
