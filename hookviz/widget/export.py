"""One self-contained HTML file of a widget: opens in a browser with no kernel and no network.

The file holds the widget's own bundle (``static/widget.js``, base64), the run's state as JSON and
the bundle's loader (``static/saved_page.js``, built from ``js/src/saved_page.js``). The page runs
the notebook's own code: the view (boxes, selection, search, replay, chart) is the page's anyway,
and a stand-in for the kernel in the bundle (``js/src/saved.js``) answers a selection with the
inspector saved here. Edits and re-run need Python, so the page disables them and says why.
"""

from __future__ import annotations

import base64
import gzip
import html
import json
from pathlib import Path

from hookviz.advice import advice
from hookviz.errors import HookvizError, WatchError
from hookviz.files import paths
from hookviz.widget.inspector import module_inspector_json, node_inspector_json
from hookviz.widget.payload import json_float
from hookviz.widget.selection import with_watch
from hookviz.widget.tree import MODULE_PREFIX

# What a saved page keeps of each tensor's values (``save_html(values=...)``): "opened", the
# values of the tensors in the inspector on screen and in the pinned ones only (every other tensor
# keeps its statistics, histogram and overview); "all", every value the run recorded.
VALUES = ("opened", "all")
# Significant digits a saved page keeps: statistics are read as numbers, histogram edges as a
# range, overview cells as colours. The inspector shows 4 significant digits.
STATISTIC_DIGITS = 4
EDGE_DIGITS = 3
OVERVIEW_DIGITS = 2
# A saved page's histograms have at most this many bins (neighbouring bins of the run's 32 summed).
EXPORT_HISTOGRAM_BINS = 16
# A saved page's overview of a large 2-D tensor has at most this many blocks per side (the run
# keeps 32: the root mean square of the blocks under each, so it stays the RMS of the tensor).
EXPORT_OVERVIEW_BLOCKS = 12
# zero_fraction is not rounded: 4 digits would turn 64 non-zeros of 3.2 M (0.99998) into 1.0, and
# the page would say "zeros 100%" (the page's percentages never round a part to all or nothing).
_STATISTICS = ("norm", "mean", "min", "max")

# A saved page keeps the values of every tensor of at most this many elements, whatever
# ``values`` says: a reader who clicks x = [2, 3] sees [2, 3], not statistics of two numbers.
SMALL_TENSOR_ELEMENTS = 64

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


def _rounded(value, digits: int):
    """``value`` (a float, or "nan"/"inf" as json_float writes them) to ``digits`` significant digits."""
    return float(f"{value:.{digits}g}") if isinstance(value, float) else value


def _pooled_overview(overview: list) -> list:
    """An overview (rows of block RMS values) with at most EXPORT_OVERVIEW_BLOCKS blocks per side:
    the RMS of each group of blocks (sqrt of the mean of their squares), so it is still the RMS of
    the tensor's elements under it (up to unequal block sizes); rounded to OVERVIEW_DIGITS."""
    import torch
    import torch.nn.functional as F

    grid = torch.tensor([[float(v) for v in row] for row in overview], dtype=torch.float64)
    rows, columns = grid.shape
    if rows > EXPORT_OVERVIEW_BLOCKS or columns > EXPORT_OVERVIEW_BLOCKS:
        size = (min(rows, EXPORT_OVERVIEW_BLOCKS), min(columns, EXPORT_OVERVIEW_BLOCKS))
        grid = F.adaptive_avg_pool2d((grid * grid)[None], size)[0].sqrt()
    return [[json_float(_rounded(v, OVERVIEW_DIGITS)) for v in row] for row in grid.tolist()]


def _merged_histogram(histogram: dict) -> dict:
    """``{counts, edges}`` with neighbouring bins summed until at most EXPORT_HISTOGRAM_BINS are
    left (each merged bin spans the edges of the bins in it), edges to EDGE_DIGITS."""
    counts, edges = histogram["counts"], histogram["edges"]
    while len(counts) > EXPORT_HISTOGRAM_BINS:
        counts = [sum(counts[i : i + 2]) for i in range(0, len(counts), 2)]
        edges = edges[::2] if len(edges) % 2 else [*edges[::2], edges[-1]]
    return {"counts": counts, "edges": [_rounded(e, EDGE_DIGITS) for e in edges]}


