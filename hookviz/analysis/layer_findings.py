"""Vanishing, exploding and dead-update findings from layer gradient norms (of a run or a watch step).

Runs (:func:`hookviz.analysis.diagnose.diagnose`) and watches
(:func:`hookviz.analysis.step_findings.step_findings`) both call :func:`layer_diagnosis` with their
layers combined by :func:`hookviz.analysis.gradient_stats.combine_layer`, so a layer means the same
in both. The thresholds and their meaning: :mod:`hookviz.analysis.diagnose`.
"""

from __future__ import annotations

import math

from hookviz.analysis.findings import Finding, grouped, module_label, percent, run_span
from hookviz.analysis.gradient_stats import ratio_of
from hookviz.text import number

# Layers whose parameter gradient is mostly zero by design (only the rows looked up get one): their
# zeros are not dead updates.
SPARSE_BY_DESIGN = {"Embedding", "EmbeddingBag"}


def layer_diagnosis(
    layers: dict[str, tuple[float, float]],
    first_parameter: dict[str, str],
    thresholds: dict,
    types: dict[str, str],
    step: int | None = None,
    group: bool = True,
) -> list[Finding]:
    """Vanishing, exploding and dead-update findings of layers, by the one rule of runs and watches.

    Args:
        layers: layer -> ``(gradient norm, zero fraction)``
            (:func:`~hookviz.analysis.gradient_stats.combine_layer`), nearest the loss first; a NaN
            zero fraction (not known) raises no dead-update finding.
        first_parameter: layer -> the parameter the finding points at.
        thresholds: as returned by :func:`~hookviz.analysis.diagnose.check_thresholds`.
        types: module name -> class name (an Embedding's zeros are not dead updates).
        step: the training step, for a watch. group: see :func:`layer_findings`.
    """
    if not layers:
        return []
    zeros = {m: z for m, (_, z) in layers.items() if types.get(m) not in SPARSE_BY_DESIGN}
    return layer_findings(
        {m: norm for m, (norm, _) in layers.items()},
        next(iter(layers)),
        thresholds,
        zeros,
        first_parameter,
        types,
        step,
        group,
    )


def layer_findings(
    norms: dict[str, float],
    nearest: str,
    thresholds: dict,
    zero_fractions: dict[str, float] | None = None,
    node_of: dict[str, str] | None = None,
    types: dict[str, str] | None = None,
    step: int | None = None,
    group: bool = True,
) -> list[Finding]:
    """Vanishing, exploding and dead-update findings from layer gradient norms.

    Args:
        norms: layer module name -> gradient norm, nearest the loss first.
        nearest: the layer nearest the loss (a key of ``norms``).
        thresholds: as returned by :func:`~hookviz.analysis.diagnose.check_thresholds`.
        zero_fractions: layer -> fraction of exactly-zero gradient elements.
        node_of: layer -> the node id to point at. types: module name -> class name.
        step: the training step, for a watch.
        group: one finding per run of layers in a row (in ``norms`` order) with the same problem,
            naming the first and last layer and the range; False gives one finding per layer.
    """
    flags: list[Finding | None] = []
    zero_fractions = zero_fractions or {}
    node_of = node_of or {}
    reference = norms[nearest]
    usable = math.isfinite(reference) and reference > 0  # else ratios to it mean nothing
    nearest_label = module_label(nearest, types)
    for module, norm in norms.items():
        label, node = module_label(module, types), node_of.get(module)
        zeros = zero_fractions.get(module, 0.0)
        if math.isnan(norm):
            flags.append(None)  # NaN is reported by its origin, not as a size
            continue
        if zeros >= thresholds["dead"]:
            flags.append(
                Finding(
                    "dead",
                    module,
                    node,
                    (
                        f"{percent(zeros)} of the parameter gradient of {label} is exactly zero: its updates "
                        f"are dead (no gradient reaches it, e.g. the units it feeds or is fed by never fire)"
                    ),
                    zeros,
                    step,
                )
            )
            continue
        ratio = ratio_of(norm, reference) if usable else None
        if norm > thresholds["exploding_norm"] or (
            module != nearest and ratio is not None and ratio > thresholds["exploding"]
        ):
            flags.append(
                Finding(
                    "exploding",
                    module,
                    node,
                    (
                        f"the gradient explodes at {label}: its norm is {number(norm)}"
                        + (
                            " (the layer nearest the loss)"
                            if module == nearest
                            else f", {number(ratio)} x that of {nearest_label}, the layer nearest the loss"
                            if ratio is not None
                            else ""
                        )
                        + f" (thresholds: norm above "
                        f"{number(thresholds['exploding_norm'])} or above "
                        f"{number(thresholds['exploding'])} x)"
                    ),
                    norm,
                    step,
                )
            )
        elif module != nearest and ratio is not None and ratio < thresholds["vanishing"]:
            flags.append(
                Finding(
                    "vanishing",
                    module,
                    node,
                    (
                        f"the gradient vanishes at {label}: its norm is {number(norm)}, "
                        f"{number(ratio)} x that of "
                        f"{nearest_label}, the layer nearest the loss (threshold: below "
                        f"{number(thresholds['vanishing'])} x)"
                    ),
                    ratio,
                    step,
                )
            )
        else:
            flags.append(None)

    def describe(run: list[Finding]) -> str:
        first, last, span = run[0].value, run[-1].value, run_span(run, types)
        if run[0].kind == "vanishing":
            return (
                f"the gradient vanishes from {span}: {number(first)} … {number(last)} x that of "
                f"{nearest_label}, "
                f"the layer nearest the loss (threshold: below {number(thresholds['vanishing'])} x)"
            )
        if run[0].kind == "exploding":
            return (
                f"the gradient explodes from {span}: norms {number(first)} … {number(last)} "
                f"(thresholds: norm above {number(thresholds['exploding_norm'])} or above "
                f"{number(thresholds['exploding'])} x that of "
                f"{nearest_label}, the layer nearest the loss)"
            )
        return (
            f"the updates are dead from {span}: {percent(first)} … {percent(last)} of each layer's "
            "parameter gradient is exactly zero (no gradient reaches them, e.g. the units they feed or "
            "are fed by never fire)"
        )

    return grouped(flags, describe, group)
