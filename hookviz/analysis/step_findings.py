"""Findings of one kept step of a watch, from its statistics, by the rules of a run's diagnosis.

A watch keeps four numbers per name and step (``norm, max_abs, nonfinite, zero_fraction``: the
engine's summary, :data:`hookviz.stats.reduce.SUMMARY`). :func:`step_layers` combines a step's
parameters into layers exactly as a run's :func:`~hookviz.analysis.gradient_stats.gradient_stats`
does (:func:`~hookviz.analysis.gradient_stats.module_of`,
:func:`~hookviz.analysis.gradient_stats.combine_layer`), and :func:`step_findings` hands them to
:func:`~hookviz.analysis.layer_findings.layer_diagnosis`, the run's rule for vanishing, exploding and
dead updates (an Embedding's zeros exempt). What a watch cannot see is left out: saturation needs
forward values; a NaN/Inf origin is the first name (in the order gradients arrived) whose gradient
holds NaN/Inf, not the op (record one run of that step to find the op).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from hookviz.analysis.findings import Finding, percent
from hookviz.analysis.gradient_stats import combine_layer, module_of
from hookviz.analysis.layer_findings import layer_diagnosis


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
        norm, _, nonfinite, zero_fraction = values[column]
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
) -> list[Finding]:
    """The findings of one kept step: NaN/Inf, then the layers' vanishing, exploding and dead
    updates, then dead outputs.

    Args:
        names, kinds: the watch's columns (``"parameter"`` first, then ``"output"``).
        numels: element counts of the parameter columns.
        module_types: module name -> class name.
        values: per column the step's four numbers (see :func:`step_layers`).
        order: where each column's gradient first arrived in backward.
        thresholds: as returned by :func:`~hookviz.analysis.diagnose.check_thresholds`.
        step: the step's number (set on every finding).
        group: one finding per run of layers in a row with the same problem; False: one per layer.
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
                    "run of this step with hookviz.Session(...).run().diagnose() to find the op"
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
    return found
