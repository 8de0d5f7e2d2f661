// ELK in a web worker: layouts of any size never freeze the notebook. One shared worker serves
// every layout, and it starts warming up (compiling ELK's layered algorithm) as soon as this
// module loads. The worker's source is bundled as text (build.mjs) and started from a blob URL,
// so the widget needs no file besides its own bundle.
import ELKApi from "elkjs/lib/elk-api.js";
import workerSource from "elkjs/lib/elk-worker.min.js";

let shared = null;
let url = null;

function makeWorker() {
  url ??= URL.createObjectURL(new Blob([workerSource], { type: "text/javascript" }));
  return new Worker(url);
}

function elk() {
  shared ??= new ELKApi({ workerFactory: makeWorker });
  return shared;
}

/** Lay out an ELK JSON graph in the worker; resolves to the graph with x, y (relative to parents). */
export function elkLayout(graph) {
  return elk().layout(graph);
}

/** Start the worker and compile ELK's layered algorithm before the first real layout. */
export function warmUp() {
  try {
    return elkLayout({
      id: "warm",
      layoutOptions: { "elk.algorithm": "layered" },
      children: [
        { id: "a", width: 1, height: 1 },
        { id: "b", width: 1, height: 1 },
      ],
      edges: [{ id: "e", sources: ["a"], targets: ["b"] }],
    }).catch(() => {});
  } catch {
    return Promise.resolve();
  }
}
