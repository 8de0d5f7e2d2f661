"""The watch view's step rows: update-to-weight ratios and learning rates under the heatmap, skipped steps.

A watch given ``optimizer=`` keeps, per step, each parameter's update-to-weight ratio
``‖Δw‖ / ‖w‖`` and each param group's learning rate (:mod:`hookviz.watching.optimizer_steps`), and
marks the steps a ``GradScaler`` skipped. The heatmap's figure carries them as ``step_rows``
(:func:`with_step_rows`): one row with the total gradient norm before clipping and as the optimizer
stepped on it (the clip bound where it clipped), one per layer (its ratio) and one per optimizer's
param group (its learning rate), each cell's text and colour made here; the page draws the rows
under the heatmap on the same step axis and marks the skipped steps across the figure
(``js/src/heatmap_figure.js``, ``heatmapWithStep``). It formats and colours nothing itself.
"""

from __future__ import annotations

import math

from hookviz.advice import advice
from hookviz.analysis.diagnose import DEFAULT_THRESHOLDS
from hookviz.analysis.gradient_stats import module_of
from hookviz.analysis.step_findings import update_flags
from hookviz.colors import (
    EXPLODING_COLOR,
    LEARNING_RATE_COLORS,
    NAN_COLOR,
    NOT_WATCHED_COLOR,
    SKIPPED_COLOR,
    UPDATE_RATIO_COLORS,
    learning_rate_color,
)
from hookviz.text import MISSING, module_name, number

SKIPPED_TEXT = "skipped (Inf/NaN found): optimizer.step() did not run"
# a step's total norm this much below the one before clipping: clipped (float32 sums differ less)
CLIPPED = 1e-4
# Reading ‖Δw‖/‖w‖ copies every weight before the step: it comes with the other statistics only.
NOT_READ_TEXT = (
    "not read at this step (read with every statistic: every stats_every-th step and at an alarm; "
    f"{advice('watch_every_step')} reads every step)"
)


def step_rows(history, picked: list[int] | None = None) -> dict:
    """What the page draws under a watch's heatmap: ``{steps, rows, skipped, legend}``.

    Args:
        history: a :class:`hookviz.watching.history.History` (``update_ratio``, ``optimizers``,
            ``skipped``, ``learning_rates`` per step; empty or None for a watch without
            ``optimizer=``, which then has no rows).
        picked: the indices of the kept steps the figure shows (a live figure draws at most a few
            hundred); None for every kept step.

    Returns:
        ``steps``: the step numbers of the cells (the figure's x). ``rows``: ``[{label, kind,
        colors, text}]``, ``kind`` ``"grad_norm"`` (with ``optimizer=``: the total gradient norm
        before clipping and as stepped on, with the clip bound where it clipped),
        ``"update_ratio"`` (one per layer, nearest the input first, as
        the heatmap lists parameters: its first parameter's ratio, the others on hover) or
        ``"learning_rate"`` (one per optimizer and param group); ``colors`` and ``text``: one per
        step (an update ratio's category, :func:`update_categories`;
        :func:`hookviz.colors.learning_rate_color`; :func:`hookviz.text.number`). ``skipped``:
        ``{steps, color, text}``, the steps the ``GradScaler`` skipped. ``legend``: ``[{color,
        text}]`` of the ratio colours, naming the thresholds.
    """
    indices = list(range(len(history.steps))) if picked is None else picked
    steps = [history.steps[i] for i in indices]
    skipped_flags = list(getattr(history, "skipped", []) or [])
    skipped = [i < len(skipped_flags) and bool(skipped_flags[i]) for i in indices]
    rows = _norm_rows(history, indices, skipped)
    rows += _ratio_rows(history, indices, skipped) + _rate_rows(history, indices, skipped)
    low, high = DEFAULT_THRESHOLDS["update_ratio_low"], DEFAULT_THRESHOLDS["update_ratio_high"]
    return {
        "steps": steps,
        "rows": rows,
        "skipped": {
            "steps": [s for s, skip in zip(steps, skipped) if skip],
            "color": SKIPPED_COLOR,
            "text": SKIPPED_TEXT,
        },
        "legend": [
            {"color": UPDATE_RATIO_COLORS["small"], "text": f"‖Δw‖/‖w‖ below {number(low)}: too small"},
            {"color": UPDATE_RATIO_COLORS["healthy"], "text": f"{number(low)} to {number(high)}: healthy"},
            {"color": UPDATE_RATIO_COLORS["large"], "text": f"above {number(high)}: too large"},
            {"color": NAN_COLOR, "text": "NaN/Inf"},
            # every colour drawn has its key: a cell with no ratio is "not measured", never "no grad"
            {"color": NOT_WATCHED_COLOR, "text": "not measured at this step"},
        ]
        if any(row["kind"] == "update_ratio" for row in rows)
        else [],
    }


