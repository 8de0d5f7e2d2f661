"""Watch -> JSON: a watch's norms on the drawn graph, their colour range, and its figures."""

from __future__ import annotations

import math

import torch

from hookviz import text
from hookviz.analysis.gradient_stats import layer_norms, module_norms, module_of
from hookviz.colors import (
    EXPLODING_COLOR,
    NAN_COLOR,
    PLOTLY_COLORSCALE,
    STEP_COLOR,
    TOO_SMALL_COLOR,
    UPDATE_RATIO_COLORS,
    ZERO_GRAD_COLOR,
    norm_color,
)
from hookviz.watching.plots import color_range, line_styles
from hookviz.widget.chart import chart_spec
from hookviz.widget.payload import json_float
from hookviz.widget.watch_rows import with_step_rows


def watch_node_norms(graph_data: dict, parameter_norms: dict, output_norms: dict) -> dict:
    """The watch's norms on the drawn elements: ``{element id: norm}``.

    A parameter leaf (its node id is the parameter's qualified name) takes the norm of that
    parameter's gradient. A module group (``"group:<name>"``) takes the norm of the gradient
    w.r.t. the module's output where the watch recorded outputs (``hookviz.watch(...,
    outputs=True)``), else the 2-norm of the gradients of the layers it is or encloses taken
    together (:func:`hookviz.analysis.gradient_stats.module_norm`), so the default watch colours
    modules too. Elements left out have no value (drawn grey): what ``loss_fn`` built, a module
    without parameters when outputs were not watched.
    """
    modules = module_norms(layer_norms(parameter_norms))
    out = {}
    for item in graph_data.get("nodes", []):
        if item["kind"] == "leaf" and item["id"] in parameter_norms:
            out[item["id"]] = json_float(parameter_norms[item["id"]])
    for group in graph_data.get("groups", []):
        module = group["module"]
        if module in output_norms:
            norm = output_norms[module]
        else:  # the root module ("") holds every parameter
            norm = modules.get(module)
        if norm is not None:
            out[group["id"]] = json_float(norm)
    return out


def watched_elements(graph_data: dict, names: list[str]) -> set[str]:
    """The drawn elements the watch records a value for when they get a gradient: parameter
    leaves it watches, and module groups whose output or some parameter it watches (as
    :func:`watch_node_norms` colours them). The others are "not watched": op nodes, inputs,
    what ``loss_fn`` built, modules without watched parameters."""
    watched = set(names)
    out = {
        item["id"] for item in graph_data.get("nodes", []) if item["kind"] == "leaf" and item["id"] in watched
    }
    for group in graph_data.get("groups", []):
        module = group["module"]
        if module in watched or any(name.startswith(f"{module}." if module else "") for name in watched):
            out.add(group["id"])
    return out


def watch_chart_json(parameter_norms: dict, scale: dict, what: str) -> dict:
    """The gradient-flow chart of one step of a watch, drawn where the run's chart sits in the
    watch view: per layer (the module owning parameters, input -> output) the 2-norm of its
    parameters' gradients at that step, coloured as the graph colours it. ``parameter_norms``:
    ``{parameter name: norm}`` of that step (``watch.norms(step, kind="parameter")``);
    ``scale``: the watch's colour range; ``what``: the rank and step, for the title."""
    norms = layer_norms(parameter_norms)
    modules = list(norms)
    positive = [v for v in norms.values() if v is not None and math.isfinite(v) and v > 0]
    chart = {
        "modules": modules,
        "current": [json_float(norms[m]) for m in modules],
        "baseline": [],
        "threshold": None,
        "rule": "",
        "floor": 10 ** (math.floor(math.log10(min(positive))) - 1) if positive else 1e-12,
        "colors": [norm_color(norms[m], scale) for m in modules],
    }
    figure = chart_spec(chart)
    figure["data"] = [trace for trace in figure["data"] if trace["name"] != "baseline"]
    figure["data"][0]["name"] = what
    figure["layout"]["title"]["text"] = f"Gradient flow of the watch: {what}"
    chart["figure"] = figure
    return chart


def watch_color_range(history) -> dict:
    """One log10 colour range over every kept step of a watch, so the colours of two steps compare
    (the range its heatmaps colour on too: :func:`hookviz.watching.plots.color_range`)."""
    return color_range(history)