def _compact_tensor(record: dict, keep_values: bool) -> dict:
    """A tensor's JSON (``TensorRecord.to_dict``) as a saved page keeps it: its statistics to
    STATISTIC_DIGITS, histogram edges to EDGE_DIGITS, a coarser overview, and its values when
    ``keep_values`` or when it has at most :data:`SMALL_TENSOR_ELEMENTS` elements (else the page
    shows its statistics, with no note: what the author chose to keep is no news to the reader);
    fields that say nothing (None, "", no pending fields) are left out (the page reads a missing
    field as absent)."""
    out = {}
    keep_values = keep_values or (record.get("numel") or 0) <= SMALL_TENSOR_ELEMENTS
    for name, value in record.items():
        if name == "value" and not keep_values:
            continue
        if name == "text" and not keep_values:  # a value's text goes with the value
            value = {key: shown for key, shown in value.items() if key != "value"}
        if name in _STATISTICS:
            value = _rounded(value, STATISTIC_DIGITS)
        elif name == "histogram" and value:
            value = _merged_histogram(value)
        elif name == "overview" and value:
            value = _pooled_overview(value)
        if value is None or value == "" or (name == "pending" and not value):
            continue
        out[name] = value
    return out


def _compact(data, keep_values: bool):
    """A copy of inspector JSON with every tensor record in it made compact (:func:`_compact_tensor`)."""
    if isinstance(data, dict):
        if "numel" in data and "dtype" in data and "shape" in data:
            return _compact_tensor(data, keep_values)
        return {k: _compact(v, keep_values) for k, v in data.items()}
    if isinstance(data, list):
        return [_compact(v, keep_values) for v in data]
    return data


def inspectors_json(widget, values: str = "opened", pinned=()) -> dict:
    """Every node's and module's inspector, by the id the page asks for, compact (see
    :func:`_compact_tensor`): tensor values only in the inspector on screen (``widget.selected``)
    and the ``pinned`` ids, or everywhere with ``values="all"``."""
    run, baseline = widget.run, widget.baseline
    if run is None:  # a watch shown alone: no graph, nothing to inspect
        return {}
    kept = {widget.selected, *pinned}
    out = {}
    for node_id in run.nodes:
        data = with_watch(widget, node_inspector_json(run, node_id, baseline))
        out[node_id] = _compact(data, values == "all" or node_id in kept)
    for call in run.calls:
        key = MODULE_PREFIX + call.module
        if key not in out:
            data = with_watch(
                widget, module_inspector_json(run, call.module, widget._sites(call.module), baseline)
            )
            out[key] = _compact(data, values == "all" or key in kept or call.module in kept)
    return out


# In JSON, these three characters occur only inside strings, where \uXXXX stands for them: escaped
# so, no text in the state (a module named "</script>" or "<!--<script>") can close the page's
# <script> element or open a comment in it (https://html.spec.whatwg.org/#restrictions-for-contents-of-script-elements).
_SCRIPT_ESCAPES = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026"})


def _script_json(state: dict) -> str:
    """``state`` as JSON that is safe inside an HTML ``<script>`` element: no ``<``, ``>`` or ``&``."""
    return json.dumps(state, allow_nan=False, separators=(",", ":")).translate(_SCRIPT_ESCAPES)


