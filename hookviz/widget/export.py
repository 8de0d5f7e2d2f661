"""One self-contained HTML file of a widget: opens in a browser with no kernel and no network.

The file holds the widget's own bundle (``static/widget.js``, base64), the run's state as JSON and
the bundle's loader (``static/saved_page.js``, built from ``js/src/saved_page.js``). The page runs
the notebook's own code: the view (boxes, selection, search, replay, chart) is the page's anyway,
and a stand-in for the kernel in the bundle (``js/src/saved.js``) answers a selection with the
inspector saved here. Edits and re-run need Python, so the page disables them and says why.
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
    state = {name: getattr(widget, name) for name in widget.keys if not name.startswith("_")}
    state = {k: v for k, v in state.items() if k not in ("layout", "comm", "tabbable", "tooltip")}
    state["static_note"] = STATIC_NOTE
    state["__inspectors"] = inspectors_json(widget)
    text = _script_json(state)
    static = Path(widget_data.__file__).parent / "static"
    esm = base64.b64encode((static / "widget.js").read_bytes())
    loader = (static / "saved_page.js").read_text(encoding="utf-8")
    page = _PAGE.format(title=html.escape(title), state=text, esm=esm.decode("ascii"), shim=loader)
    target = Path(path)
    target.write_text(page, encoding="utf-8")
    return target
