// The page's state over a saved page's state (fixtures "page", "watch_page": written by
// hookviz.Widget.save_html from real runs), behind the saved page's stand-in model (saved.js).
import { savedModel } from "../src/saved.js";
import { ViewState } from "../src/view_state.js";
import { payload } from "./fixtures.js";

/**
 * A ViewState over the saved page `name` with `changes` to its traitlets. `sent` collects what
 * the page asks Python for (the stand-in model of a saved page answers every request with its
 * note instead). `static_note: ""` makes it a notebook's page, with a kernel.
 */
export function pageState(name = "page", changes = {}) {
  const model = savedModel({ ...payload(name), ...changes });
  const sent = [];
  model.send = (msg) => sent.push(msg);
  return { state: new ViewState(model), model, sent };
}
