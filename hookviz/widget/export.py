"""One self-contained HTML file of a widget: opens in a browser with no kernel and no network.

The file holds the widget's own bundle (``static/widget.js``, base64) and the run's state as JSON;
a small stand-in for the anywidget model answers the page's requests from that state: selecting
shows an inspector recorded here, boxes open and close, replay and chart work. Edits and re-run
need Python, so the page disables them and says why.
"""

from __future__ import annotations

import base64
import html
import json
from pathlib import Path

from hookviz.widget import payload as widget_data

# Values of more elements than this are left out of the exported inspectors (their statistics
# and histogram stay), which keeps the file small.
EXPORT_VALUE_LIMIT = 256

STATIC_NOTE = (
    "Saved page: no Python kernel behind it, so edits and re-run are off. "
    "Open the notebook to change gradients."
)

# The stand-in model: anywidget's get/set/on/off/send/save_changes over the saved state. The
# expansion rules mirror hookviz.widget.tree (open one level; search opens the boxes around a
# match); everything else that needs Python answers with STATIC_NOTE.
_SHIM = r"""
const state = JSON.parse(document.getElementById("hookviz-state").textContent);
const inspectors = state.__inspectors; delete state.__inspectors;
const listeners = {};
const emit = (name) => (listeners["change:" + name] || []).forEach((fn) => fn());
const set = (name, value) => { state[name] = value; emit(name); };
const groups = (state.graph && state.graph.groups) || [];
const childrenOf = (m) => groups.filter((g) => g.parent === "group:" + m).map((g) => g.module);
const parentOf = (m) => (m.includes(".") ? m.slice(0, m.lastIndexOf(".")) : null);
const openOne = (list, m) => [...new Set([...list.filter((x) => x !== m), ...childrenOf(m)])].sort();
const reveal = (module, itself) => {
  const chain = [];
  for (let m = itself ? module : parentOf(module); m; m = parentOf(m)) chain.unshift(m);
  let list = state.collapsed || [];
  for (const m of chain) if (list.includes(m)) list = openOne(list, m);
  set("collapsed", list);
};
const select = (id, doReveal) => {
  const data = inspectors[id] || inspectors["module:" + id];
  if (!data) { set("errors", { ...state.errors, select: `${id} was not saved in this page` }); return; }
  if (doReveal) {
    const node = state.graph.nodes.find((n) => n.id === data.id);
    reveal(node ? node.module : data.module, !!node);
  }
  set("selected", data.id); set("inspector", data);
};
const before = (a, b) => { for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return a[i] < b[i]; return false; };
const find = (query) => {
  const q = query.trim().toLowerCase();
  const names = [...groups.map((g) => [g.module, 0]), ...state.graph.nodes.map((n) => [n.id, 1])];
  let best = null;
  for (const [name, kind] of names) {
    const l = name.toLowerCase();
    if (!q || !l.includes(q)) continue;
    const rank = [l !== q, !(l.endsWith("." + q) || l === q), name.length, kind, name];
    if (!best || before(rank, best)) best = rank;
  }
  return best && best[4];
};
const model = {
  get: (name) => state[name],
  set: (name, value) => set(name, value),
  save_changes: () => {},
  on: (event, fn) => { (listeners[event] ||= []).push(fn); },
  off: (event, fn) => { listeners[event] = (listeners[event] || []).filter((f) => f !== fn); },
  send: (msg) => {
    const note = () => set("errors", { ...state.errors, rerun: NOTE });
    switch (msg.type) {
      case "select": return select(msg.node, !msg.replay);
      case "search": { const hit = find(msg.query || ""); return hit ? select(hit, true) : set("errors", { ...state.errors, search: `nothing is named like '${msg.query}'` }); }
      case "collapse_all": return set("collapsed", groups.filter((g) => !g.parent).map((g) => g.module));
      case "expand_all": return set("collapsed", []);
      case "set_view": { state.view = msg.view; set("collapsed", msg.view === "modules" ? state.__tree_collapsed : state.__first_collapsed); return emit("view"); }
      default: return note();
    }
  },
};
const NOTE = state.static_note;
const bytes = Uint8Array.from(atob(document.getElementById("hookviz-esm").textContent), (c) => c.charCodeAt(0));
const url = URL.createObjectURL(new Blob([bytes], { type: "text/javascript" }));
const widget = (await import(url)).default;
widget.render({ model, el: document.getElementById("hookviz") });
"""

_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{title}</title>
<style>body {{ margin: 12px; font-family: sans-serif; }}</style>
</head>
<body>
<div id="hookviz"></div>
<script type="application/json" id="hookviz-state">{state}</script>
<script type="text/plain" id="hookviz-esm">{esm}</script>
<script type="module">{shim}</script>
</body>
</html>
"""


def _trim_values(data):
    """A copy of inspector JSON without the values of tensors larger than EXPORT_VALUE_LIMIT."""
    if isinstance(data, dict):
        out = {k: _trim_values(v) for k, v in data.items()}
        if "numel" in out and "value" in out and (out["numel"] or 0) > EXPORT_VALUE_LIMIT:
            out["value"] = None
        return out
    if isinstance(data, list):
        return [_trim_values(v) for v in data]
    return data


def inspectors_json(widget) -> dict:
    """Every node's and module's inspector, by the id the page asks for."""
    run, baseline = widget.run, widget.baseline
    out = {}
    for node_id in run.nodes:
        out[node_id] = _trim_values(widget_data.node_inspector_json(run, node_id, baseline))
    for call in run.calls:
        key = widget_data.MODULE_PREFIX + call.module
        if key not in out:
            data = widget_data.module_inspector_json(run, call.module, widget._sites(call.module), baseline)
            out[key] = _trim_values(data)
    return out


# In JSON, these three characters occur only inside strings, where \uXXXX stands for them: escaped
# so, no text in the state (a module named "</script>" or "<!--<script>") can close the page's
# <script> element or open a comment in it (https://html.spec.whatwg.org/#restrictions-for-contents-of-script-elements).
_SCRIPT_ESCAPES = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026"})


def _script_json(state: dict) -> str:
    """``state`` as JSON that is safe inside an HTML ``<script>`` element: no ``<``, ``>`` or ``&``."""
    return json.dumps(state, allow_nan=False, separators=(",", ":")).translate(_SCRIPT_ESCAPES)


def save_html(widget, path, title: str = "hookviz") -> Path:
    """Write ``widget``'s current view to one HTML file; returns its path.

    The file needs no kernel and no network: the bundle and the state are inside it. Graph,
    inspector, replay, chart and search work; edits and re-run are disabled with a note.
    """
    from hookviz.widget.tree import default_collapsed, tree_collapsed

    state = {name: getattr(widget, name) for name in widget.keys if not name.startswith("_")}
    state = {k: v for k, v in state.items() if k not in ("layout", "comm", "tabbable", "tooltip")}
    state["static_note"] = STATIC_NOTE
    state["__first_collapsed"] = default_collapsed(widget.graph, widget.visible_budget)
    state["__tree_collapsed"] = tree_collapsed(widget.graph.get("groups", []))
    state["__inspectors"] = inspectors_json(widget)
    text = _script_json(state)
    esm = base64.b64encode((Path(widget_data.__file__).parent / "static" / "widget.js").read_bytes())
    page = _PAGE.format(title=html.escape(title), state=text, esm=esm.decode("ascii"), shim=_SHIM)
    target = Path(path)
    target.write_text(page, encoding="utf-8")
    return target
