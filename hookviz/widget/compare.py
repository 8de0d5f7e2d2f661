"""Two training runs side by side: :func:`compare` (``hookviz.compare``, ``hookviz compare A B``).

"What changed since yesterday's run that worked?": per layer, both runs' gradient norms over the
kept steps on one log scale, the findings of each with their onsets, and the first step and layer
where the norms part by more than a factor (:mod:`hookviz.analysis.compare` has the rules).
"""

from __future__ import annotations

import html
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from hookviz import text
from hookviz.advice import advice
from hookviz.analysis.compare import (
    DEFAULT_FACTOR,
    LayerNorms,
    Parting,
    aligned,
    first_parting,
    layer_norms,
    partings,
)
from hookviz.analysis.findings import Finding
from hookviz.colors import LINE_COLORS, STEP_COLOR
from hookviz.errors import HookvizError, WatchError
from hookviz.files import paths
from hookviz.widget.diagnosis import findings_json
from hookviz.widget.payload import json_float
from hookviz.widget.sources import Source, open_source

if TYPE_CHECKING:  # for annotations only
    from hookviz.watching.gather import RankHistory
    from hookviz.watching.watch import Watch

# Each run's colour in a comparison (the first two of hookviz's line colours; red means NaN/Inf).
RUN_COLORS = LINE_COLORS[:2]
# A comparison's figure draws one panel per layer, this many side by side.
PANELS_PER_ROW = 3

