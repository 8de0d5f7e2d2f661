"""When a watch's trouble started, and where: the onset of every kind of finding a watch's diagnosis
makes (NaN/Inf, exploding, vanishing, dead, updates too large or too small).

A watch's findings at one step (:meth:`hookviz.Watch.diagnose`) say what is wrong then; once a
gradient has held NaN it usually holds NaN at every later step, so the last step's finding names
neither when it started nor where. :func:`onsets` reads every kept step at once and names, for
each kind of trouble, the first kept step that has it, the name (in the order backward reached
them) that had it first then, and the run of layers that had it then.

A step that did not measure a statistic neither has nor lacks the trouble it shows: a watch reads
zero fractions and update ratios only every ``stats_every``-th step
(:meth:`hookviz.watching.history.History.measured`), so an onset counts the steps that had it
among the steps that measured it ("13 of the 13 steps measured"), never among all kept steps.
"""

from __future__ import annotations

import math

import torch

from hookviz.analysis.diagnose import check_thresholds
from hookviz.analysis.findings import Finding, module_label, run_span
from hookviz.analysis.gradient_stats import module_of
from hookviz.analysis.step_findings import step_findings, update_flags
from hookviz.text import number, percent

# The statistic each kind of finding reads, and its name in an onset's words.
STATISTIC = {
    "nan": "nonfinite",
    "exploding": "norm",
    "vanishing": "norm",
    "dead": "zero_fraction",
    "update_too_large": "update_ratio",
    "update_too_small": "update_ratio",
}
_WORDS = {
    "nonfinite": "NaN/Inf counts",
    "norm": "gradient norms",
    "zero_fraction": "zero fractions",
    "update_ratio": "update ratios",
}


def onsets(history, order: dict[int, int] | None = None, **thresholds: float) -> list[Finding]:
    """The onset of each kind of finding: the first kept step with NaN/Inf in a gradient, with a
    gradient norm above ``exploding_norm``, with a layer whose gradient vanishes or whose
    gradients (or a module output's) are dead by the diagnosis's own rule
    (:func:`hookviz.analysis.step_findings.step_findings`), and, with update ratios
    (``optimizer=``), with a layer updated too much or too little
    (:func:`hookviz.analysis.step_findings.update_flags`); each a :class:`Finding` whose ``step`` is
    that onset step.

    Args:
        history: a :class:`hookviz.watching.history.History` (``watch.history``; ``steps``,
            ``names``, ``kinds``, float64 ``[steps, names]`` statistics, ``measured()``;
            ``numels``, ``module_types``, ``loss_scales``, ``optimizers``, ``update_ratio`` and
            ``pre_clip_norm`` when known). Without ``numels`` (a gathered history) a layer's zero
            fraction is not known: no dead-update onset, as its diagnosis has none.
        order: ``{column: position}`` where each name's gradient arrived in backward
            (:attr:`hookviz.Watch.arrival_order`): at the onset step the place named is the first
            bad name in that order; None (a loaded history): the first bad column.
        **thresholds: those of :func:`hookviz.analysis.diagnose.diagnose` (its defaults). A step
            of a watch without ``optimizer=`` whose gradients carry a ``GradScaler`` scale
            compares its norms with ``exploding_norm`` times that scale, as
            :meth:`hookviz.Watch.diagnose` does.

    Returns:
        At most one finding per kind, the earlier onset first (``"nan"`` on a tie): ``module`` the
        module owning the name (a parameter's owner, or the module whose output it is), ``node``
        the name, ``value`` the count of NaN/Inf elements (nan), the norm (exploding), the ratio to
        the layer nearest the loss (vanishing), the zero fraction (dead) or the update ratio
        (update_too_large, update_too_small) at the onset, ``step`` the onset step, ``modules`` the
        places that had it then, nearest the loss first. Empty when no kept step has any.

    Raises:
        HookvizError (from :func:`check_thresholds`): an unknown or out-of-range threshold.
    """
    limits = check_thresholds(thresholds)
    steps = list(history.steps)
    if not steps:
        return []
    order = order or {}
    flags: dict[str, tuple[torch.Tensor, torch.Tensor, str]] = {}  # kind -> (flags, values, limit)
    preferred = {}  # kind -> the flags to name first
    bad = history.nonfinite > 0  # [steps, names]
    flags["nan"] = (bad, history.nonfinite, "")
    limit = torch.full((len(steps),), float(limits["exploding_norm"]), dtype=torch.float64)
    scales = list(getattr(history, "loss_scales", []) or [])
    optimizers = list(getattr(history, "optimizers", []) or [])
    for i, scale in enumerate(scales[: len(steps)]):
        # without optimizer= the gradients carry GradScaler's scale (an optimizer step unscaled them)
        if (i >= len(optimizers) or not optimizers[i]) and scale > 0 and math.isfinite(scale):
            limit[i] *= scale
    exploding = (history.norm > limit[:, None]) & ~bad  # a NaN norm compares False
    layered = _layer_flags(history, order, limits, limit)
    # a name's own norm above the limit (an alarm), or a layer the diagnosis says explodes
    by_layer, layer_norms = layered.pop("exploding")
    preferred["exploding"] = exploding
    norms = torch.where(by_layer & ~exploding, layer_norms, history.norm)
    flags["exploding"] = (
        exploding | by_layer,
        norms,
        f"a norm above exploding_norm={number(limits['exploding_norm'])}, or a layer's above "
        f"exploding={number(limits['exploding'])} x that of the layer nearest the loss",
    )
    for kind, (found, values) in layered.items():
        flags[kind] = (
            found,
            values,
            number(limits["vanishing"]) if kind == "vanishing" else percent(limits["dead"]),
        )
    ratios = getattr(history, "update_ratio", None)
    if ratios is not None and ratios.shape[0] == len(steps):
        parameters = [n for n, k in zip(history.names, history.kinds) if k == "parameter"]
        for kind, found in update_flags(parameters, ratios, limits).items():
            wide = torch.zeros(ratios.shape, dtype=torch.bool)
            wide[:, : len(parameters)] = found
            limit_name = "update_ratio_high" if kind == "update_too_large" else "update_ratio_low"
            flags[kind] = (wide, ratios, number(limits[limit_name]))
    found = []
    for kind, (where, values, limit_text) in flags.items():
        finding = _first(history, order, where, kind, values, limit_text, preferred.get(kind))
        if finding is not None:
            found.append(finding)
    return sorted(found, key=lambda f: f.step)  # the story in order: what started first


