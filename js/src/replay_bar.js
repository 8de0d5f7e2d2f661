// The replay bar: step through the recorded backward order, node by node.
import { fill, h } from "./dom.js";

/**
 * Replay bar: an explicit on/off switch, play/pause and a slider over the recorded backward
 * execution order. Off (the default), the graph shows the whole run and nothing is faded; on, the
 * bar is marked and says that the nodes not run yet are faded. onStep(k) gets the step shown, -1
 * when replay is off.
 */
export class ReplayBar {
  constructor({ onStep }) {
    const el = h("div", { class: "hv-replay" });
    this.el = el;
    this.onStep = onStep;
    this.steps = [];
    this.k = -1;
    this.timer = null;
    this.switch = h(
      "button",
      { class: "hv-replay-toggle", "aria-pressed": "false", onclick: () => this.setOn(!this.on) },
      "Replay: off",
    );
    this.play = h("button", { class: "hv-play", onclick: () => this.toggle() }, "▶ Play");
    this.slider = h("input", {
      class: "hv-slider",
      type: "range",
      min: "0",
      max: "0",
      value: "0",
      "aria-label": "backward step",
    });
    this.slider.addEventListener("input", () => {
      this.pause();
      this.set(Number(this.slider.value));
    });
    this.label = h("span", { class: "hv-step" }, "");
    this.state = h("div", { class: "hv-replay-state" });
    this.hooks = h("div", { class: "hv-step-hooks" });
    fill(el, h("div", { class: "hv-row" }, this.switch, this.play, this.slider, this.label), this.state, this.hooks);
    this.set(-1, false);
  }

  /** Whether replay is on (a step is shown and the rest of the graph faded). */
  get on() {
    return this.k >= 0;
  }

  setSteps(steps) {
    this.steps = steps || [];
    this.slider.max = String(Math.max(0, this.steps.length - 1));
    if (this.k >= this.steps.length) this.k = -1;
    this.set(this.k, false);
  }

  /** Turn replay on (at its first step, or where it was) or off (the whole run, nothing faded). */
  setOn(on) {
    if (!on) this.pause();
    this.set(on && this.steps.length ? Math.max(0, this.k) : -1);
  }

  set(k, notify = true) {
    this.k = this.steps.length ? k : -1;
    const on = this.k >= 0;
    const s = on ? this.steps[this.k] : null;
    this.el.classList.toggle("hv-replay-on", on);
    this.switch.textContent = on ? "Replay: on" : "Replay: off";
    this.switch.setAttribute("aria-pressed", String(on));
    this.switch.classList.toggle("hv-on", on);
    this.switch.title = on ? "turn replay off: show the whole run" : "step through backward, node by node";
    this.switch.disabled = !this.steps.length;
    this.play.disabled = !this.steps.length;
    // Moving the slider is a way to turn replay on too (the switch then says "on").
    this.slider.disabled = !this.steps.length;
    this.slider.value = String(Math.max(0, this.k));
    this.label.textContent = s
      ? `step ${this.k + 1}/${this.steps.length}: ${s.op} (${s.node})`
      : `${this.steps.length} backward steps recorded`;
    this.state.textContent = on ? "Replay on: the graph fades the nodes backward has not reached yet." : "";
    this.state.hidden = !on;
    fill(
      this.hooks,
      s && s.hooks && s.hooks.length
        ? s.hooks.map((x) =>
            h(
              "div",
              { class: `hv-fired hv-fired-${x.kind}` },
              `${x.kind === "edit" ? "edit" : "hook"} fired: ${x.detail}`,
            ),
          )
        : s
          ? h("span", { class: "hv-muted" }, "only hookviz's recording hook fired here")
          : null,
    );
    if (notify) this.onStep(this.k);
  }

  toggle() {
    if (this.timer) this.pause();
    else this.start();
  }

  /** Play from the step shown (from the first when replay was off or at the end); stops at the last. */
  start() {
    if (!this.steps.length) return;
    if (this.k < 0 || this.k >= this.steps.length - 1) this.set(0);
    this.play.textContent = "⏸ Pause";
    this.timer = setInterval(() => {
      if (this.k + 1 >= this.steps.length) {
        this.pause();
        return;
      }
      this.set(this.k + 1);
    }, 700);
  }

  pause() {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    this.play.textContent = "▶ Play";
  }

  destroy() {
    this.pause();
  }
}