# A live watch figure (live_watch_figure) draws at most this many steps (evenly picked, the last
# always among them) and lines of at most this many layers (evenly picked, first and last among
# them): it is sent again every update while training runs.
LIVE_FIGURE_STEPS = 256
LIVE_FIGURE_LAYERS = 12
# How the page marks the step on screen on a watch heatmap (a figure's ``step_marker``): a neutral
# line, so that it is never taken for the onset of a NaN (drawn red, :func:`with_onsets`).
STEP_MARKER = {"line": {"color": STEP_COLOR, "width": 2}}
# The onset of each kind of trouble on a heatmap: a dashed line at its first step, named.
ONSET_COLORS = {
    "nan": NAN_COLOR,
    "exploding": EXPLODING_COLOR,
    "vanishing": TOO_SMALL_COLOR,
    "dead": ZERO_GRAD_COLOR,
    "update_too_large": UPDATE_RATIO_COLORS["large"],
    "update_too_small": UPDATE_RATIO_COLORS["small"],
}
ONSET_LABELS = {
    "nan": "NaN/Inf from step {step}",
    "exploding": "exploding from step {step}",
    "vanishing": "vanishing from step {step}",
    "dead": "dead from step {step}",
    "update_too_large": "updates too large from step {step}",
    "update_too_small": "updates too small from step {step}",
}


def with_step_marker(figure: dict) -> dict:
    """``figure`` (a plotly figure dict) with the :data:`STEP_MARKER` the page draws the shown
    step with; changed in place and returned."""
    figure["step_marker"] = STEP_MARKER
    return figure


def with_onsets(figure: dict, onsets: list) -> dict:
    """``figure`` (a plotly figure dict of a watch's steps) with each onset
    (:func:`hookviz.analysis.onset.onsets`) marked: a dashed vertical line at its step over the
    whole figure, in :data:`ONSET_COLORS`, labelled "NaN/Inf from step 21" above the plot, its
    message on hover. Changed in place and returned."""
    layout = figure.setdefault("layout", {})
    shapes, notes = list(layout.get("shapes") or []), list(layout.get("annotations") or [])
    for i, onset in enumerate(onsets):
        color = ONSET_COLORS[onset.kind]  # every kind onsets() makes has its colour
        shapes.append(
            {
                "type": "line",
                "xref": "x",
                "yref": "paper",
                "x0": onset.step,
                "x1": onset.step,
                "y0": 0,
                "y1": 1,
                "line": {"color": color, "width": 2, "dash": "dash"},
            }
        )
        notes.append(
            {
                "x": onset.step,
                "xref": "x",
                "y": 1,
                "yref": "paper",
                "yanchor": "bottom",
                "yshift": 2 + 14 * i,  # two onsets a step or two apart do not overlap
                "showarrow": False,
                "text": ONSET_LABELS[onset.kind].format(step=onset.step),
                "hovertext": onset.message,
                "font": {"color": color, "size": 11},
            }
        )
    layout["shapes"], layout["annotations"] = shapes, notes
    figure["onsets"] = [{"kind": o.kind, "step": o.step, "node": o.node} for o in onsets]
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
        ``{"data": [...], "layout": {...}, "step_marker": ..., "step_rows": ...}`` (``step_rows``:
        :func:`hookviz.widget.watch_rows.step_rows`, with ``optimizer=`` or skipped steps);
        NaN/Inf (a missing or non-finite norm) are null. The heatmap colours on the scale and range
        the graph's watch colours use (:func:`hookviz.watching.plots.color_range`).
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
    # Layer norms by the analysis's one rule (layer_norms): a NaN gradient makes its layer's norm
    # NaN (a gap; the heatmap draws it red), a layer with no gradient (NaN, no NaN/Inf counted) too.
    modules = list(dict.fromkeys(module_of(name) for name in names))
    shown = [modules[i] for i in _evenly(len(modules), LIVE_FIGURE_LAYERS)]
    bad = (history.nonfinite[picked][:, columns] > 0).tolist() if columns else [[] for _ in picked]
    by_step = [
        layer_norms({n: v if v == v or b else None for n, v, b in zip(names, row, nan_row)})
        for row, nan_row in zip(norms.tolist(), bad)
    ]
    traces = []
    for module in shown:
        layer = [math.nan if step[module] is None else step[module] for step in by_step]
        traces.append(
            {
                "type": "scatter",
                "mode": "lines",
                "x": steps,
                "y": [text.plotted(v) for v in layer],
                "name": text.module_name(module),
                "line": {"width": 1.5},  # its colour: line_styles below
                "xaxis": "x2",
                "yaxis": "y2",
                "customdata": [text.norm(v) for v in layer],
                "hovertemplate": "step %{x}<br>"
                + text.module_name(module)
                + " ‖grad‖ %{customdata}<extra></extra>",
            }
        )
    # lines told apart: distinct colours, at most LINES_SHOWN drawn at once (the legend toggles the rest)
    for trace, (color, visible) in zip(traces, line_styles(len(traces))):
        trace["line"]["color"], trace["visible"] = color, visible
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
    figure = {
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
                # the norm itself, as hookviz writes it everywhere (the colour is its log10)
                "customdata": [[text.norm(v) for v in row] for row in norms.T.tolist()],
                "hovertemplate": "step %{x}<br>%{y}<br>‖grad‖ %{customdata}<extra></extra>",
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
                **text.log_ticks(v for t in traces if t["type"] == "scatter" for v in t["y"]),
            },
        },
    }
    return with_step_rows(figure, history, picked)  # update ratios, learning rates, skipped steps