def _layer_flags(
    history, order: dict[int, int], limits: dict, exploding_norm: torch.Tensor
) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """``{"vanishing" | "dead" | "exploding": (bool [steps, names], float64 [steps, names])}``:
    where each step's own diagnosis (:func:`step_findings`, one finding per layer, its
    ``exploding_norm`` that of the step: ``exploding_norm`` [steps]) found a vanishing, dead or
    exploding gradient, set on the columns of the layer (or module output) it names, with its
    value. Only steps that may have one are diagnosed: a vanishing layer's norm is below
    ``vanishing`` times the step's total norm, an exploding one above ``exploding`` times the
    smallest or above ``exploding_norm``, a dead one has a column at least ``dead`` zero."""
    names, kinds = history.names, history.kinds
    parameters = [c for c, k in enumerate(kinds) if k == "parameter"]
    norm = history.norm.clone()
    pre_clip = getattr(history, "pre_clip_norm", None)
    if pre_clip is not None:  # with optimizer=, vanishing reads the norms before clipping, as diagnose
        norm = torch.where(pre_clip.isnan(), norm, pre_clip)
    zeros = history.zero_fraction.clone()
    numels = list(getattr(history, "numels", []) or [])
    if len(numels) != len(parameters):  # element counts unknown: no layer's zero fraction
        zeros[:, parameters] = math.nan
        numels = [1] * len(parameters)
    table = torch.stack((norm, history.max_abs, history.nonfinite, zeros), dim=-1)
    finite = norm[:, parameters].where(norm[:, parameters].isfinite(), math.nan)
    total = finite.nan_to_num(0.0).square().sum(1).sqrt()
    smallest = finite.nan_to_num(math.inf).min(1).values if parameters else total
    maybe = (
        (smallest < limits["vanishing"] * total)
        | (smallest * limits["exploding"] < total)
        | (total > exploding_norm)
        | (zeros >= limits["dead"]).any(1)
    )
    result = {
        kind: (
            torch.zeros(norm.shape, dtype=torch.bool),
            torch.full(norm.shape, math.nan, dtype=torch.float64),
        )
        for kind in ("vanishing", "dead", "exploding")
    }
    columns_of: dict[str, list[int]] = {}
    for column in parameters:
        columns_of.setdefault(module_of(names[column]), []).append(column)
    types = dict(getattr(history, "module_types", {}) or {})
    outputs = {n for n, k in zip(names, kinds) if k == "output"}
    for row in maybe.nonzero().flatten().tolist():
        for finding in step_findings(
            names,
            kinds,
            numels,
            types,
            table[row].tolist(),
            order,
            dict(limits, exploding_norm=exploding_norm[row].item()),
            history.steps[row],
            False,
        ):
            if finding.kind not in result:
                continue
            if finding.node == finding.module and finding.module in outputs:  # a module output's
                columns = [names.index(finding.module)]
            else:  # a layer's: its parameters
                columns = columns_of.get(finding.module, [])
            where, values = result[finding.kind]
            where[row, columns] = True
            values[row, columns] = finding.value
    return result


def _places(history, order: dict[int, int]) -> tuple[list[str], dict[str, tuple[float, int]]]:
    """Each column's place (a parameter's layer, :func:`module_of`; a module output's module) and
    each place's rank: where its first gradient arrived in backward (ties: column order)."""
    place_of = [module_of(n) if k == "parameter" else n for n, k in zip(history.names, history.kinds)]
    rank: dict[str, tuple[float, int]] = {}
    for column, place in enumerate(place_of):
        rank[place] = min(rank.get(place, (math.inf, column)), (order.get(column, math.inf), column))
    return place_of, rank


