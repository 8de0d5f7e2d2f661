// Bundle js/src into one ESM file inside the Python package (committed, so users need no Node).
import { readFile } from "node:fs/promises";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";

// cytoscape-elk runs ELK on the main thread (elk.bundled.js); point it at src/elk.js, which runs
// the same ELK in a web worker built from elk-worker.min.js (bundled as text).
const elkInWorker = {
  name: "elk-in-worker",
  setup(b) {
    b.onResolve({ filter: /^elkjs\/lib\/elk\.bundled\.js$/ }, () => ({
      path: fileURLToPath(new URL("./src/elk.js", import.meta.url)),
    }));
    b.onLoad({ filter: /elk-worker\.min\.js$/ }, async (args) => ({
      contents: await readFile(args.path, "utf8"),
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
  plugins: [elkInWorker],
  outfile: "../hookviz/static/widget.js",
  logLevel: "info",
});
