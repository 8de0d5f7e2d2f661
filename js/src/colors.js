// The page's own colours and the colour rules it draws by: the edit and user-hook marks, the
// text colour that reads on a fill, the watch overlay's colour of an element. A norm's colour is
// Python's (hookviz.colors), sent with the payload. No DOM.

// hookviz.colors.EDIT_COLOR and HOOK_COLOR (tests/test_colors.py checks they are the same).
export const EDIT_COLOR = "#d500f9";
export const HOOK_COLOR = "#795548";
// hookviz.colors.SELECTION_COLOR: the selection's overlay where the theme gives no brand colour.
export const SELECTION_COLOR = "#1e88e5";

/** Black or white, whichever reads better on a background colour "#rrggbb" (WCAG luminance). */
export function textColorOn(background) {
  const m = /^#([0-9a-f]{2})([0-9a-f]{2})([0-9a-f]{2})$/i.exec(background || "");
  if (!m) return "#212121";
  const [r, g, b] = m.slice(1).map((x) => {
    const c = parseInt(x, 16) / 255;
    return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4;
  });
  const luminance = 0.2126 * r + 0.7152 * g + 0.0722 * b;
  return luminance > 0.2 ? "#111111" : "#ffffff";
}

/**
 * Colour of a drawn element in the watch view: the colour of the watch's norm for that element id
 * (parameter leaf, "group:<module>"), which Python sent; `missing_color` when the watch has no
 * value for it. overlay: {node_colors: {id: "#rrggbb"}, missing_color}.
 */
export function overlayColor(id, overlay) {
  const colors = overlay?.node_colors || {};
  return Object.prototype.hasOwnProperty.call(colors, id) ? colors[id] : overlay?.missing_color;
}
