// The model of a saved page (hookviz.Widget.save_html): anywidget's get/set/on/off/send/
// save_changes over the state saved in the file, so the saved page runs the same render() as the
// notebook. The view (boxes, selection, search, view kind) is the page's own anyway; this model
// only stands in for the kernel's answers: a selection gets the inspector saved for it (if any),
// and a request that needs Python gets the page's note that there is none.

/**
 * A stand-in anywidget model over `state` (the widget's traitlets as saved, plus `__inspectors`:
 * element id -> the kernel's inspector JSON saved for it, and `static_note`).
 */
export function savedModel(state) {
  const { __inspectors: inspectors = {}, ...values } = state;
  const listeners = new Map();
  const emit = (name) => (listeners.get(`change:${name}`) || []).forEach((fn) => fn());
  const set = (name, value) => {
    values[name] = value;
    emit(name);
    // What the kernel does when the page selects: its inspector, when the file has it.
    if (name === "selected") {
      values.inspector = inspectors[value] || {};
      emit("inspector");
    }
  };
  return {
    get: (name) => values[name],
    set,
    save_changes: () => {},
    on: (event, fn) => listeners.set(event, [...(listeners.get(event) || []), fn]),
    off: (event, fn) =>
      listeners.set(
        event,
        (listeners.get(event) || []).filter((f) => f !== fn),
      ),
    // Every request sent to a kernel (edits, re-run, details) is answered by the page's note.
    send: () => set("errors", { ...(values.errors || {}), rerun: values.static_note }),
  };
}
