// The graph view's viewport arithmetic: what a fit frames, and how far a wheel event zooms.
import { describe, expect, it } from "vitest";
import { FIT_PADDING, unionBox, viewportFor, wheelZoomFactor } from "../src/viewport.js";

describe("the viewport", () => {
  it("frames the box around rectangles given by their centres", () => {
    const box = unionBox([
      { x: 10, y: 20, width: 20, height: 10 },
      { x: 100, y: 200, width: 40, height: 20 },
    ]);
    expect(box).toEqual({ x1: 0, y1: 15, w: 120, h: 195 });
    expect(unionBox([])).toEqual({ x1: 0, y1: 0, w: 1, h: 1 });
  });

  it("fits a box, centred, never zoomed in past maxZoom", () => {
    const box = { x1: 0, y1: 0, w: 100, h: 50 };
    const { zoom, pan } = viewportFor(box, 1000, 500, 1.4);
    expect(zoom).toBe(1.4);
    expect(pan).toEqual({ x: 500 - 1.4 * 50, y: 250 - 1.4 * 25 });
    const fitted = viewportFor(box, 232, 500, 4);
    expect(fitted.zoom).toBe((232 - 2 * FIT_PADDING) / 100);
  });

  it("shows a box too large to read at minZoom from its top left", () => {
    const { zoom, pan } = viewportFor({ x1: 10, y1: 20, w: 10000, h: 10000 }, 800, 600, 1.4, 0.7);
    expect(zoom).toBe(0.7);
    expect(pan).toEqual({ x: FIT_PADDING - 0.7 * 10, y: FIT_PADDING - 0.7 * 20 });
  });

  it("zooms as d3-zoom does per wheel event: pixels, lines, pages and a pinch", () => {
    expect(wheelZoomFactor({ deltaY: -100, deltaMode: 0 })).toBeCloseTo(2 ** 0.2);
    expect(wheelZoomFactor({ deltaY: 3, deltaMode: 1 })).toBeCloseTo(2 ** -0.15);
    expect(wheelZoomFactor({ deltaY: 1, deltaMode: 2 })).toBe(0.5);
    expect(wheelZoomFactor({ deltaY: -10, deltaMode: 0, ctrlKey: true })).toBeCloseTo(2 ** 0.2);
  });
});