def _span(flagged: list[str], present: list[str], types: dict[str, str]) -> str:
    """The places that had a trouble at its onset, in words: one module, a run of modules in a row
    among those that got a gradient then ("module '30' down to module '0' (31 Linear layers in a
    row)"), or a count and the first."""
    if len(flagged) == 1:
        return module_label(flagged[0], types)
    at = [present.index(p) for p in flagged]
    if at == list(range(at[0], at[0] + len(at))):
        return run_span([Finding("", p, None, "") for p in flagged], types)
    return f"{len(flagged)} modules, the first {module_label(flagged[0], types)}"


def _first(
    history,
    order,
    flags: torch.Tensor,
    kind: str,
    values: torch.Tensor,
    limit: str,
    preferred: torch.Tensor | None = None,
) -> Finding | None:
    """The onset finding of ``flags`` ([steps, names] bool), or None when none is set; ``limit``:
    the threshold's text; ``preferred`` ([steps, names] bool, within ``flags``): the names to
    point at first (an exploding name's own norm, before the layer it is in)."""
    rows = flags.any(1).nonzero().flatten().tolist()
    if not rows:
        return None
    first, last = rows[0], rows[-1]
    columns = flags[first].nonzero().flatten().tolist()
    named = (
        columns
        if preferred is None or not preferred[first].any()
        else preferred[first].nonzero().flatten().tolist()
    )
    column = min(named, key=lambda c: (order.get(c, math.inf), c))
    name, what = history.names[column], history.kinds[column]
    module = module_of(name) if what == "parameter" else name
    place = f"parameter {name!r}" if what == "parameter" else f"the output of module {name!r}"
    types = dict(getattr(history, "module_types", {}) or {})
    place_of, rank = _places(history, order)
    got, kinds = history.gradient()[first].tolist(), history.kinds
    # layers and module outputs are spanned apart: each is a sequence of its own in backward
    present = sorted({place_of[c] for c, k in enumerate(kinds) if k == what and got[c]}, key=rank.__getitem__)
    flagged = sorted({place_of[c] for c in columns if kinds[c] == what}, key=rank.__getitem__)
    others = sorted({place_of[c] for c in columns if kinds[c] != what}, key=rank.__getitem__)
    span = _span(flagged, present, types)
    if others:
        span += f" and {len(others)} {'module outputs' if what == 'parameter' else 'layers'}"
    flagged += others
    statistic = STATISTIC[kind]
    measured = history.measured(statistic).any(1)[first:]
    steps = history.steps
    counted, kept, hit = int(measured.sum()), len(steps) - first, len(rows)
    value = values[first, column].item()
    if hit == counted and hit > 1:
        since = (
            f"it stays: every one of the {counted} steps measured from step {steps[first]} to "
            f"{steps[last]} has it"
        )
    elif hit == 1:
        since = f"only at step {steps[first]}" + (
            f", of the {counted} steps measured from it on" if counted > 1 else ", the last step measured"
        )
    else:
        since = (
            f"{hit} of the {counted} steps measured from step {steps[first]} on have it, "
            f"the last at step {steps[last]}"
        )
    if counted < kept:
        since += (
            f" ({_WORDS[statistic]} were measured at {counted} of the {kept} kept steps from step "
            f"{steps[first]} on)"
        )
    at = f"at step {steps[first]}, in {span}"
    if kind == "nan":
        head = (
            f"NaN/Inf first {at}: the gradient of {place} held it first "
            f"({number(value)} elements; {len(columns)} names had some then)"
        )
    elif kind == "exploding":
        head = f"the gradient first exploded {at}: {place} first (norm {number(value)}; thresholds: {limit})"
    elif kind == "vanishing":
        head = (
            f"the gradient first vanished {at}: that of {module_label(module, types)} was "
            f"{number(value)} x that of the layer nearest the loss (threshold: below {limit} x)"
        )
    elif kind == "dead":
        whose = f"the output of module {name!r}" if what == "output" else module_label(module, types)
        head = (
            f"gradients first dead {at}: {percent(value)} of the gradient of {whose} was exactly "
            f"zero (threshold: {limit} or more; no gradient reaches the units, e.g. they never fire)"
        )
    else:
        size, side = ("too large", "more") if kind == "update_too_large" else ("too small", "less")
        head = (
            f"updates {size} for the weights first {at}: every parameter changed by {side} than "
            f"{limit} of its norm (‖Δw‖/‖w‖ of {name!r}: {number(value)}; healthy near 1e-3)"
        )
    return Finding(
        kind,
        module,
        name,
        f"{head}; {since}",
        value,
        steps[first],
        modules=tuple(flagged) if len(flagged) > 1 else (),
    )