def with_step_rows(figure: dict, history, picked: list[int] | None = None) -> dict:
    """``figure`` (a watch's heatmap figure dict) with its :func:`step_rows` as ``step_rows`` when
    the watch has rows or skipped steps to show; changed in place and returned."""
    rows = step_rows(history, picked)
    if rows["rows"] or rows["skipped"]["steps"]:
        figure["step_rows"] = rows
    return figure


def _norm_rows(history, indices: list[int], skipped: list[bool]) -> list[dict]:
    """One row with ``optimizer=``: per step the total gradient norm as the backward left it
    (before clipping) and as the optimizer stepped on it, and the clip bound where it clipped."""
    totals = list(getattr(history, "pre_clip_total", []) or [])
    if len(totals) != len(history.steps) or not any(math.isfinite(t) for t in totals):
        return []
    parameters = [c for c, kind in enumerate(history.kinds) if kind == "parameter"]
    norms = history.norm[:, parameters].nan_to_num(0.0).square().sum(1).sqrt().tolist()
    label = "‖grad‖ total"
    colors, text = [], []
    for i, skip in zip(indices, skipped):
        before, after = totals[i], norms[i]
        clipped = math.isfinite(before) and after < before * (1 - CLIPPED)
        if skip or not math.isfinite(before):
            # skipped: the skipped steps' colour; NaN: not read at this step; Inf: non-finite
            colors.append(SKIPPED_COLOR if skip else NOT_WATCHED_COLOR if math.isnan(before) else NAN_COLOR)
            said = SKIPPED_TEXT if skip else f"before clipping {number(before)}"
        elif clipped:
            colors.append(EXPLODING_COLOR)
            said = (
                f"before clipping {number(before)}, stepped on {number(after)}: clipped to a bound "
                f"of {number(after)} (clip_grad_norm_'s max_norm)"
            )
        else:
            colors.append(LEARNING_RATE_COLORS[0])
            said = f"{number(before)}, not clipped"
        text.append(f"step {history.steps[i]}<br>total gradient norm: {said}")
    return [{"label": label, "kind": "grad_norm", "colors": colors, "text": text}]


CATEGORY_WORDS = {"small": "too small", "healthy": "healthy", "large": "too large"}


def update_categories(history, indices: list[int]) -> list[dict[str, str]]:
    """Per picked step (``indices`` of the kept steps), ``{layer: "small" | "healthy" |
    "large"}`` of each layer with an update ratio read then: as the update findings judge it
    (:func:`hookviz.analysis.step_findings.update_flags` at the default thresholds, every
    parameter of the layer beyond one), so a cell's colour says what the finding says."""
    parameters = [c for c, kind in enumerate(history.kinds) if kind == "parameter"]
    names = [history.names[c] for c in parameters]
    ratios = history.update_ratio[indices][:, parameters]
    flags = {kind: table.tolist() for kind, table in update_flags(names, ratios, DEFAULT_THRESHOLDS).items()}
    read = history.measured("update_ratio")[indices][:, parameters].tolist()
    found = []
    for cell in range(len(indices)):
        layers: dict[str, str] = {}
        for position, name in enumerate(names):
            if not read[cell][position]:
                continue
            layer = module_of(name)
            if flags["update_too_large"][cell][position]:
                layers[layer] = "large"
            elif flags["update_too_small"][cell][position]:
                layers[layer] = "small"
            else:
                layers.setdefault(layer, "healthy")
        found.append(layers)
    return found


