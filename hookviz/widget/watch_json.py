"""Watch -> JSON: a watch's norms on the drawn graph, their colour range, and its figures."""

from __future__ import annotations

import math

import torch

from hookviz.colors import NAN_COLOR, PLOTLY_COLORSCALE
from hookviz.data.tensors import combined_norm
from hookviz.watching.plots import color_range
from hookviz.widget.payload import json_float


def watch_node_norms(graph_data: dict, parameter_norms: dict, output_norms: dict) -> dict:
    """The watch's norms on the drawn elements: ``{element id: norm}``.

    A parameter leaf (its node id is the parameter's qualified name) takes the norm of that
    parameter's gradient. A module group (``"group:<name>"``) takes the norm of the gradient
    w.r.t. the module's output where the watch recorded outputs (``hookviz.watch(...,
    outputs=True)``), else the 2-norm of all its parameters' gradients taken together (every
    parameter named ``<name>.…``), so the default watch colours modules too. Elements left out
    have no value (drawn grey): what ``loss_fn`` built, a module without parameters when outputs
    were not watched.
    """
    out = {}
    for item in graph_data.get("nodes", []):
        if item["kind"] == "leaf" and item["id"] in parameter_norms:
            out[item["id"]] = json_float(parameter_norms[item["id"]])
    for group in graph_data.get("groups", []):
        module = group["module"]
        if module in output_norms:
            norm = output_norms[module]
        else:
            prefix = f"{module}."
            norm = combined_norm(v for name, v in parameter_norms.items() if name.startswith(prefix))
        if norm is not None:
            out[group["id"]] = json_float(norm)
    return out


def watch_color_range(history) -> dict:
    """One log10 colour range over every kept step of a watch, so the colours of two steps compare
    (the range its heatmaps colour on too: :func:`hookviz.watching.plots.color_range`)."""
    return color_range(history)


# A live watch figure (live_watch_figure) draws at most this many steps (evenly picked, the last
# always among them) and lines of at most this many layers (evenly picked, first and last among
# them): it is sent again every update while training runs.
LIVE_FIGURE_STEPS = 256
LIVE_FIGURE_LAYERS = 12
# How the page marks the step on screen on a watch heatmap (a figure's ``step_marker``).
STEP_MARKER = {"line": {"color": NAN_COLOR, "width": 2}}


def with_step_marker(figure: dict) -> dict:
    """``figure`` (a plotly figure dict) with the :data:`STEP_MARKER` the page draws the shown
    step with; changed in place and returned."""
    figure["step_marker"] = STEP_MARKER
    return figure


def _evenly(count: int, most: int) -> list[int]:
    """At most ``most`` indices of ``range(count)``, evenly spread, first and last included."""
    if count <= most:
        return list(range(count))
    return sorted({round(i * (count - 1) / (most - 1)) for i in range(most)})


