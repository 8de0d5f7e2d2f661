// @vitest-environment happy-dom
// The watch view over a saved page with a watch shown (fixture "watch_page", written by
// tests/test_watch_view.py from a real training loop with a GradScaler that skipped a step).
import { describe, expect, it } from "vitest";
import { WatchView } from "../src/watch_view.js";
import { payload } from "./fixtures.js";
import { pageState } from "./state.js";

function watchView(changes = { static_note: "" }) {
  const { state, model, sent } = pageState("watch_page", changes);
  return { watch: new WatchView(state), state, model, sent };
}

describe("the watch view", () => {
  it("shows the watch's kept steps, the step shown and the watch's notes", () => {
    const { watch } = watchView();
    watch.drawBar();
    const view = payload("watch_page").watch_view;
    expect(watch.el.hidden).toBe(false);
    expect(watch.bar.slider.max).toBe(String(view.steps.length - 1));
    expect(watch.bar.slider.value).toBe(String(view.index));
    expect(watch.bar.label.textContent.startsWith(`${view.step} (${view.index + 1}/${view.steps.length} kept)`)).toBe(
      true,
    );
    expect([...watch.bar.notes.children].map((li) => li.textContent)).toEqual(view.notes);
    expect([...watch.bar.parts.children].map((li) => li.textContent)).toEqual(view.parts);
  });

  it("asks the kernel for a step, and goes back to the run", () => {
    const { watch, sent } = watchView();
    watch.drawBar();
    const view = payload("watch_page").watch_view;
    watch.bar.slider.value = "0";
    watch.bar.slider.dispatchEvent(new Event("input"));
    watch.el.querySelector(".hv-watch-close").click();
    expect(sent).toEqual([{ type: "watch_step", step: view.steps[0] }, { type: "hide_watch" }]);
  });

  it("turns its controls off in a saved page, and hides with no watch shown", () => {
    const { watch, model } = watchView({});
    expect([...watch.el.querySelectorAll("input, select, button")].every((c) => c.disabled)).toBe(true);
    model.set("watch_view", {});
    watch.drawBar();
    expect(watch.el.hidden).toBe(true);
  });

  it("draws the heatmap only once the page is attached", () => {
    const { watch } = watchView();
    watch.drawHeatmap();
    expect(watch.heatmap.hvDraw).toBeUndefined();
    watch.attached = true;
    watch.drawHeatmap();
    expect(watch.heatmap.hvDraw).toBe(1); // a plotly draw is asked for
    watch.destroy();
  });
});
