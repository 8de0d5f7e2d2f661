"""Diagnosis of one run: where gradients vanish, explode, die, saturate, or first turn NaN/Inf.

:func:`diagnose` turns the run's gradient numbers (:mod:`hookviz.analysis.gradient_stats`), forward
values and node gradients into :class:`~hookviz.analysis.findings.Finding` objects in plain words:
NaN/Inf origins (:mod:`hookviz.analysis.nan_origin`), layers whose gradient vanishes, explodes or
whose updates are dead (:mod:`hookviz.analysis.layer_findings`), and here dead units and saturated
activations. Neighbouring findings are grouped (:mod:`hookviz.analysis.findings`).

Thresholds (keyword arguments of :func:`diagnose`, with their defaults):

- ``vanishing=1e-3``: a layer whose gradient norm is below ``vanishing`` x that of the layer nearest
  the loss.
- ``exploding=1e3`` and ``exploding_norm=1e3``: a layer whose gradient norm is above ``exploding`` x
  that of the layer nearest the loss, or above ``exploding_norm`` in absolute terms.
- ``dead=0.9``: a layer whose parameter gradients are at least this fraction exactly zero (its
  updates are dead), or a module without submodules whose output is at least this fraction
  exactly zero (dead units, e.g. ReLUs that never fire).
- ``saturated=0.9`` and ``saturation_margin=0.01``: a sigmoid (tanh) whose outputs are at least this
  fraction within ``saturation_margin`` of 0 or 1 (of -1 or 1), where its gradient is nearly zero.
- ``update_ratio_high=1e-1`` and ``update_ratio_low=1e-5`` (a watch with ``optimizer=`` only): a
  layer each of whose parameters an optimizer step changed by more than ``update_ratio_high`` (less
  than ``update_ratio_low``) of its norm, ``‖Δw‖ / ‖w‖``; healthy is near 1e-3
  (:func:`hookviz.analysis.step_findings.update_findings` says why these two).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from hookviz.analysis.findings import Finding, grouped, module_label, percent, run_span
from hookviz.analysis.gradient_stats import gradient_stats, module_of, parameter_names
from hookviz.analysis.layer_findings import layer_diagnosis
from hookviz.analysis.nan_origin import nan_findings
from hookviz.data.run import require_run
from hookviz.data.tensors import TensorRecord
from hookviz.errors import HookvizError
from hookviz.text import number

if TYPE_CHECKING:  # for annotations only: the analysis needs no Run at import time
    import hookviz.data.run

DEFAULT_THRESHOLDS = {
    "vanishing": 1e-3,
    "exploding": 1e3,
    "exploding_norm": 1e3,
    "dead": 0.9,
    "saturated": 0.9,
    "saturation_margin": 0.01,
    "update_ratio_high": 1e-1,
    "update_ratio_low": 1e-5,
}

_SATURATING = {"SigmoidBackward0": (0.0, 1.0, "sigmoid"), "TanhBackward0": (-1.0, 1.0, "tanh")}


def check_thresholds(thresholds: dict) -> dict:
    """The full set of thresholds: the defaults updated by ``thresholds``.

    Raises:
        HookvizError: an unknown name, or a value that is not a positive number (fractions must
            be at most 1).
    """
    unknown = set(thresholds) - set(DEFAULT_THRESHOLDS)
    if unknown:
        raise HookvizError(
            f"unknown threshold(s) {', '.join(sorted(map(repr, unknown)))}; the thresholds are "
            f"{', '.join(f'{k}={number(v)}' for k, v in DEFAULT_THRESHOLDS.items())}"
        )
    merged = {**DEFAULT_THRESHOLDS, **thresholds}
    for name, value in merged.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise HookvizError(
                f"threshold {name}={value!r} must be a positive number, e.g. "
                f"{name}={number(DEFAULT_THRESHOLDS[name])}"
            )
        if name in ("dead", "saturated") and value > 1:
            raise HookvizError(
                f"threshold {name}={value!r} is a fraction of elements: give a "
                f"number in (0, 1], e.g. {name}={number(DEFAULT_THRESHOLDS[name])}"
            )
    return merged


def _near_limit_fraction(record: TensorRecord, low: float, high: float, margin: float) -> float | None:
    """Fraction of elements within ``margin`` of ``low`` or ``high``.

    Exact from ``record.value``. Otherwise estimated from the sampled histogram, counting every
    bin that overlaps a margin (so at most one bin width too generous); None without either.
    """
    if record.value is not None:
        value = record.value.double()
        if value.numel() == 0:
            return None
        near = (value <= low + margin) | (value >= high - margin)
        return near.double().mean().item()
    if record.histogram is None:
        return None
    counts, edges = record.histogram
    total = sum(counts)
    if not total:
        return None
    near = sum(c for c, a, b in zip(counts, edges, edges[1:]) if a <= low + margin or b >= high - margin)
    return near / total


def diagnose(
    run: hookviz.data.run.Run, model: torch.nn.Module | None = None, group: bool = True, **thresholds: float
) -> list[Finding]:
    """Findings about one run in plain words; an empty list for a healthy run.

    Args:
        run: a recorded :class:`~hookviz.data.run.Run`.
        model: the model it recorded; default ``run.model`` (the session's model, when it is
            still alive). Used for parameter names and norms (see
            :func:`~hookviz.analysis.gradient_stats.gradient_stats`).
        group: one finding per run of layers (or modules) in a row with the same problem, with
            the range of its numbers (see :mod:`hookviz.analysis.findings`); False: one per layer
            or module.
        **thresholds: any of ``vanishing``, ``exploding``, ``exploding_norm``, ``dead``,
            ``saturated``, ``saturation_margin`` (defaults and meaning: see this module's docstring).

    Returns:
        findings in this order: NaN/Inf origins, then per layer (nearest the loss first) exploding,
        vanishing and dead updates, then dead units and saturated activations in forward order.

    Raises:
        HookvizError: ``run`` is not a Run, ``model`` not a module, an unknown threshold or a
            value out of range.
        DetailsRefused: a lazy run whose details cannot be recorded any more (see
            :meth:`hookviz.data.run.Run.fill_details`, which this calls first).
    """
    limits = check_thresholds(thresholds)
    require_run(run, "diagnose(run)")
    if model is not None and not isinstance(model, torch.nn.Module):
        raise HookvizError(
            f"diagnose(run, model={type(model).__name__}): model must be the run's torch.nn.Module, or None"
        )
    model = model if model is not None else run.model
    run.fill_details()  # the findings read values and counts: a lazy run's are recorded now
    found = nan_findings(run)
    types = {c.module: c.type for c in run.calls}
    layers = [s for s in gradient_stats(run, model) if s.kind == "layer"]
    first_parameter: dict[str, str] = {}  # one pass: a search per layer is quadratic
    for name in parameter_names(run, model) if layers else ():
        first_parameter.setdefault(module_of(name), name)
    found += layer_diagnosis(
        {s.name: (s.grad_norm, s.zero_fraction) for s in layers}, first_parameter, limits, types, group=group
    )
    parents = {module_of(m) for m in run.modules if m != ""}  # a module's parent, by the same rule
    dead_units: list[Finding | None] = []
    for call in run.calls:
        if call.call != 0 or call.module == "" or call.module in parents or not call.output:
            continue
        record = call.output[0]
        if record is None or not record.numel or record.zero_fraction < limits["dead"]:
            dead_units.append(None)
            continue
        dead_units.append(
            Finding(
                "dead",
                call.module,
                call.output_node,
                (
                    f"{percent(record.zero_fraction)} of the outputs of {module_label(call.module, types)} "
                    "are exactly zero: dead units, which pass no gradient back (e.g. ReLUs whose input is "
                    "always negative: check the bias and the initialisation, or use LeakyReLU)"
                ),
                record.zero_fraction,
            )
        )
    found += grouped(
        dead_units,
        lambda run_: (
            f"dead units from {run_span(run_, types, 'modules', 'to')}: {percent(run_[0].value)} … "
            f"{percent(run_[-1].value)} of each one's outputs are exactly zero, which pass no gradient "
            "back (e.g. ReLUs whose input is always negative: check the bias and the initialisation, "
            "or use LeakyReLU)"
        ),
        group,
    )
    saturating = [r for r in run.nodes.values() if r.op in _SATURATING and r.output is not None]
    saturated: list[Finding | None] = []
    for record in sorted(saturating, key=lambda r: -(r.order if r.order is not None else -1)):
        low, high, name = _SATURATING[record.op]
        fraction = _near_limit_fraction(record.output, low, high, limits["saturation_margin"])
        if fraction is None or fraction < limits["saturated"]:
            saturated.append(None)
            continue
        saturated.append(
            Finding(
                "saturated",
                record.module,
                record.id,
                (
                    f"{percent(fraction)} of the {name} outputs of {module_label(record.module, types)} "
                    f"({record.id}) are within {number(limits['saturation_margin'])} of {number(low)} "
                    f"or {number(high)}, "
                    "where its gradient is nearly zero: the pre-activations are too large (scale the "
                    "initialisation down or normalise the layer's input)"
                ),
                fraction,
            )
        )
    found += grouped(
        saturated,
        lambda run_: (
            f"saturated activations from {run_span(run_, types, 'modules', 'to')}: "
            f"{percent(run_[0].value)} … {percent(run_[-1].value)} of each one's outputs are within "
            f"{number(limits['saturation_margin'])} of its limits, where the gradient is nearly zero: the "
            "pre-activations are too large (scale the initialisation down or normalise the layer's input)"
        ),
        group,
    )
    return found
