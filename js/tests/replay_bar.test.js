// @vitest-environment happy-dom
// The replay bar over the recorded backward order of a saved page (fixture "page").
import { afterEach, describe, expect, it, vi } from "vitest";
import { ReplayBar } from "../src/replay_bar.js";
import { payload } from "./fixtures.js";

afterEach(() => vi.useRealTimers());
const steps = payload("page").replay;

function replayBar() {
  const shown = [];
  const bar = new ReplayBar({ onStep: (k) => shown.push(k) });
  bar.setSteps(steps);
  return { bar, shown };
}

describe("the replay bar", () => {
  it("is off at first: the whole run, nothing faded", () => {
    const { bar, shown } = replayBar();
    expect([bar.on, bar.switch.textContent, bar.state.hidden]).toEqual([false, "Replay: off", true]);
    expect(shown).toEqual([]);
  });

  it("turns on at the first step and names the step's Node", () => {
    const { bar, shown } = replayBar();
    bar.switch.click();
    expect(shown).toEqual([0]);
    expect(bar.label.textContent).toBe(`step 1/${steps.length}: ${steps[0].op} (${steps[0].node})`);
    expect(bar.el.classList.contains("hv-replay-on")).toBe(true);
    bar.switch.click();
    expect(shown).toEqual([0, -1]);
  });

  it("plays to the last step and stops there", () => {
    vi.useFakeTimers();
    const { bar, shown } = replayBar();
    bar.play.click();
    vi.advanceTimersByTime(700 * (steps.length + 2));
    expect(shown).toEqual(steps.map((_, k) => k));
    expect(bar.play.textContent).toBe("▶ Play");
    bar.destroy();
  });
});