def _ratio_rows(history, indices: list[int], skipped: list[bool]) -> list[dict]:
    ratios = getattr(history, "update_ratio", None)
    if ratios is None or not ratios.numel() or ratios.shape[0] != len(history.steps) or not indices:
        return []
    parameters = [c for c, kind in enumerate(history.kinds) if kind == "parameter"]
    read = history.measured("update_ratio")[indices][:, parameters].tolist()
    if not any(any(row) for row in read):
        return []
    table = ratios[indices][:, parameters].tolist()
    layers: dict[str, list[int]] = {}
    for position, column in enumerate(parameters):
        layers.setdefault(module_of(history.names[column]), []).append(position)
    steps = [history.steps[i] for i in indices]
    categories = update_categories(history, indices)
    rows = []
    for layer, positions in layers.items():
        label = f"‖Δw‖/‖w‖ of {module_name(layer)}"
        colors, text = [], []
        for cell, (step, skip) in enumerate(zip(steps, skipped)):
            values = [(history.names[parameters[p]], table[cell][p], read[cell][p]) for p in positions]
            category = categories[cell].get(layer)
            if category is None:  # no ratio of this layer read at this step
                colors.append(NOT_WATCHED_COLOR)
                said = SKIPPED_TEXT if skip else "not updated" if any(read[cell]) else NOT_READ_TEXT
            else:
                finite = any(math.isfinite(v) for _, v, known in values if known)
                colors.append(UPDATE_RATIO_COLORS[category] if finite else NAN_COLOR)
                said = ", ".join(f"{name} {number(v) if known else MISSING}" for name, v, known in values)
                said += f" ({CATEGORY_WORDS[category]})" if finite else ""
            text.append(f"step {step}<br>{label}: {said}")
        rows.append({"label": label, "kind": "update_ratio", "colors": colors, "text": text})
    return rows


def _rate_rows(history, indices: list[int], skipped: list[bool]) -> list[dict]:
    rates = list(getattr(history, "learning_rates", []) or [])
    optimizers = list(getattr(history, "optimizers", []) or [])
    if not any(rates):
        return []
    groups: dict[tuple[str, int], dict[int, float]] = {}  # (optimizer, group) -> {cell: lr}
    for cell, i in enumerate(indices):
        name = optimizers[i] if i < len(optimizers) else ""
        for group, rate in enumerate(rates[i] if i < len(rates) else []):
            groups.setdefault((name, group), {})[cell] = rate
    rows = []
    for (name, group), cells in groups.items():
        positive = [math.log10(r) for r in cells.values() if math.isfinite(r) and r > 0]
        lo, hi = (min(positive), max(positive)) if positive else (0.0, 0.0)
        label = f"lr {name or 'optimizer'}" + (f" group {group}" if len(_groups_of(groups, name)) > 1 else "")
        colors, text = [], []
        for cell, i in enumerate(indices):
            rate = cells.get(cell)
            fraction = (
                0.5 if hi <= lo or rate is None or not rate > 0 else (math.log10(rate) - lo) / (hi - lo)
            )
            colors.append(NOT_WATCHED_COLOR if rate is None else learning_rate_color(fraction))
            said = "another optimizer's step" if rate is None else number(rate)
            text.append(
                f"step {history.steps[i]}<br>{label}: {said}" + (" (skipped)" if skipped[cell] else "")
            )
        rows.append({"label": label, "kind": "learning_rate", "colors": colors, "text": text})
    return rows


def _groups_of(groups: dict, name: str) -> list[int]:
    return [group for optimizer, group in groups if optimizer == name]