def live_watch_figure(history, title: str) -> dict:
    """A watch's parameter gradients over the kept steps as one plotly figure dict: above, a
    heatmap of log10 of each parameter's gradient norm (names x steps); below, the 2-norm of each
    layer's parameter gradients over steps (log axis; a layer = the module owning the
    parameters, darker = nearer the input). Built as plain JSON, not through plotly.py (it is
    sent again on every live update, see :mod:`hookviz.widget.live`).

    Args:
        history: a :class:`hookviz.watching.history.History` (``watch.history``).
        title: the figure's title.

    Returns:
        ``{"data": [...], "layout": {...}, "step_marker": ...}``; NaN/Inf (a missing or
        non-finite norm) are null. The heatmap colours on the scale and range the graph's watch
        colours use (:func:`hookviz.watching.plots.color_range`).
    """
    columns = [i for i, kind in enumerate(history.kinds) if kind == "parameter"]
    names = [history.names[i] for i in columns]
    picked = _evenly(len(history.steps), LIVE_FIGURE_STEPS)
    steps = [history.steps[i] for i in picked]
    norms = history.norm[picked][:, columns] if columns else torch.zeros(len(picked), 0, dtype=torch.float64)
    nan = torch.tensor(math.nan, dtype=torch.float64)
    logs = torch.log10(norms.where(norms > 0, nan)).round(decimals=3)
    logs = logs.where(torch.isfinite(logs), nan)
    z = [[v if v == v else None for v in row] for row in logs.T.tolist()]  # NaN != NaN: JSON null
    # Layer norms: sqrt of the sum of its parameters' squared norms (NaN where none got a gradient).
    layers: dict[str, list[int]] = {}
    for position, name in enumerate(names):
        layers.setdefault(name.rpartition(".")[0], []).append(position)
    modules = list(layers)
    shown = [modules[i] for i in _evenly(len(modules), LIVE_FIGURE_LAYERS)]
    traces = []
    for depth, module in enumerate(shown):
        squares = norms[:, layers[module]] ** 2
        layer = (
            squares.nansum(1)
            .sqrt()
            .where(~squares.isnan().all(1), torch.tensor(math.nan, dtype=torch.float64))
        )
        lightness = 25 + 50 * depth / max(1, len(shown) - 1)
        traces.append(
            {
                "type": "scatter",
                "mode": "lines",
                "x": steps,
                "y": [float(f"{v:.4g}") if math.isfinite(v) and v > 0 else None for v in layer.tolist()],
                "name": module or "(root)",
                "line": {"width": 1.5, "color": f"hsl(220, 70%, {lightness:.0f}%)"},
                "xaxis": "x2",
                "yaxis": "y2",
                "hovertemplate": "step %{x}<br>" + (module or "(root)") + " %{y:.3g}<extra></extra>",
            }
        )
    # NaN/Inf in a gradient: its cells drawn red over the heatmap, as the graph draws them.
    nonfinite = history.nonfinite[picked][:, columns] if columns else torch.zeros(len(picked), 0)
    if bool((nonfinite > 0).any()):
        bad = [[1 if v > 0 else None for v in row] for row in nonfinite.T.tolist()]
        traces.insert(
            0,
            {
                "type": "heatmap",
                "z": bad,
                "x": steps,
                "y": names,
                "colorscale": [[0, NAN_COLOR], [1, NAN_COLOR]],
                "showscale": False,
                "name": "NaN/Inf",
                "hovertemplate": "step %{x}<br>%{y}<br>NaN/Inf in the gradient<extra></extra>",
            },
        )
    heat_height = min(420, 60 + 14 * len(names))
    scale = color_range(history)
    return {
        "step_marker": STEP_MARKER,
        "data": [
            {
                "type": "heatmap",
                "z": z,
                "x": steps,
                "y": names,
                "colorscale": PLOTLY_COLORSCALE,
                "zmin": scale["lo"],
                "zmax": scale["hi"],
                "colorbar": {"title": {"text": "log10 ‖grad‖"}, "len": 0.55, "y": 1, "yanchor": "top"},
                "hovertemplate": "step %{x}<br>%{y}<br>log10 ‖grad‖ %{z:.3g}<extra></extra>",
            },
            *traces,
        ],
        "layout": {
            "title": {"text": title},
            "height": heat_height + 300,
            "showlegend": True,
            "legend": {"y": 0.3, "yanchor": "top", "font": {"size": 10}},
            "xaxis": {"anchor": "y"},
            "yaxis": {"domain": [0.42, 1], "autorange": "reversed", "type": "category", "automargin": True},
            "xaxis2": {"anchor": "y2", "matches": "x", "title": {"text": "step"}},
            "yaxis2": {
                "domain": [0, 0.3],
                "type": "log",
                "title": {"text": "layer ‖grad‖"},
                "exponentformat": "power",
            },
        },
    }


def figure_json(figure) -> dict:
    """A plotly figure as JSON the page can hand to ``Plotly.react`` (NaN become null), without
    plotly.py's template (large, and only a restyling)."""
    import json

    data = json.loads(figure.to_json())
    data.get("layout", {}).pop("template", None)
    return data
