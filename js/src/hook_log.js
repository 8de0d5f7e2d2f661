// What the user's hooks printed, as a run loaded from an older file kept it.
import { add, h } from "./dom.js";

/**
 * What the user's hooks printed, kept only in runs loaded from files of hookviz versions that
 * copied it (hookviz.Run.log): hooks print where they print, in the cell's output, so a new run
 * has nothing here and the panel is hidden.
 */
export function renderLog(el, log) {
  el.replaceChildren();
  el.hidden = !log || !log.length;
  if (el.hidden) return;
  add(
    el,
    h("h4", {}, `Printed by hooks when this run was recorded (${log.length})`),
    h(
      "pre",
      { class: "hv-log-text" },
      log.map((e) => `[${e.hook}${e.where ? " @ " + e.where : ""}] ${e.text}`).join("\n"),
    ),
  );
}