def figure_json(figure) -> dict:
    """A plotly figure as JSON the page can hand to ``Plotly.react`` (NaN become null), without
    plotly.py's template (large, and only a restyling)."""
    import json

    data = json.loads(figure.to_json())
    data.get("layout", {}).pop("template", None)
    return data


# The watch view's leaf table: the statistic each column shows and its header.
WATCH_LEAF_COLUMNS = (
    ("norm", "‖grad‖"),
    ("max_abs", "max |grad|"),
    ("nonfinite", "NaN/Inf"),
    ("zero_fraction", "zeros"),
)


def watch_leaf_table(history, step: int, what: str) -> dict:
    """The leaf table of the watch view at ``step``: every parameter's gradient statistics as the
    watch on screen recorded them (a rank's local ones, the reduced ones, or a watch's), so that
    the table follows the rank and step picked, as the graph and chart do.

    Args:
        history: the watch's :class:`hookviz.watching.history.History` (``watch.history``; a
            rank's or the reduced one for a gathered history).
        step: a kept step of ``history``.
        what: what the statistics are, in words (:func:`hookviz.widget.watch_view.watch_label`).

    Returns:
        ``{"title", "columns": [[key, header]], "rows": [{"name", "values", "text"}], "note"}``: one row
        per parameter in the watch's order; ``values``: norm, max |grad|, NaN/Inf count, fraction
        of exact zeros, as JSON floats (None where not measured: max |grad| and zeros at a step
        that kept norms only, ``hookviz.watch(..., stats_every=N)``); ``text``: the cells, one
        number format per column; a parameter that got no gradient at this step reads "no grad"
        with no values (all None); ``note``: what an empty cell means, "" when none is.
    """
    index = history.steps.index(step)
    rows = []
    for column, (name, kind) in enumerate(zip(history.names, history.kinds)):
        if kind != "parameter":
            continue
        value = {key: getattr(history, key)[index, column].item() for key, _ in WATCH_LEAF_COLUMNS}
        if math.isnan(value["norm"]) and not value["nonfinite"] > 0:  # no gradient at this step
            value = dict.fromkeys(value)
        elif not value["nonfinite"] > 0:  # NaN here: a step that kept norms only (stats_every)
            value = {key: None if math.isnan(v) else v for key, v in value.items()}
        rows.append({"name": name, "values": {key: json_float(v) for key, v in value.items()}})
    cells = {
        "norm": text.column([row["values"]["norm"] for row in rows]),
        "max_abs": text.column([row["values"]["max_abs"] for row in rows]),
        "nonfinite": [text.number(row["values"]["nonfinite"]) for row in rows],
        "zero_fraction": [text.percent(row["values"]["zero_fraction"]) for row in rows],
    }
    for i, row in enumerate(rows):
        got = row["values"]["norm"] is not None
        row["text"] = {key: cells[key][i] if got else text.MISSING for key, _ in WATCH_LEAF_COLUMNS}
        if not got:
            row["text"]["norm"] = "no grad"
    unmeasured = any(r["values"]["norm"] is not None and r["values"]["max_abs"] is None for r in rows)
    return {
        "title": f"Leaf gradients of the watch: {what}, step {step}",
        "columns": [list(column) for column in WATCH_LEAF_COLUMNS],
        "rows": rows,
        # why a cell is empty where the gradient was there
        "note": (
            f"{text.MISSING}: not measured at this step (the watch reads max |grad| and zeros every "
            "stats_every steps and at a step whose norm is not finite, too large or 0; norms at every step)"
            if unmeasured
            else ""
        ),
    }
