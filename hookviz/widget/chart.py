"""Run -> the gradient-flow chart: per-layer gradient norms, the vanishing line, and the figure."""

from __future__ import annotations

import math

from hookviz.analysis.diagnose import DEFAULT_THRESHOLDS
from hookviz.colors import RUN_LINE_COLOR, WARNING_COLOR, ZERO_GRAD_COLOR, norm_color
from hookviz.data.run import Run
from hookviz.text import log_ticks, module_name, norm, number
from hookviz.widget.graph import color_range
from hookviz.widget.payload import json_float

# One rule for the chart's line and the diagnosis banner: a layer's gradient vanishes below this
# fraction of the gradient of the layer nearest the loss (the diagnosis's own default).
VANISHING_RATIO = DEFAULT_THRESHOLDS["vanishing"]


def chart_json(run: Run, baseline: Run | None = None, vanishing: float = VANISHING_RATIO) -> dict:
    """Gradient flow by the diagnosis's own rule: per layer (a module with parameters, input ->
    output) the norm of its parameters' gradient in ``run`` and in ``baseline``, and the
    vanishing line at ``vanishing`` x the norm of the layer nearest the loss, where
    :func:`hookviz.analysis.diagnose.diagnose` draws it. Zero norms cannot sit on a log axis: ``floor`` is
    the height at which the page draws them, marked as zero.

    Returns:
        ``{"modules", "current", "baseline", "threshold", "rule", "floor", "colors", "figure"}``;
        ``threshold`` is None when no layer has a gradient; ``colors``: each layer's point in the
        colour of its norm on the graph's scale and range (:func:`hookviz.widget.graph.color_range`),
        so a layer's point and its box on the graph share one colour.
    """
    from hookviz.analysis.gradient_stats import gradient_stats

    def layer_norms(r: Run) -> dict[str, float]:
        layers = [s for s in gradient_stats(r, counts=False) if s.kind == "layer"]
        return {s.name: s.grad_norm for s in reversed(layers)}  # input -> output

    current = layer_norms(run)
    before = layer_norms(baseline) if baseline is not None and baseline is not run else current
    modules = list(current)
    nearest = modules[-1] if modules else None
    reference = current.get(nearest) if nearest is not None else None
    usable = reference is not None and math.isfinite(reference) and reference > 0
    threshold = vanishing * reference if usable else None
    positive = [
        v
        for v in [*current.values(), *before.values(), threshold]
        if v is not None and math.isfinite(v) and v > 0
    ]
    floor = 10 ** (math.floor(math.log10(min(positive))) - 1) if positive else 1e-12
    chart = {
        "modules": modules,
        "root_type": run.root_type,  # the root module ("") is named by its class: "Canonical (root)"
        "current": [json_float(current[m]) for m in modules],
        "baseline": [json_float(before.get(m)) for m in modules],
        "threshold": json_float(threshold),
        "rule": (
            f"vanishing below {number(vanishing)} x the layer nearest the loss ({nearest})" if usable else ""
        ),
        "floor": floor,
    }
    scale = color_range(run, baseline)
    chart["colors"] = [norm_color(current[m], scale) for m in modules]
    chart["figure"] = chart_spec(chart)
    return chart


# More layers than this: no tick labels (hover names them); more than CHART_MARKERS: lines only.
CHART_TICK_LABELS = 40
CHART_MARKERS = 150