_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{title}</title>
<style>body {{ margin: 12px; font-family: sans-serif; }} li {{ margin: 2px 0; }}</style>
</head>
<body>
<h1>{title}</h1>
{summary}
{figure}
</body>
</html>
"""


@dataclass
class Comparison:
    """Two watches' gradient norms side by side (:func:`compare`).

    Attributes:
        names: the two runs' labels, ``(a, b)``.
        factor: the ratio of norms above which the runs are said to part.
        norms: each run's per-layer gradient norms over its kept steps
            (:class:`hookviz.analysis.compare.LayerNorms`).
        findings: each run's findings at its last kept step, as the widget's banner shows them.
        onsets: each run's onsets: when each trouble started, and where
            (:func:`hookviz.analysis.onset.onsets`).
        partings: per layer both runs have, the first aligned step where they part by more than
            ``factor``, in step order (:func:`hookviz.analysis.compare.partings`).
        first: the first step where they part, at the layer furthest apart then; None when they
            never part at the steps both kept.
        steps: the step numbers both runs kept (aligned by number and optimizer).
        only: layers that only one run has, ``(in a only, in b only)``.
    """

    names: tuple[str, str]
    factor: float
    norms: tuple[LayerNorms, LayerNorms]
    findings: tuple[list[Finding], list[Finding]]
    onsets: tuple[list[Finding], list[Finding]]
    partings: list[Parting]
    first: Parting | None
    steps: list[int]
    only: tuple[list[str], list[str]]

    def summary(self) -> str:
        """Where the runs part, in one sentence."""
        a, b = self.names
        if not self.steps:
            return f"{a} and {b} kept no step with the same number: nothing to compare"
        if self.first is None:
            return (
                f"{a} and {b} never part by more than {text.number(self.factor)}× at the {len(self.steps)} "
                "steps both kept"
            )
        p = self.first
        return (
            f"{a} and {b} first part at step {p.step}, layer {text.module_name(p.layer)!r}: gradient norm "
            f"{text.norm(p.a)} in {a}, {text.norm(p.b)} in {b} ({_apart(p.ratio)}; factor "
            f"{text.number(self.factor)}×); {len(self.partings)} of {len(self.layers)} layers part"
        )

    @property
    def layers(self) -> list[str]:
        """The layers both runs have, in the first run's order (input side first)."""
        return [layer for layer in self.norms[0].layers if layer in self.norms[1].layers]

    def to_dict(self) -> dict:
        """Everything as JSON-safe values (NaN/Inf as ``"nan"``/``"inf"`` strings)."""

        def parting(p: Parting | None):
            if p is None:
                return None
            return {
                "step": p.step,
                "optimizer": p.optimizer,
                "layer": p.layer,
                "a": json_float(p.a),
                "b": json_float(p.b),
                "ratio": json_float(p.ratio),
            }

        return {
            "names": list(self.names),
            "factor": self.factor,
            "summary": self.summary(),
            "first": parting(self.first),
            "partings": [parting(p) for p in self.partings],
            "steps": list(self.steps),
            "layers": self.layers,
            "only": [list(self.only[0]), list(self.only[1])],
            "runs": [
                {
                    "name": name,
                    "steps": len(norms.steps),
                    "last_step": norms.steps[-1] if norms.steps else None,
                    "findings": findings_json(found),
                    "onsets": findings_json(onset),
                }
                for name, norms, found, onset in zip(self.names, self.norms, self.findings, self.onsets)
            ],
        }

    def figure(self):
        """Per layer, the gradient norm over steps of both runs on one log scale, one panel per
        layer (the first run solid, the second dashed), the first parting marked by a dashed line.

        Returns:
            a ``plotly.graph_objects.Figure``. A norm that is NaN/Inf, zero or missing is a gap.
        """
        from plotly.subplots import make_subplots

        layers = self.layers
        columns = max(1, min(PANELS_PER_ROW, len(layers)))
        rows = max(1, math.ceil(len(layers) / columns))
        figure = make_subplots(
            rows=rows,
            cols=columns,
            subplot_titles=[text.module_name(layer) for layer in layers],
            vertical_spacing=min(0.3 / rows, 0.08) if rows > 1 else 0.1,
        )
        for position, layer in enumerate(layers):
            row, column = position // columns + 1, position % columns + 1
            for run, (name, norms, color) in enumerate(zip(self.names, self.norms, RUN_COLORS)):
                index = norms.layers.index(layer)
                values = [v if math.isfinite(v) and v > 0 else None for v in norms.norm[:, index].tolist()]
                figure.add_scatter(
                    x=norms.steps,
                    y=values,
                    name=name,
                    legendgroup=name,
                    showlegend=position == 0,
                    mode="lines",
                    line={"color": color, "dash": "solid" if run == 0 else "dash"},
                    row=row,
                    col=column,
                )
            figure.update_yaxes(type="log", row=row, col=column)
        if self.first is not None:
            figure.add_vline(
                x=self.first.step,
                line={"color": STEP_COLOR, "dash": "dot", "width": 1},
                annotation_text=f"part at step {self.first.step}",
            )
        figure.update_layout(
            title=f"Gradient norm per layer: {self.names[0]} (solid) vs {self.names[1]} (dashed)",
            height=max(360, 240 * rows),
            margin={"t": 90},
        )
        figure.update_xaxes(title_text="step", row=rows)
        return figure

    def save_html(self, path: str | Path, title: str | None = None) -> Path:
        """Write the comparison to one HTML file that opens with no network and no kernel: the
        summary, each run's findings and onsets, and :meth:`figure` (plotly.js inside the file).

        Written as :func:`hookviz.save` writes (:mod:`hookviz.files.paths`): to an exclusive
        temporary beside it, then renamed; never through a symlink.

        Args:
            path: the page to write (``.html`` is not added).
            title: the page's title; default "hookviz: a vs b".

        Returns:
            the path written.

        Raises:
            PathError (a HookvizError and an OSError): ``path`` names no file (empty, a folder, a
                folder that does not exist).
            OSError: the file cannot be written; nothing is left behind.
        """
        target = paths.target(path, example="compare.html")
        title = title or f"hookviz: {self.names[0]} vs {self.names[1]}"
        parts = [f"<p>{html.escape(self.summary())}</p>"]
        for name, found, onset in zip(self.names, self.findings, self.onsets):
            items = [f"<li>onset: {html.escape(f.message)}</li>" for f in onset]
            items += [f"<li>step {f.step}: {html.escape(f.message)}</li>" for f in found]
            parts.append(f"<h2>{html.escape(name)}</h2><ul>{''.join(items) or '<li>no findings</li>'}</ul>")
        figure = self.figure().to_html(full_html=False, include_plotlyjs=True)
        page = _PAGE.format(title=html.escape(title), summary="\n".join(parts), figure=figure)
        paths.write_new(target, page.encode("utf-8"))
        return target

    def __repr__(self) -> str:
        return f"Comparison({self.summary()})"


