// The legend under the graph: the colour scale Python sent and the marks the page draws.
import { h } from "./dom.js";
import { EDIT_COLOR, HOOK_COLOR, SELECTION_COLOR } from "./colors.js";

/** The legend's parts for `spec` ({title, stops: [{color, text}], keys: [{color, text}]}:
 * hookviz.colors.legend, or the watch view's). */
export function legend(spec) {
  const stops = spec?.stops || [];
  const sw = (color, text, extra = "") =>
    h("span", { class: "hv-sw" }, h("i", { style: `background:${color};${extra}` }), text);
  return [
    h("div", { class: "hv-legend-title" }, spec?.title || ""),
    h("div", {
      class: "hv-legend-bar",
      style: `background:linear-gradient(to right, ${stops.map((s) => s.color).join(",")})`,
    }),
    h(
      "div",
      { class: "hv-legend-ticks" },
      stops.map((s) => h("span", {}, s.text)),
    ),
    h(
      "div",
      { class: "hv-legend-keys" },
      (spec?.keys || []).map((k) => sw(k.color, k.text)),
      sw("#fff", "edited", `border:3px solid ${EDIT_COLOR}`),
      sw("#fff", "edit not yet run", `border:3px dashed ${EDIT_COLOR}`),
      sw("#fff", "user hook", `border:3px dashed ${HOOK_COLOR}`),
      sw(SELECTION_COLOR, "selected", "opacity:0.5"),
      h(
        "span",
        { class: "hv-sw" },
        "▭ closed module box (click opens) · ≡ identical blocks · dotted border: beyond the scale",
      ),
    ),
  ];
}
