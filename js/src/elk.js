// ELK in a web worker. cytoscape-elk imports "elkjs/lib/elk.bundled.js", which runs ELK on the
// page's main thread; the build (build.mjs) points that import here instead, so layouts of large
// graphs do not freeze the notebook. One shared worker serves every layout (cytoscape-elk makes a
// new ELK per layout run), and it starts warming up as soon as this module loads.
import ELKApi from "elkjs/lib/elk-api.js";
import workerSource from "elkjs/lib/elk-worker.min.js";
import { copyLayout } from "./logic.js";

let shared = null;
let url = null;

function makeWorker() {
  url ??= URL.createObjectURL(new Blob([workerSource], { type: "text/javascript" }));
  return new Worker(url);
}

// cytoscape-elk reads the positions from the objects it passed to layout() (elk.bundled.js lays
// them out in place); a worker gets a copy, so the result is copied back. Its graph also holds
// cytoscape elements under "_cyEle", which cannot be sent to a worker.
class WorkerELK {
  constructor() {
    this.api = new ELKApi({ workerFactory: makeWorker });
  }

  layout(graph, options) {
    const plain = JSON.parse(JSON.stringify(graph, (key, value) => (key === "_cyEle" ? undefined : value)));
    return this.api.layout(plain, options).then((result) => {
      copyLayout(graph, result);
      return graph;
    });
  }
}

export default class ELK {
  constructor() {
    shared ??= new WorkerELK();
    return shared;
  }
}

/** Start the worker and compile ELK's layered algorithm before the first real layout. */
export function warmUp() {
  try {
    return new ELK()
      .layout({
        id: "warm",
        layoutOptions: { algorithm: "layered" },
        children: [
          { id: "a", width: 1, height: 1 },
          { id: "b", width: 1, height: 1 },
        ],
        edges: [{ id: "e", sources: ["a"], targets: ["b"] }],
      })
      .catch(() => {});
  } catch {
    return Promise.resolve();
  }
}
