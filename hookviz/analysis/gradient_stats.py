"""Gradient numbers of a run: per parameter and per layer, the gradient norm and its ratios.

:func:`gradient_stats` gives, per parameter and per layer, the gradient norm, its ratio to the
parameter norm and to the layer nearest the loss.

A *layer* is a module that owns parameters directly (``fc1`` for ``fc1.weight`` and ``fc1.bias``);
its gradient norm is the 2-norm of all its parameters' gradients together. The layer *nearest the
loss* is the one whose parameters receive their gradient first in backward order.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from hookviz.data.tensors import TensorRecord, combined_norm

if TYPE_CHECKING:  # for annotations only: the analysis needs no Run at import time
    import hookviz.data.run


@dataclass
class GradientStats:
    """The gradient numbers of one parameter, or of one layer (all its parameters together).

    Attributes:
        name: parameter qualified name (``"fc1.weight"``) or layer module name (``"fc1"``).
        kind: ``"parameter"`` or ``"layer"``.
        module: the module that owns the parameter (for a layer: ``name`` itself).
        grad_norm: 2-norm of the gradient (for a layer: of all its parameters' gradients).
        parameter_norm: 2-norm of the parameter values; None when the model was not given.
        ratio_to_parameter: ``grad_norm / parameter_norm`` (None without the model, inf for a
            parameter of norm 0).
        ratio_to_nearest: ``grad_norm`` over the grad norm of the layer nearest the loss.
        zero_fraction: fraction of gradient elements that are exactly zero.
        nonfinite: number of NaN and Inf gradient elements.
        order: backward position at which the gradient was complete (smaller = nearer the loss).
    """

    name: str
    kind: str
    module: str
    grad_norm: float
    parameter_norm: float | None
    ratio_to_parameter: float | None
    ratio_to_nearest: float | None
    zero_fraction: float
    nonfinite: int
    order: int | None


def module_of(parameter: str, modules: Collection[str] | None = None) -> str:
    """The layer of a parameter: the module that owns it (``"fc1"`` for ``"fc1.weight"``, ``""``
    for a parameter of the root module). The one home of this rule: runs, watches, gathered
    histories, the graph and the findings group parameters into layers by it.

    A tied parameter is one parameter under its first name (``named_parameters``' rule), so it
    belongs to the module of that name. Given ``modules`` (the modules a run's forward called), a
    parameter whose owner was never called (a parent used its weight directly) belongs to the
    nearest enclosing module that was, where the graph draws it.
    """
    owner = parameter.rpartition(".")[0]
    if modules is not None:
        while owner and owner not in modules:
            owner = owner.rpartition(".")[0]
    return owner


def layer_norms(parameter_norms: Mapping[str, float | None]) -> dict[str, float | None]:
    """``{layer: 2-norm of its parameters' gradients}`` from ``{parameter name: gradient norm}``,
    layers by :func:`module_of` in the order their first parameter comes: the one definition of
    a layer's gradient norm (:func:`hookviz.stats.reduce.combined_norm`: NaN and Inf kept, None
    when no parameter has a norm)."""
    members: dict[str, list[float | None]] = {}
    for name, norm in parameter_norms.items():
        members.setdefault(module_of(name), []).append(norm)
    return {layer: combined_norm(norms) for layer, norms in members.items()}


def module_norm(module: str, norms_of_layers: Mapping[str, float | None]) -> float | None:
    """The gradient norm of ``module`` and everything inside it: the layers ``module`` is or
    encloses, taken together (``""``, the root module, encloses every layer); from
    :func:`layer_norms`. None when none of them has a norm (or ``module`` holds no layer)."""
    return module_norms(norms_of_layers).get(module)


def module_norms(norms_of_layers: Mapping[str, float | None]) -> dict[str, float | None]:
    """:func:`module_norm` of every module that is or encloses a layer (``""`` included), in one
    pass over the layers: each layer's norm goes to itself and each module above it, in the
    order of ``norms_of_layers`` (the order :func:`module_norm` takes them in)."""
    parts: dict[str, list[float | None]] = {}
    for layer, norm in norms_of_layers.items():
        module = layer
        while True:
            parts.setdefault(module, []).append(norm)
            if not module:
                break
            module = module.rpartition(".")[0]
    return {module: combined_norm(norms) for module, norms in parts.items()}


def combine_layer(parts: Iterable[tuple[float | None, int, float]]) -> tuple[float | None, float]:
    """A layer's gradient norm and zero fraction from its parameters' ``(norm, numel,
    zero_fraction)``: the norm by :func:`hookviz.stats.reduce.combined_norm` (NaN and Inf kept;
    None when no part has one), the zero fraction weighted by element counts (NaN when a part's is
    not known, e.g. a watch step that kept only norms; 0.0 for no elements)."""
    parts = list(parts)
    numel = sum(n for _, n, _ in parts)
    zeros = sum(f * n for _, n, f in parts) / numel if numel else 0.0
    return combined_norm(norm for norm, _, _ in parts), zeros


def parameter_names(run: hookviz.data.run.Run, model: torch.nn.Module | None) -> list[str]:
    """The leaves of ``run`` that are parameters (not forward arguments), in run order."""
    model = model if model is not None else run.model
    if model is not None:
        names = {n for n, _ in model.named_parameters()}
        return [n for n in run.leaf_grads if n in names]
    arguments = set(run.input_names) or (set(run.calls[0].inputs or ()) if run.calls else set())
    return [n for n in run.leaf_grads if n not in arguments and n in run.nodes]


def ratio_of(numerator: float, denominator: float | None) -> float | None:
    if denominator is None or math.isnan(numerator) or math.isnan(denominator):
        return None if denominator is None else math.nan
    if denominator == 0:
        return math.inf if numerator > 0 else math.nan
    return numerator / denominator


def _combine(records: list[TensorRecord], counts: bool = True) -> tuple[float, float, int]:
    """Norm, zero fraction and NaN/Inf count of several tensors taken together (without
    ``counts``: the norm, NaN and 0)."""
    norm, zeros = combine_layer((r.norm, r.numel, r.zero_fraction if counts else math.nan) for r in records)
    nonfinite = sum(r.nan_count + r.inf_count for r in records) if counts else 0
    return (0.0 if norm is None else norm), (zeros if counts else math.nan), nonfinite


def gradient_stats(
    run: hookviz.data.run.Run, model: torch.nn.Module | None = None, counts: bool = True
) -> list[GradientStats]:
    """Per parameter, then per layer: gradient norm and its ratios (see :class:`GradientStats`).

    Args:
        run: a recorded run.
        model: the model the run recorded (``session.model``), for parameter norms; without it
            ``parameter_norm`` and ``ratio_to_parameter`` are None.
        counts: False leaves ``zero_fraction`` NaN and ``nonfinite`` 0, for a caller that needs
            only norms (the gradient-flow chart): a lazy run then keeps its details unrecorded;
            True records a lazy run's details first (``run.fill_details()``, whose refusals
            propagate).

    Returns:
        parameters in the run's leaf order, then layers nearest-the-loss first. Gradient norms are
        those of the run's statistics (``run.node(name).grad_outputs[0].norm``, the 2-norm of
        ``run.leaf_grad(name)``); parameter norms are ``torch.linalg.vector_norm`` in float64.
    """
    if counts:
        run.fill_details()
    parameters = []
    for name in parameter_names(run, model):
        node = run.nodes[name]
        if run.leaf_grads[name] is None or not node.grad_outputs or node.grad_outputs[0] is None:
            continue
        parameters.append((name, node.grad_outputs[0], node.order))
    if not parameters:
        return []
    values = {}
    if model is not None:
        with torch.no_grad():
            values = {
                n: torch.linalg.vector_norm(p.detach().abs(), dtype=torch.float64).item()
                for n, p in model.named_parameters()
            }
    layers: dict[str, list] = {}
    for name, record, order in parameters:
        layers.setdefault(module_of(name), []).append((name, record, order))

    def first_order(members) -> float:
        orders = [o for _, _, o in members if o is not None]
        return min(orders) if orders else math.inf

    ranked = sorted(layers, key=lambda m: first_order(layers[m]))
    nearest_norm = _combine([r for _, r, _ in layers[ranked[0]]], counts=False)[0]

    def row(name: str, kind: str, module: str, records, parameter_norm, order) -> GradientStats:
        norm, zeros, nonfinite = _combine(records, counts)
        return GradientStats(
            name,
            kind,
            module,
            norm,
            parameter_norm,
            ratio_of(norm, parameter_norm),
            ratio_of(norm, nearest_norm),
            zeros,
            nonfinite,
            order,
        )

    stats = [
        row(name, "parameter", module_of(name), [record], values.get(name), order)
        for name, record, order in parameters
    ]
    for module in ranked:
        members = layers[module]
        parameter_norm = combined_norm(values[n] for n, _, _ in members) if model is not None else None
        order = first_order(members)
        records = [r for _, r, _ in members]
        stats.append(
            row(module, "layer", module, records, parameter_norm, None if order == math.inf else int(order))
        )
    return stats