def compare(
    a: str | Path | Watch | RankHistory,
    b: str | Path | Watch | RankHistory,
    names: tuple[str, str] | list[str] | None = None,
    factor: float = DEFAULT_FACTOR,
    rank: int | None = None,
) -> Comparison:
    """Compare two training runs' gradients: per layer, the norms over steps of both, the findings
    of each with their onsets, and the first step and layer where they part by more than
    ``factor``.

    Steps are aligned by step number, optimizer by optimizer (a watch with ``optimizer=`` keeps
    one step per ``optimizer.step()``); layers by name (the module owning parameters; the 2-norm
    of its parameters' gradients). See :mod:`hookviz.analysis.compare` for how NaN/Inf, zeros and
    missing gradients compare.

    Args:
        a: the first run (say, yesterday's that worked): a :class:`hookviz.Watch`, a watch history
            (:class:`hookviz.RankHistory`) or the path of a file :func:`hookviz.save` wrote from
            one. A gathered history is read by its reduced gradients (what the optimizer stepped
            on), as the widget reads it.
        b: the second run (today's), the same kinds as ``a``.
        names: the two labels; default the files' names without ``.hookviz`` (``"a"`` and ``"b"``
            for objects).
        factor: the ratio of norms (either way round) above which two runs part; above 1.
        rank: read this rank's local gradients of both (gathered) histories instead.

    Returns:
        a :class:`Comparison`: ``.first`` (a :class:`hookviz.analysis.compare.Parting` or None),
        ``.summary()``, ``.figure()`` (plotly), ``.save_html(path)``, ``.to_dict()``.

    Raises:
        HookvizError: ``a`` or ``b`` is a run (one step: compare runs with :func:`hookviz.diff`),
            ``names`` is not two labels, ``factor`` is not above 1, or the two runs share no layer.
        FileFormatError: a file is not a hookviz file, or is corrupt. FileNotFoundError: no such
            file. PathError: a path names a folder or a special file.
        WatchError: ``rank`` is not one of a history's ranks.
    """
    if names is not None and (
        isinstance(names, str) or len(names) != 2 or not all(isinstance(n, str) and n for n in names)
    ):
        raise HookvizError(f"names={names!r} must be two labels, e.g. names=('yesterday', 'today')")
    given = names is not None
    if not given:  # a file is named by its file name, an object "a" or "b"
        names = [None if isinstance(x, (str, Path)) else label for x, label in zip((a, b), "ab")]
    first, second = (open_source(x, rank, label) for x, label in zip((a, b), names))
    if not given and first.label == second.label and first.path is not None:
        first.label, second.label = _told_apart(first, second)  # the same file name in two folders
    return compare_sources(first, second, factor)


def compare_sources(first: Source, second: Source, factor: float = DEFAULT_FACTOR) -> Comparison:
    """:func:`compare` of two opened sources (:func:`hookviz.widget.sources.open_source`).

    Raises:
        HookvizError: either is a run, ``factor`` is not above 1, or they share no layer.
    """
    for source in (first, second):
        if source.history is None:
            raise HookvizError(
                f"{source.label} is a run (one forward and backward), not a watch of training steps: "
                f"compare two runs with {advice('diff_runs')}, or save watches with {advice('save_watch')}"
            )
    norms = layer_norms(first.history), layer_norms(second.history)
    shared = [layer for layer in norms[0].layers if layer in norms[1].layers]
    if not shared:
        raise HookvizError(
            f"{first.label} and {second.label} share no layer (no module owning parameters has the same "
            f"name in both: {_few(norms[0].layers)} vs {_few(norms[1].layers)}); compare watches of "
            "the same model"
        )
    found = partings(*norms, factor)
    return Comparison(
        (first.label, second.label),
        float(factor),
        norms,
        (first.findings(), second.findings()),
        (first.onsets(), second.onsets()),
        found,
        first_parting(found),
        [norms[0].steps[row] for row, _ in aligned(*norms)],
        (
            [layer for layer in norms[0].layers if layer not in norms[1].layers],
            [layer for layer in norms[1].layers if layer not in norms[0].layers],
        ),
    )


def _apart(ratio: float) -> str:
    return "one not finite or zero" if math.isinf(ratio) else f"{text.number(ratio)}× apart"