def chart_spec(chart: dict) -> dict:
    """The gradient-flow chart (from :func:`chart_json`) as a plotly figure ``{"data", "layout"}``:
    per-layer gradient norm on a log axis, this run against the baseline, the vanishing line dashed.
    Zero norms cannot sit on a log axis: they are drawn at the chart's ``floor``, marked with a
    triangle; missing or non-finite ones are gaps. The one home of the chart: the page draws this
    figure (``js/src/chart.js`` adds the theme's colours and its height) and :func:`chart_figure`
    gives it to Python. Layout keys: https://plotly.com/javascript/reference/layout/."""
    floor = chart.get("floor") or 1e-12

    def on_log_axis(values):
        out = []
        for v in values:
            v = None if v is None else float(v)
            out.append(None if v is None or not math.isfinite(v) else (floor if v <= 0 else v))
        return out

    labels = [module_name(m, chart.get("root_type", "")) for m in chart.get("modules", [])]
    current = chart.get("current", [])
    zeros = [label for label, v in zip(labels, current) if v is not None and float(v) == 0]
    mode = "lines" if len(labels) > CHART_MARKERS else "lines+markers"
    many = len(labels) > CHART_TICK_LABELS
    data = [
        {
            "type": "scatter",
            "x": labels,
            "y": on_log_axis(chart.get("baseline", [])),
            "name": "baseline",
            "mode": mode,
            # the numbers as hookviz writes them everywhere (hookviz.text), not plotly's own format
            "customdata": [norm(v) for v in chart.get("baseline", [])],
            "hovertemplate": "%{x}<br>‖grad‖ %{customdata}<extra>baseline</extra>",
            "line": {"color": "#90a4ae", "dash": "dot"},
        },
        {
            "type": "scatter",
            "x": labels,
            "y": on_log_axis(current),
            "name": "this run",
            "mode": mode,
            "customdata": [norm(v) for v in current],
            "hovertemplate": "%{x}<br>‖grad‖ %{customdata}<extra>this run</extra>",
            "line": {"color": RUN_LINE_COLOR},
            # each layer's point in its box's colour on the graph (chart_json's ``colors``)
            **({"marker": {"color": chart["colors"], "size": 8}} if chart.get("colors") else {}),
        },
        {
            "type": "scatter",
            "x": zeros,
            "y": [floor] * len(zeros),
            "name": "zero (drawn at the floor)",
            "mode": "markers",
            "marker": {"symbol": "triangle-down", "size": 10, "color": ZERO_GRAD_COLOR},
        },
    ]
    threshold = chart.get("threshold")
    threshold = float(threshold) if threshold is not None and math.isfinite(float(threshold)) else None
    layout = {
        "title": {"text": "Gradient flow: norm of each layer's parameter gradient"},
        # Module names such as "0" and "2" (an nn.Sequential's) are names, not numbers.
        "xaxis": {
            "type": "category",
            "automargin": True,
            "tickangle": -30,
            "showticklabels": not many,
            "title": {
                "text": f"{len(labels)} modules, input → output (hover for names)"
                if many
                else "layer (input → output)"
            },
        },
        "yaxis": {
            "type": "log",
            "title": {"text": "‖grad‖ (log)"},
            **log_ticks([*on_log_axis(chart.get("baseline", [])), *on_log_axis(current), threshold]),
        },
        # at the left: plotly's toolbar takes the top right corner (it covered the legend there)
        "legend": {"orientation": "h", "y": 1.12, "x": 0, "xanchor": "left"},
        "shapes": [],
        "annotations": [],
    }
    if threshold and threshold > 0:
        layout["shapes"].append(
            {
                "type": "line",
                "xref": "paper",
                "x0": 0,
                "x1": 1,
                "y0": threshold,
                "y1": threshold,
                "line": {"color": WARNING_COLOR, "dash": "dash", "width": 1},
            }
        )
        layout["annotations"].append(
            {
                "xref": "paper",
                "x": 0,
                "y": math.log10(threshold),  # annotations on a log axis are placed in log10 units
                "text": chart.get("rule") or f"vanishing < {number(threshold)}",
                "showarrow": False,
                "font": {"color": WARNING_COLOR, "size": 10},
                "xanchor": "left",
                "yanchor": "bottom",
            }
        )
    return {"data": data, "layout": layout}


def chart_figure(chart: dict):
    """The gradient-flow chart (from :func:`chart_json`) as a ``plotly.graph_objects.Figure``
    (:func:`chart_spec`, the figure the page draws)."""
    import plotly.graph_objects as go

    return go.Figure(chart_spec(chart))
