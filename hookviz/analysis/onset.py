"""When a watch's trouble started, and where: the onset of NaN/Inf, of exploding norms and of updates
too large or too small for the weights.

A watch's findings at one step (:meth:`hookviz.Watch.diagnose`) say what is wrong then; once a
gradient has held NaN it usually holds NaN at every later step, so the last step's finding names
neither when it started nor where. :func:`onsets` reads every kept step at once and names, for
each kind of trouble, the first kept step that has it and the first name (in the order backward
reached them) that had it at that step.
"""

from __future__ import annotations

import math

import torch

from hookviz.analysis.diagnose import check_thresholds
from hookviz.analysis.findings import Finding
from hookviz.analysis.gradient_stats import module_of
from hookviz.analysis.step_findings import update_flags
from hookviz.text import number


def onsets(history, order: dict[int, int] | None = None, **thresholds: float) -> list[Finding]:
    """The first kept step with NaN/Inf in a gradient, the first with a gradient norm above
    ``exploding_norm`` and, with update ratios (``optimizer=``), the first whose update of a layer
    was too large or too small (:func:`hookviz.analysis.step_findings.update_flags`), each as a
    :class:`Finding` whose ``step`` is that onset step.

    Args:
        history: a :class:`hookviz.watching.history.History` (``watch.history``; ``steps``,
            ``names``, ``kinds``, and float64 ``norm`` / ``nonfinite`` of shape ``[steps, names]``;
            ``loss_scales``, ``optimizers`` and ``update_ratio`` when known).
        order: ``{column: position}`` where each name's gradient arrived in backward
            (:attr:`hookviz.Watch.arrival_order`): at the onset step the place named is the first
            bad name in that order; None (a loaded history): the first bad column.
        **thresholds: ``exploding_norm``, ``update_ratio_high``, ``update_ratio_low`` (defaults
            those of :func:`hookviz.analysis.diagnose.diagnose`).
            A step of a watch without ``optimizer=`` whose gradients carry a ``GradScaler`` scale
            compares its norms with the threshold times that scale, as :meth:`hookviz.Watch.diagnose` does.

    Returns:
        At most one finding per kind, the earlier onset first (``"nan"`` on a tie): ``module`` the
        module owning the name (a parameter's owner, or the module whose output it is), ``node``
        the name, ``value`` the count of NaN/Inf elements (nan), the norm (exploding) or the update
        ratio (update_too_large, update_too_small) at the onset, ``step`` the onset step.
        Empty when no kept step has either.

    Raises:
        HookvizError (from :func:`check_thresholds`): an unknown or out-of-range threshold.
    """
    limits = check_thresholds(thresholds)
    steps = list(history.steps)
    if not steps:
        return []
    found = []
    bad = history.nonfinite > 0  # [steps, names]
    finding = _first(history, order, bad, "nan", history.nonfinite, "")
    if finding is not None:
        found.append(finding)
    limit = torch.full((len(steps),), float(limits["exploding_norm"]), dtype=torch.float64)
    scales = list(getattr(history, "loss_scales", []) or [])
    optimizers = list(getattr(history, "optimizers", []) or [])
    for i, scale in enumerate(scales[: len(steps)]):
        # without optimizer= the gradients carry GradScaler's scale (an optimizer step unscaled them)
        if (i >= len(optimizers) or not optimizers[i]) and scale > 0 and math.isfinite(scale):
            limit[i] *= scale
    exploding = (history.norm > limit[:, None]) & ~bad  # a NaN norm compares False
    finding = _first(history, order, exploding, "exploding", history.norm, number(limits["exploding_norm"]))
    if finding is not None:
        found.append(finding)
    ratios = getattr(history, "update_ratio", None)
    if ratios is not None and ratios.shape[0] == len(steps):
        parameters = [n for n, k in zip(history.names, history.kinds) if k == "parameter"]
        for kind, flags in update_flags(parameters, ratios, limits).items():
            wide = torch.zeros(ratios.shape, dtype=torch.bool)
            wide[:, : len(parameters)] = flags
            limit = limits["update_ratio_high" if kind == "update_too_large" else "update_ratio_low"]
            finding = _first(history, order, wide, kind, ratios, number(limit))
            if finding is not None:
                found.append(finding)
    return sorted(found, key=lambda f: f.step)  # the story in order: what started first


def _first(
    history, order, flags: torch.Tensor, kind: str, values: torch.Tensor, limit: str
) -> Finding | None:
    """The onset finding of ``flags`` ([steps, names] bool), or None when none is set; ``limit``:
    the threshold's text."""
    rows = flags.any(1).nonzero().flatten().tolist()
    if not rows:
        return None
    first, last = rows[0], rows[-1]
    columns = flags[first].nonzero().flatten().tolist()
    order = order or {}
    column = min(columns, key=lambda c: (order.get(c, math.inf), c))
    name, what = history.names[column], history.kinds[column]
    module = module_of(name) if what == "parameter" else name
    place = f"parameter {name!r}" if what == "parameter" else f"the output of module {name!r}"
    steps = history.steps
    value = values[first, column].item()
    if len(rows) == 1:
        since = f"only at step {steps[first]}"
    elif len(rows) == len(steps) - first:
        since = f"it stays: every kept step from {steps[first]} to {steps[last]} has it ({len(rows)} steps)"
    else:
        since = (
            f"{len(rows)} of the {len(steps) - first} kept steps from step {steps[first]} on have it, "
            f"the last at step {steps[last]}"
        )
    if kind == "nan":
        head = (
            f"NaN/Inf first at step {steps[first]}: the gradient of {place} held it first "
            f"({number(value)} elements; {len(columns)} names had some then)"
        )
    elif kind == "exploding":
        head = (
            f"the gradient norm first passed exploding_norm={limit} at step {steps[first]}: {place} "
            f"(norm {number(value)}; {len(columns)} names passed it then)"
        )
    else:
        size, side = ("too large", "more") if kind == "update_too_large" else ("too small", "less")
        head = (
            f"updates {size} for the weights first at step {steps[first]}: every parameter of "
            f"module {module!r} changed by {side} than {limit} of its norm (‖Δw‖/‖w‖ of {name!r}: "
            f"{number(value)}; healthy near 1e-3)"
        )
    return Finding(kind, module, name, f"{head}; {since}", value, steps[first])