def _few(names: list[str]) -> str:
    return json.dumps(names[:4]) + (" ..." if len(names) > 4 else "")


def _told_apart(first: Source, second: Source) -> tuple[str, str]:
    """Labels for two files of the same name: their folders' names too."""
    return tuple(
        f"{s.path.parent.name}/{s.label}" if s.path is not None else s.label for s in (first, second)
    )


def show_comparison(
    widget,
    other: str | Path | Watch | RankHistory,
    names: tuple[str, str] | list[str] | None = None,
    factor: float = DEFAULT_FACTOR,
):
    """:meth:`hookviz.Widget.compare_with`: the watch view's figure with a second run's per-layer
    lines (dashed, in each layer's colour) and the first parting marked."""
    from hookviz.watching.rank_view import RankView
    from hookviz.widget.watch_json import live_watch_figure, with_onsets

    shown = widget.watch
    if shown is None:
        raise WatchError(
            f"no watch is shown: show one first ({advice('show_watch_on_run')}), then compare_with(other)"
        )
    if widget.live is not None:
        if not getattr(shown, "closed", True):
            raise WatchError(
                "the watch on screen is still training, and its next update would redraw the figure: "
                "call compare_with(other) after the watch closes"
            )
        widget.live.wait_shown()  # the live view's last update (after close) lands before ours
    if names is not None and (
        isinstance(names, str) or len(names) != 2 or not all(isinstance(n, str) and n for n in names)
    ):
        raise HookvizError(f"names={names!r} must be two labels, e.g. names=('today', 'yesterday')")
    label_a, label_b = names or ("this run", None)
    if isinstance(shown, RankView):
        first = open_source(shown.source, shown.rank, label_a)
    else:
        first = open_source(shown, None, label_a)
    if not names:  # a file is named by its file name, an object "other"
        label_b = None if isinstance(other, (str, Path)) else "other"
    second = open_source(other, None, label_b)
    comparison = compare_sources(first, second, factor)
    figure = live_watch_figure(
        first.history, f"Gradient norms: {first.label} (solid lines) and {second.label} (dashed)"
    )
    with_onsets(figure, first.onsets())
    norms_a, norms_b = comparison.norms
    rows = {norms_a.steps[row_a]: row_b for row_a, row_b in aligned(norms_a, norms_b)}
    added = []
    for trace in figure["data"]:
        if trace.get("yaxis") != "y2" or trace.get("type") != "scatter":
            continue
        layer = "" if trace["name"] == text.ROOT_MARK else trace["name"]
        if layer not in norms_b.layers:
            continue
        column = norms_b.layers.index(layer)
        values = [norms_b.norm[rows[x], column].item() if x in rows else math.nan for x in trace["x"]]
        trace["legendgroup"] = trace["name"]
        added.append(
            {
                **trace,
                "y": [text.plotted(v) for v in values],
                "name": f"{trace['name']} ({second.label})",
                "line": {**trace["line"], "dash": "dash"},
                "customdata": [text.norm(v) for v in values],
                "hovertemplate": f"step %{{x}}<br>{trace['name']} ({second.label}) "
                "%{customdata}<extra></extra>",
            }
        )
    figure["data"].extend(added)
    if comparison.first is not None:
        layout = figure["layout"]
        layout.setdefault("shapes", []).append(
            {
                "type": "line",
                "xref": "x2",
                "yref": "paper",
                "x0": comparison.first.step,
                "x1": comparison.first.step,
                "y0": 0,
                "y1": 0.3,
                "line": {"color": STEP_COLOR, "dash": "dot", "width": 1},
            }
        )
        layout.setdefault("annotations", []).append(
            {
                "x": comparison.first.step,
                "xref": "x2",
                "y": 0.3,
                "yref": "paper",
                "yanchor": "bottom",
                "showarrow": False,
                "text": f"part at step {comparison.first.step} ({text.module_name(comparison.first.layer)})",
                "hovertext": comparison.summary(),
                "font": {"color": STEP_COLOR, "size": 11},
            }
        )
    figure["comparison"] = comparison.to_dict()
    widget.watch_heatmap = figure
    widget.comparison = comparison
    return widget
