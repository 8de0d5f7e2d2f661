// The graph payloads the JS tests read: written by the Python test run from real recorded runs
// (tests/test_widget.py::test_the_js_tests_read_payloads_written_from_real_runs), never by hand,
// so the page's rules are tested on what hookviz sends today. CI runs pytest first (.ci/run).
import { existsSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

/** The payload `name` (graphs: canonical, gpt2, deep2, deep6, deep12, deep40; page, watch_page: a
 * saved page's whole state, of a run and of a watch shown on it; watch_rows: a watch
 * heatmap with its step rows, from tests/test_watch_view.py), parsed afresh. */
export function payload(name) {
  // A path, not a URL: a DOM environment (happy-dom) replaces the global URL with one that
  // resolves no file URL.
  const path = join(dirname(fileURLToPath(import.meta.url)), "fixtures", `${name}.json`);
  if (!existsSync(path))
    throw new Error(
      `${path} is missing: the Python tests write it from a real run; run ` +
        "`python -m pytest tests/test_widget.py -k js_tests` (watch_rows: tests/test_watch_view.py -k rows) " +
        "first (CI runs pytest before vitest)",
    );
  return JSON.parse(readFileSync(path, "utf8"));
}
