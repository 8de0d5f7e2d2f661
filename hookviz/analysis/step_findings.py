"""Findings of one kept step of a watch, from its statistics, by the rules of a run's diagnosis.

A watch keeps four numbers per name and step (``norm, max_abs, nonfinite, zero_fraction``: the
engine's summary, :data:`hookviz.stats.reduce.SUMMARY`). :func:`step_layers` combines a step's
parameters into layers exactly as a run's :func:`~hookviz.analysis.gradient_stats.gradient_stats`
does (:func:`~hookviz.analysis.gradient_stats.module_of`,
:func:`~hookviz.analysis.gradient_stats.combine_layer`), and :func:`step_findings` hands them to
:func:`~hookviz.analysis.layer_findings.layer_diagnosis`, the run's rule for vanishing, exploding and
dead updates (an Embedding's zeros exempt). What a watch cannot see is left out: saturation needs
forward values; a NaN/Inf origin is the first name (in the order gradients arrived) whose gradient
holds NaN/Inf, not the op (record one run of that step to find the op). A watch given
``optimizer=`` also keeps each parameter's update-to-weight ratio: :func:`update_findings` names the
layers whose updates are far too large or too small for them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from hookviz.advice import advice
from hookviz.analysis.findings import Finding, grouped, module_label, percent, run_span
from hookviz.analysis.gradient_stats import combine_layer, module_of
from hookviz.analysis.layer_findings import layer_diagnosis
from hookviz.stats.reduce import COLUMN
from hookviz.text import number

# What each update-ratio finding says is wrong, and what likely causes it.
_UPDATE_WORDS = {
    "update_too_large": (
        "too large",
        "at least",
        "above",
        "update_ratio_high",
        "the learning rate is likely too high",
    ),
    "update_too_small": (
        "too small",
        "at most",
        "below",
        "update_ratio_low",
        "the weights barely move: the learning rate is too low, or the gradient vanished",
    ),
}


def step_layers(
    parameter_names: Sequence[str],
    numels: Sequence[int],
    values: Sequence[Sequence[float]],
    order: dict[int, int],
) -> dict[str, tuple[float, float]]:
    """Layer -> ``(gradient norm, zero fraction)`` of one step, nearest the loss first.

    Args:
        parameter_names: the watched parameters, one column each (the first columns of ``values``).
        numels: each parameter's element count (weights the zero fractions, as in a run).
        values: per column ``(norm, max_abs, nonfinite, zero_fraction)``; a NaN norm with no
            NaN/Inf count means no gradient (left out); a NaN zero fraction means not measured
            that step (the layer's is then NaN).
        order: ``{column: position}`` where each gradient first arrived (smaller = nearer the loss).
    """
    members: dict[str, list[tuple[float, int, float]]] = {}
    firsts: dict[str, float] = {}
    for column, name in enumerate(parameter_names):
        norm, nonfinite, zero_fraction = (
            values[column][COLUMN[s]] for s in ("norm", "nonfinite", "zero_fraction")
        )
        if math.isnan(norm) and nonfinite == 0:
            continue
        layer = module_of(name)
        members.setdefault(layer, []).append((norm, numels[column], zero_fraction))
        firsts[layer] = min(firsts.get(layer, math.inf), order.get(column, math.inf))
    ranked = sorted(members, key=lambda layer: firsts[layer])  # stable: ties keep column order
    return {layer: combine_layer(members[layer]) for layer in ranked}


def step_findings(
    names: Sequence[str],
    kinds: Sequence[str],
    numels: Sequence[int],
    module_types: dict[str, str],
    values: Sequence[Sequence[float]],
    order: dict[int, int],
    thresholds: dict,
    step: int,
    group: bool = True,
    ratios: Sequence[float] | None = None,
) -> list[Finding]:
    """The findings of one kept step: NaN/Inf, then the layers' vanishing, exploding and dead
    updates, then dead outputs, then updates too large or too small (:func:`update_findings`).

    Args:
        names, kinds: the watch's columns (``"parameter"`` first, then ``"output"``).
        numels: element counts of the parameter columns.
        module_types: module name -> class name.
        values: per column the step's four numbers (see :func:`step_layers`).
        order: where each column's gradient first arrived in backward.
        thresholds: as returned by :func:`~hookviz.analysis.diagnose.check_thresholds`.
        step: the step's number (set on every finding).
        group: one finding per run of layers in a row with the same problem; False: one per layer.
        ratios: the step's update-to-weight ratio per parameter column (NaN: not updated), or None
            (a watch without ``optimizer=``).
    """
    found = []
    bad = [c for c in range(len(names)) if values[c][2] > 0]
    if bad:
        first = min(bad, key=lambda c: order.get(c, math.inf))
        name, kind = names[first], kinds[first]
        what = f"parameter {name!r}" if kind == "parameter" else f"the output of module {name!r}"
        found.append(
            Finding(
                "nan",
                module_of(name) if kind == "parameter" else name,
                name,
                (
                    f"step {step}: the gradient of {what} is the first to hold NaN/Inf "
                    f"({int(values[first][2])} elements; {len(bad)} names have some); record one "
                    f"run of this step's batch and diagnose it, {advice('diagnose_a_step')}, to find the op"
                ),
                values[first][2],
                step,
            )
        )
    parameters = [n for n, k in zip(names, kinds) if k == "parameter"]
    layers = step_layers(parameters, numels, values, order)
    first_parameter: dict[str, str] = {}
    for name in parameters:
        first_parameter.setdefault(module_of(name), name)
    found += layer_diagnosis(layers, first_parameter, thresholds, module_types, step, group)
    outputs = [(c, n) for c, (n, k) in enumerate(zip(names, kinds)) if k == "output"]
    parents = {module_of(n) for _, n in outputs if n}
    for column, name in outputs:
        zeros = values[column][3]
        if name and name not in parents and not math.isnan(zeros) and zeros >= thresholds["dead"]:
            found.append(
                Finding(
                    "dead",
                    name,
                    name,
                    (
                        f"step {step}: {percent(zeros)} of the gradient w.r.t. the output of module "
                        f"{name!r} ({module_types.get(name)}) is exactly zero: the units after it "
                        "are dead"
                    ),
                    zeros,
                    step,
                )
            )
    if ratios is not None:
        found += update_findings(parameters, ratios, order, thresholds, step, module_types, group)
    return found


def update_flags(
    parameter_names: Sequence[str], ratios: torch.Tensor, thresholds: dict
) -> dict[str, torch.Tensor]:
    """Where updates are out of range: ``{kind: bool [steps, columns]}``, each ``True`` at the
    parameters of the layers whose update at that step was ``"update_too_large"`` (every parameter
    of the layer that the step updated has an update ratio above ``update_ratio_high``) or
    ``"update_too_small"`` (every one below ``update_ratio_low``).

    Every parameter of the layer, not one: a bias or a LayerNorm shift starts at zero, so its first
    updates are all of it (``‖Δb‖ / ‖b‖`` = 1 at step 0, 1/2 at step 1 under Adam) while the weight
    beside it moves by 1e-3 of its norm; such a layer is healthy. NaN ratios (a parameter the step
    did not update) are left out; a layer with none left is not judged.

    Args:
        parameter_names: the watched parameters, one column each.
        ratios: float64 ``[steps, len(parameter_names)]`` (more columns are ignored): per step and
            parameter ``‖w_after - w_before‖ / ‖w_after‖`` (dimensionless), NaN where not updated.
        thresholds: as returned by :func:`~hookviz.analysis.diagnose.check_thresholds`.
    """
    ratios = ratios[:, : len(parameter_names)]
    known = ~ratios.isnan()
    outside = {
        "update_too_large": ratios > thresholds["update_ratio_high"],
        "update_too_small": ratios < thresholds["update_ratio_low"],
    }
    layers: dict[str, list[int]] = {}
    for column, name in enumerate(parameter_names):
        layers.setdefault(module_of(name), []).append(column)
    found = {kind: torch.zeros_like(known) for kind in outside}
    for columns in layers.values():
        judged = known[:, columns].any(1)
        for kind, out in outside.items():
            every = (out[:, columns] | ~known[:, columns]).all(1) & judged
            found[kind][:, columns] = every[:, None] & known[:, columns]
    return found


def update_findings(
    parameter_names: Sequence[str],
    ratios: Sequence[float],
    order: dict[int, int],
    thresholds: dict,
    step: int,
    types: dict[str, str] | None = None,
    group: bool = True,
) -> list[Finding]:
    """The layers whose optimizer step at ``step`` changed their weights far more or far less than
    usual (:func:`update_flags`), nearest the loss first; a layer's finding points at its
    parameter nearest the threshold (all of them are beyond it).

    The usual diagnostic of a learning rate: the ratio of an update's norm to the weights' norm,
    ``‖Δw‖ / ‖w‖``, is healthy near 1e-3; much larger, the learning rate is too high; much smaller,
    too low (Stanford CS231n, "Neural Networks Part 3", "Ratio of weights:updates",
    https://cs231n.github.io/neural-networks-3/#ratio). The thresholds sit two decades either side
    of it: above ``update_ratio_high=1e-1`` a single step moves a layer by a tenth of its weights
    (a learning rate about 100x the usual; such training oscillates or diverges), below
    ``update_ratio_low=1e-5`` a layer needs 100,000 steps to change by its own size (a learning
    rate about 100x too small, or a gradient that vanished). One decade either side would flag
    healthy runs: Adam's first steps move a 32-wide layer by about 1e-2, and a fine-tuning run's
    small learning rate gives 1e-4.

    Args:
        parameter_names: the watched parameters, one column each.
        ratios: per column the step's update-to-weight ratio (NaN: not updated).
        order: ``{column: position}`` where each gradient first arrived in backward (smaller =
            nearer the loss): the layers are listed in that order.
        thresholds: as returned by :func:`~hookviz.analysis.diagnose.check_thresholds`.
        step: the step's number (set on every finding).
        types: module name -> class name, for the messages.
        group: one finding per run of layers in a row with the same problem; False: one per layer.
    """
    flags = update_flags(parameter_names, torch.tensor([list(ratios)], dtype=torch.float64), thresholds)
    flagged = {}  # layer -> (kind, ratio, column): the smallest ratio above, the largest below
    for kind, table in flags.items():
        for column in table[0].nonzero().flatten().tolist():
            layer, ratio = module_of(parameter_names[column]), ratios[column]
            now = flagged.get(layer)
            if now is None or (ratio < now[1] if kind == "update_too_large" else ratio > now[1]):
                flagged[layer] = (kind, ratio, column)
    if not flagged:
        return []
    first: dict[str, float] = {}
    for column, name in enumerate(parameter_names):
        layer = module_of(name)
        first[layer] = min(first.get(layer, math.inf), order.get(column, math.inf))
    layers = sorted(first, key=lambda layer: first[layer])  # stable: ties keep column order
    findings: list[Finding | None] = []
    for layer in layers:
        if layer not in flagged:
            findings.append(None)
            continue
        kind, ratio, column = flagged[layer]
        size, bound, side, limit, why = _UPDATE_WORDS[kind]
        findings.append(
            Finding(
                kind,
                layer,
                parameter_names[column],
                (
                    f"step {step}: the updates of {module_label(layer, types)} are {size}: every "
                    f"parameter's update-to-weight ratio ‖Δw‖/‖w‖ is {bound} {number(ratio)} ({side} "
                    f"{number(thresholds[limit])}; healthy near 1e-3): {why}"
                ),
                ratio,
                step,
            )
        )

    def describe(run: list[Finding]) -> str:
        size, _, side, limit, why = _UPDATE_WORDS[run[0].kind]
        return (
            f"step {step}: the updates are {size} from {run_span(run, types)}: update-to-weight "
            f"ratios ‖Δw‖/‖w‖ {number(run[0].value)} … {number(run[-1].value)} ({side} "
            f"{number(thresholds[limit])}; healthy near 1e-3): {why}"
        )

    return grouped(findings, describe, group)