def save_html(widget, path, title: str = "hookviz", values: str = "opened", pinned=()) -> Path:
    """Write ``widget``'s current view to one HTML file; returns its path.

    A widget that follows a watch live (``hookviz.show(watch)`` on an open watch) is first brought
    up to the watch's latest kept step (:meth:`hookviz.widget.live.LiveFeed.wait_shown`), so the
    page shows the watch as it stands, not the last update its throttle let through.

    The file needs no kernel and no network: the bundle and the state are inside it. Graph,
    inspector, replay, chart and search work; edits and re-run are disabled with a note.
    Every tensor keeps its statistics, histogram and overview; its values (the numbers) are kept
    for every tensor of at most :data:`SMALL_TENSOR_ELEMENTS` (64) elements, and of larger ones
    for the inspector on screen and the ``pinned`` node ids or module names with
    ``values="opened"`` (the default), for every tensor the run recorded with ``values="all"``
    (GPT-2 small, 12 layers x 128 tokens: about 7.6 MB by default, 14 MB with "all").

    The file is written as :func:`hookviz.save` writes (:mod:`hookviz.files.paths`): to an exclusive
    temporary beside it, then renamed, never through a symlink (one at ``path`` is replaced), whole
    or not at all.

    Raises:
        HookvizError: ``values`` is not "opened" or "all".
        PathError (a HookvizError and an OSError): ``path`` names no file: it is empty, ends with a
            separator, is ``.``, ``..`` or a folder, or its folder does not exist.
        OSError: the file cannot be written (the folder is not writable, the disk is full);
            nothing is left behind.
        WatchError: the widget follows a watch live and it has kept no step yet (the page would
            be empty), or the live view did not catch up with the watch's latest step in 10 s.
    """
    _check_values(values)
    target = paths.target(path, example="page.html")
    state = page_state(widget, values, pinned)
    paths.write_new(target, page_html(state, title).encode("utf-8"))
    return target


def page_state(widget, values: str = "opened", pinned=()) -> dict:
    """What a saved page of ``widget`` holds besides the bundle: its traitlets, the static note and
    every inspector (:func:`inspectors_json`); a dict of JSON values. :func:`page_html` makes the
    page of it (the docs render a notebook's widgets so: the state kept, the page made at build).

    Raises:
        HookvizError, WatchError: as :func:`save_html`.
    """
    _check_values(values)
    _show_the_watch_as_it_stands(widget)
    state = {name: getattr(widget, name) for name in widget.keys if not name.startswith("_")}
    state = {k: v for k, v in state.items() if k not in ("layout", "comm", "tabbable", "tooltip")}
    state["static_note"] = STATIC_NOTE
    state["__inspectors"] = inspectors_json(widget, values, [*pinned])
    return state


def _check_values(values: str) -> None:
    if values not in VALUES:
        raise HookvizError(
            f"values={values!r} is not a choice: 'opened' keeps the values of the inspector on screen "
            "and of pinned nodes, 'all' those of every tensor the run recorded"
        )


def page_html(state: dict, title: str = "hookviz") -> str:
    """The self-contained HTML page of a :func:`page_state`: the state, this package's bundle and its loader."""
    text = _script_json(state)
    static = Path(__file__).parent / "static"
    # gzip (mtime 0: the same page for the same run) keeps the bundle about a quarter of its size;
    # the loader unpacks it with the browser's DecompressionStream
    esm = base64.b64encode(gzip.compress((static / "widget.js").read_bytes(), mtime=0))
    loader = (static / "saved_page.js").read_text(encoding="utf-8")
    return _PAGE.format(title=html.escape(title), state=text, esm=esm.decode("ascii"), shim=loader)


def _show_the_watch_as_it_stands(widget) -> None:
    """Bring a live watch view up to its watch's latest kept step; refuse a page with nothing on it."""
    if widget.live is not None and not widget.live.wait_shown():
        raise WatchError(
            "the live view did not catch up with its watch's latest step within 10 s (the thread "
            "that updates it is busy, or a step's figures failed: see errors['watch']); call "
            f"save_html again, or save the watch itself with {advice('save_watch')}"
        )
    if widget.run is None and not widget.watch_view:
        raise WatchError(
            "this widget shows a watch that has kept no step yet, so the page would be empty: save "
            "it after at least one training step (a backward that reaches the model)"
        )
