// The viewport arithmetic of the graph view: the zoom and pan that frame a box, the box around
// rectangles, the zoom of a wheel event. No DOM.

export const FIT_PADDING = 16;
// Zoom per wheel event, as d3-zoom's default: 2^(-deltaY x 0.002) for pixel deltas (a mouse notch
// of 100 px: x1.15), lines x 0.05, pages x 1; a pinch (ctrlKey) ten times faster.
export const wheelZoomFactor = (e) =>
  2 ** (-e.deltaY * (e.deltaMode === 1 ? 0.05 : e.deltaMode ? 1 : 0.002) * (e.ctrlKey ? 10 : 1));

/**
 * The zoom and pan that fit a model-space box into the view, never above maxZoom. Below minZoom
 * the box is shown at minZoom instead: centred along each side that fits, else from its top
 * (where data enters, the drawing flows down) or left edge.
 */
export function viewportFor(box, width, height, maxZoom, minZoom = 0) {
  const fit = Math.min(
    maxZoom,
    (width - 2 * FIT_PADDING) / Math.max(1, box.w),
    (height - 2 * FIT_PADDING) / Math.max(1, box.h),
  );
  const zoom = Math.max(fit, Math.min(minZoom, maxZoom));
  const place = (start, size, room) =>
    zoom * size <= room - 2 * FIT_PADDING ? room / 2 - zoom * (start + size / 2) : FIT_PADDING - zoom * start;
  return { zoom, pan: { x: place(box.x1, box.w, width), y: place(box.y1, box.h, height) } };
}

/** The model-space box {x1, y1, w, h} around rectangles {x, y (centre), width, height}. */
export function unionBox(rects) {
  let x1 = Infinity;
  let y1 = Infinity;
  let x2 = -Infinity;
  let y2 = -Infinity;
  for (const p of rects) {
    x1 = Math.min(x1, p.x - p.width / 2);
    x2 = Math.max(x2, p.x + p.width / 2);
    y1 = Math.min(y1, p.y - p.height / 2);
    y2 = Math.max(y2, p.y + p.height / 2);
  }
  if (!Number.isFinite(x1)) return { x1: 0, y1: 0, w: 1, h: 1 };
  return { x1, y1, w: x2 - x1, h: y2 - y1 };
}
