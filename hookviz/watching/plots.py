"""Plotly figures of a watch's kept steps: a heatmap, lines over steps, and the findings over steps."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from hookviz.analysis.findings import Finding
from hookviz.analysis.gradient_stats import module_of
from hookviz.colors import LINE_COLORS, PLOTLY_COLORSCALE, log_range
from hookviz.errors import WatchError
from hookviz.text import module_name
from hookviz.watching.history import STATISTICS, History


def color_range(history: History, statistic: str = "norm") -> dict:
    """The log10 colour range ``{lo, hi}`` (whole decades, :func:`hookviz.colors.log_range`) of
    ``statistic`` over every kept step and every name of ``history``: the one range the widget's
    graph and every heatmap of a watch colour its norms on."""
    values = getattr(history, statistic)
    values = values[torch.isfinite(values) & (values > 0)]
    if not values.numel():
        return log_range(None, None)
    logs = torch.log10(values)
    return log_range(logs.min().item(), logs.max().item())


# Lines of a watch drawn at once (more cannot be told apart); the legend toggles the others.
LINES_SHOWN = 6


def line_styles(count: int) -> list[tuple[str, bool | str]]:
    """``(colour, visible)`` of ``count`` lines in order (a watch's layers, input -> output):
    at most :data:`LINES_SHOWN` drawn (the first, the last and evenly between), each in its own
    colour of :data:`hookviz.colors.LINE_COLORS`; the others ``"legendonly"`` (plotly: listed in
    the legend, drawn when clicked there), in the palette's remaining colours."""
    if count <= LINES_SHOWN:
        shown = set(range(count))
    else:
        shown = {round(i * (count - 1) / (LINES_SHOWN - 1)) for i in range(LINES_SHOWN)}
    styles, drawn, hidden = [], 0, 0
    for i in range(count):
        if i in shown:
            styles.append((LINE_COLORS[drawn % len(LINE_COLORS)], True))
            drawn += 1
        else:
            styles.append((LINE_COLORS[(LINES_SHOWN + hidden) % len(LINE_COLORS)], "legendonly"))
            hidden += 1
    return styles


def heatmap(history: History, kind: str = "parameter", statistic: str = "norm"):
    """A plotly heatmap, names x steps, of log10 of ``statistic`` (``"norm"`` or ``"max_abs"``;
    ``"zero_fraction"`` and ``"nonfinite"`` as they are). ``kind``: ``"parameter"`` or ``"output"``.
    A log10 one colours on hookviz's scale and :func:`color_range` (as the widget's graph does).

    ``history``: the kept steps (:attr:`hookviz.Watch.history`). Raises WatchError for an unknown
    ``kind`` or ``statistic``."""
    import plotly.graph_objects as go

    if kind not in ("parameter", "output"):
        raise WatchError(f"kind={kind!r} must be 'parameter' or 'output'")
    if statistic not in STATISTICS:
        raise WatchError(f"unknown statistic {statistic!r}; choose one of {', '.join(STATISTICS)}")
    columns = [i for i, k in enumerate(history.kinds) if k == kind]
    values = getattr(history, statistic)[:, columns].T
    logarithmic = statistic in ("norm", "max_abs")
    if logarithmic:
        values = torch.log10(values.where(values > 0, torch.tensor(math.nan, dtype=torch.float64)))
    z = [[None if math.isnan(v) or math.isinf(v) else v for v in row] for row in values.tolist()]
    names = [module_name(history.names[i]) for i in columns]
    texts = history.text(statistic)  # the hover's number, written as everywhere else
    hover = [[texts[row][column] for row in range(len(history.steps))] for column in columns]
    scale = color_range(history, statistic) if logarithmic else {"lo": None, "hi": None}
    figure = go.Figure(
        go.Heatmap(
            z=z,
            x=history.steps,
            y=names,
            colorscale=PLOTLY_COLORSCALE,
            zmin=scale["lo"],
            zmax=scale["hi"],
            colorbar={"title": f"log10 {statistic}" if logarithmic else statistic},
            text=hover,
            hovertemplate="step %{x}<br>%{y}<br>%{text}<extra></extra>",
        )
    )
    figure.update_layout(
        title=f"gradient {statistic} per {kind}",
        xaxis_title="step",
        yaxis={"autorange": "reversed", "type": "category"},
    )
    return figure


def lines(
    history: History,
    parameter_names: list[str],
    names: Sequence[str] | None = None,
    statistic: str = "norm",
):
    """A plotly line chart of ``statistic`` over steps for ``names`` (default: every layer's
    first parameter), log y axis for norms; at most :data:`LINES_SHOWN` lines drawn at once, each
    in its own colour, the others in the legend (:func:`line_styles`).

    ``history``: the kept steps (:attr:`hookviz.Watch.history`); ``parameter_names``: the watched
    parameters in the watch's order, whose layers' first ones are the default ``names``."""
    import plotly.graph_objects as go

    if isinstance(names, str):
        names = [names]
    if names is None:
        seen, names = set(), []
        for name in parameter_names:
            module = module_of(name)
            if module not in seen:
                seen.add(module)
                names.append(name)
    figure = go.Figure()
    texts = history.text(statistic)
    for name, (color, visible) in zip(names, line_styles(len(names))):
        values = [None if math.isnan(v) else v for v in history.column(name, statistic)]
        column = history.names.index(name)
        figure.add_trace(
            go.Scatter(
                x=history.steps,
                y=values,
                mode="lines",
                name=module_name(name),
                line={"color": color},
                visible=visible,
                text=[row[column] for row in texts],
                hovertemplate=f"step %{{x}}<br>{module_name(name)} %{{text}}<extra></extra>",
            )
        )
    figure.update_layout(
        title=f"gradient {statistic} over steps",
        xaxis_title="step",
        yaxis_title=statistic,
        yaxis_type="log" if statistic in ("norm", "max_abs") else "linear",
    )
    return figure


def diagnosis_over_time(findings: list[Finding]):
    """A plotly scatter of ``findings`` (of a watch's kept steps): x = step, y = module, colour = kind."""
    import plotly.graph_objects as go

    figure = go.Figure()
    for kind in ("nan", "exploding", "vanishing", "dead"):
        chosen = [f for f in findings if f.kind == kind]
        if chosen:
            figure.add_trace(
                go.Scatter(
                    x=[f.step for f in chosen],
                    y=[module_name(f.module) for f in chosen],
                    mode="markers",
                    name=kind,
                    text=[f.message for f in chosen],
                    hovertemplate="%{text}<extra></extra>",
                )
            )
    figure.update_layout(
        title="diagnosis over steps" + ("" if findings else ": no findings"),
        xaxis_title="step",
        yaxis={"type": "category"},
    )
    return figure
