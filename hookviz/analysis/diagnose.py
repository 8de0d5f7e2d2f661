"""Diagnosis of one run: where gradients vanish, explode, die, saturate, or first turn NaN/Inf.

:func:`gradient_stats` gives the numbers (per parameter and per layer: gradient norm, its ratio to
the parameter norm and to the layer nearest the loss); :func:`diagnose` turns them, and the run's
forward values and node gradients, into :class:`Finding` objects in plain words.

A *layer* is a module that owns parameters directly (``fc1`` for ``fc1.weight`` and ``fc1.bias``);
its gradient norm is the 2-norm of all its parameters' gradients together. The layer *nearest the
loss* is the one whose parameters receive their gradient first in backward order.

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

Findings about neighbouring places are grouped (``group=True``, the default): a run of layers in
a row (in the order nearest the loss first) that all vanish, explode or have dead updates is one
finding that names the first and last layer and the range of its numbers ("the gradient vanishes
from module '30' down to module '0' (16 Linear layers in a row): 1e-4 … 4e-17 x ..."); so are
saturated activations and dead units of modules that follow each other in forward order. A
grouped finding lists its places in ``modules`` and points at the worst of them.

NaN/Inf origin (no threshold): in backward, the first node in backward order whose ``grad_inputs``
hold NaN/Inf while its ``grad_outputs`` do not; in forward, the first op whose output holds NaN/Inf
while the inputs it got from other recorded ops do not (or a model input that holds them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from hookviz.data.run import LOSS_MODULE
from hookviz.data.tensors import TensorRecord, combined_norm
from hookviz.errors import HookvizError

if TYPE_CHECKING:  # for annotations only: hookviz.data.run imports this module
    import hookviz.data.run

DEFAULT_THRESHOLDS = {
    "vanishing": 1e-3,
    "exploding": 1e3,
    "exploding_norm": 1e3,
    "dead": 0.9,
    "saturated": 0.9,
    "saturation_margin": 0.01,
}

# Layers whose parameter gradient is mostly zero by design (only the rows looked up get one).
_SPARSE_BY_DESIGN = {"Embedding", "EmbeddingBag"}

# op -> (what it computes, why its gradient is infinite or undefined there)
_CAUSES = {
    "LogBackward0": ("log", "the gradient of log(x) is 1/x, infinite at x = 0; log(x) is NaN for x < 0"),
    "Log2Backward0": ("log2", "the gradient of log2(x) is 1/(x ln 2), infinite at x = 0"),
    "Log10Backward0": ("log10", "the gradient of log10(x) is 1/(x ln 10), infinite at x = 0"),
    "Log1pBackward0": ("log1p", "the gradient of log1p(x) is 1/(1 + x), infinite at x = -1"),
    "DivBackward0": ("division", "the gradient of a / b is 1/b and -a/b^2, infinite where b = 0"),
    "ReciprocalBackward0": ("reciprocal", "the gradient of 1/x is -1/x^2, infinite at x = 0"),
    "SqrtBackward0": ("sqrt", "the gradient of sqrt(x) is 1/(2 sqrt(x)), infinite at x = 0"),
    "RsqrtBackward0": ("rsqrt", "the gradient of x^-1/2 is -x^-3/2 / 2, infinite at x = 0"),
    "PowBackward0": ("pow", "the gradient of x^p is p x^(p-1), infinite at x = 0 when p < 1"),
    "PowBackward1": ("pow", "the gradient of a^b is b a^(b-1) and a^b ln a, infinite at a = 0"),
    "AcosBackward0": ("acos", "the gradient of acos(x) is -1/sqrt(1 - x^2), infinite at x = +-1"),
    "AsinBackward0": ("asin", "the gradient of asin(x) is 1/sqrt(1 - x^2), infinite at x = +-1"),
    "AtanhBackward0": ("atanh", "the gradient of atanh(x) is 1/(1 - x^2), infinite at x = +-1"),
    "NormBackward1": ("norm", "the gradient of a 2-norm is x/|x|, undefined (0/0) when all of x is 0"),
    "LinalgVectorNormBackward0": ("norm", "the gradient of a 2-norm is x/|x|, 0/0 when all of x is 0"),
}

_SATURATING = {"SigmoidBackward0": (0.0, 1.0, "sigmoid"), "TanhBackward0": (-1.0, 1.0, "tanh")}


@dataclass
class Finding:
    """One problem found in a run (or in one step of a :class:`hookviz.Watch`).

    Attributes:
        kind: ``"vanishing"``, ``"exploding"``, ``"dead"``, ``"saturated"`` or ``"nan"``.
        module: qualified name of the module concerned ("" = the root module, ``"(loss)"`` = made
            by ``loss_fn``).
        node: the graph node id to look at (a parameter's name, or an op node id), or None.
        message: what is wrong, in plain words, with the numbers.
        value: the number behind the finding: a ratio (vanishing), a norm (exploding), a
            fraction (dead, saturated) or a count of NaN/Inf elements (nan).
        step: the training step, for findings of a watch; None for a run.
        rank: the distributed rank concerned, for cross-rank findings of a gathered watch
            (:meth:`hookviz.watching.gather.RankHistory.diagnose`); else None.
        modules: for a grouped finding, the modules of the run of layers (or of modules) it
            covers, in the order the message names them; ``module``, ``node`` and ``value`` are
            those of the worst of them. Empty for a finding about one place.
    """

    kind: str
    module: str
    node: str | None
    message: str
    value: float | None = None
    step: int | None = None
    rank: int | None = None
    modules: tuple[str, ...] = ()


def percent(fraction: float) -> str:
    """A fraction in [0, 1] as a percentage that never rounds a part to all or nothing.

    ``0.37 -> "37%"``, ``0.995 -> "99.5%"``, ``0.99998 -> "> 99.99%"``, ``2e-5 -> "< 0.01%"``;
    only exactly 0 and 1 give ``"0%"`` and ``"100%"`` (64 non-zero elements of 3.2 million are
    not "100% zero").
    """
    if math.isnan(fraction):
        return "NaN%"
    if fraction <= 0:
        return "0%"
    if fraction >= 1:
        return "100%"
    for digits in (0, 1, 2):
        shown = round(100 * fraction, digits)
        if 0 < shown < 100:
            return f"{shown:.{digits}f}%"
    return "< 0.01%" if fraction < 0.5 else "> 99.99%"


def places(findings: list[Finding]) -> set[tuple[str, str]]:
    """``(kind, module)`` of every place ``findings`` cover, each module of a grouped one included:
    what two runs' findings are compared by (a grouped finding's ``module`` is only its worst)."""
    return {(f.kind, module) for f in findings for module in (f.modules or (f.module,))}


# Which finding of a run is its worst: the smallest ratio, the largest norm or fraction.
_WORST = {"vanishing": min}


def _runs(flags: list[Finding | None]) -> list[list[Finding]]:
    """Maximal runs of consecutive findings of one kind; None (a healthy place) ends a run."""
    runs: list[list[Finding]] = []
    previous = None
    for finding in flags:
        if finding is not None:
            if previous is not None and previous.kind == finding.kind:
                runs[-1].append(finding)
            else:
                runs.append([finding])
        previous = finding
    return runs


def _grouped(flags: list[Finding | None], describe, group: bool = True) -> list[Finding]:
    """The findings of ``flags`` (one entry per place, in order; None = healthy), each run of two
    or more of one kind merged into one finding whose message is ``describe(run)``."""
    if not group:
        return [f for f in flags if f is not None]
    out = []
    for run in _runs(flags):
        if len(run) == 1:
            out.append(run[0])
            continue
        worst = _WORST.get(run[0].kind, max)(run, key=lambda f: f.value)
        out.append(
            Finding(
                worst.kind,
                worst.module,
                worst.node,
                describe(run),
                worst.value,
                worst.step,
                worst.rank,
                tuple(f.module for f in run),
            )
        )
    return out


def _span(
    run: list[Finding], types: dict[str, str] | None, what: str = "layers", between: str = "down to"
) -> str:
    """ "module '30' down to module '0' (16 Linear layers in a row)" for a run of findings."""
    kinds = {(types or {}).get(f.module) for f in run}
    same = kinds.pop() if len(kinds) == 1 else None
    first, last = (
        (_label(run[0].module), _label(run[-1].module))
        if same
        else (
            _label(run[0].module, types),
            _label(run[-1].module, types),
        )
    )
    return f"{first} {between} {last} ({len(run)} {same + ' ' if same else ''}{what} in a row)"


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


def _module_of(parameter: str) -> str:
    return parameter.rsplit(".", 1)[0] if "." in parameter else ""


def _parameter_names(run: hookviz.data.run.Run, model: torch.nn.Module | None) -> list[str]:
    """The leaves of ``run`` that are parameters (not forward arguments), in run order."""
    model = model if model is not None else run.model
    if model is not None:
        names = {n for n, _ in model.named_parameters()}
        return [n for n in run.leaf_grads if n in names]
    arguments = set(run.input_names) or (set(run.calls[0].inputs or ()) if run.calls else set())
    return [n for n in run.leaf_grads if n not in arguments and n in run.nodes]


def _ratio(numerator: float, denominator: float | None) -> float | None:
    if denominator is None or math.isnan(numerator) or math.isnan(denominator):
        return None if denominator is None else math.nan
    if denominator == 0:
        return math.inf if numerator > 0 else math.nan
    return numerator / denominator


def _combine(records: list[TensorRecord], counts: bool = True) -> tuple[float, float, int]:
    """Norm, zero fraction and NaN/Inf count of several tensors taken together (without
    ``counts``: the norm, NaN and 0)."""
    norm = combined_norm(r.norm for r in records) or 0.0
    if not counts:
        return norm, math.nan, 0
    numel = sum(r.numel for r in records)
    zeros = sum(r.zero_fraction * r.numel for r in records)
    return norm, (zeros / numel if numel else 0.0), sum(r.nan_count + r.inf_count for r in records)


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
    for name in _parameter_names(run, model):
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
        layers.setdefault(_module_of(name), []).append((name, record, order))

    def first_order(members) -> float:
        orders = [o for _, _, o in members if o is not None]
        return min(orders) if orders else math.inf

    ranked = sorted(layers, key=lambda m: first_order(layers[m]))
    nearest_norm = _combine([r for _, r, _ in layers[ranked[0]]], counts=False)[0]
    stats = []
    for name, record, order in parameters:
        norm, zeros, nonfinite = _combine([record], counts)
        parameter_norm = values.get(name)
        stats.append(
            GradientStats(
                name,
                "parameter",
                _module_of(name),
                norm,
                parameter_norm,
                _ratio(norm, parameter_norm),
                _ratio(norm, nearest_norm),
                zeros,
                nonfinite,
                order,
            )
        )
    for module in ranked:
        members = layers[module]
        norm, zeros, nonfinite = _combine([r for _, r, _ in members], counts)
        parameter_norm = combined_norm(values[n] for n, _, _ in members) if model is not None else None
        order = first_order(members)
        stats.append(
            GradientStats(
                module,
                "layer",
                module,
                norm,
                parameter_norm,
                _ratio(norm, parameter_norm),
                _ratio(norm, nearest_norm),
                zeros,
                nonfinite,
                None if order == math.inf else int(order),
            )
        )
    return stats


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
            f"{', '.join(f'{k}={v:g}' for k, v in DEFAULT_THRESHOLDS.items())}"
        )
    merged = {**DEFAULT_THRESHOLDS, **thresholds}
    for name, value in merged.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise HookvizError(
                f"threshold {name}={value!r} must be a positive number, e.g. "
                f"{name}={DEFAULT_THRESHOLDS[name]:g}"
            )
        if name in ("dead", "saturated") and value > 1:
            raise HookvizError(
                f"threshold {name}={value!r} is a fraction of elements: give a "
                f"number in (0, 1], e.g. {name}={DEFAULT_THRESHOLDS[name]:g}"
            )
    return merged


def _label(module: str, types: dict[str, str] | None = None) -> str:
    if module == LOSS_MODULE:
        return "the loss function"
    name = "the root module" if module == "" else f"module {module!r}"
    kind = (types or {}).get(module)
    return f"{name} ({kind})" if kind else name


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
        thresholds: as returned by :func:`check_thresholds`.
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
    nearest_label = _label(nearest, types)
    for module, norm in norms.items():
        label, node = _label(module, types), node_of.get(module)
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
        ratio = _ratio(norm, reference) if usable else None
        if norm > thresholds["exploding_norm"] or (
            module != nearest and ratio is not None and ratio > thresholds["exploding"]
        ):
            flags.append(
                Finding(
                    "exploding",
                    module,
                    node,
                    (
                        f"the gradient explodes at {label}: its norm is {norm:.3g}"
                        + (
                            " (the layer nearest the loss)"
                            if module == nearest
                            else f", {ratio:.3g} x that of {nearest_label}, the layer nearest the loss"
                            if ratio is not None
                            else ""
                        )
                        + f" (thresholds: norm above "
                        f"{thresholds['exploding_norm']:g} or above {thresholds['exploding']:g} x)"
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
                        f"the gradient vanishes at {label}: its norm is {norm:.3g}, {ratio:.3g} x that of "
                        f"{nearest_label}, the layer nearest the loss (threshold: below "
                        f"{thresholds['vanishing']:g} x)"
                    ),
                    ratio,
                    step,
                )
            )
        else:
            flags.append(None)

    def describe(run: list[Finding]) -> str:
        first, last, span = run[0].value, run[-1].value, _span(run, types)
        if run[0].kind == "vanishing":
            return (
                f"the gradient vanishes from {span}: {first:.3g} … {last:.3g} x that of {nearest_label}, "
                f"the layer nearest the loss (threshold: below {thresholds['vanishing']:g} x)"
            )
        if run[0].kind == "exploding":
            return (
                f"the gradient explodes from {span}: norms {first:.3g} … {last:.3g} (thresholds: norm "
                f"above {thresholds['exploding_norm']:g} or above {thresholds['exploding']:g} x that of "
                f"{nearest_label}, the layer nearest the loss)"
            )
        return (
            f"the updates are dead from {span}: {percent(first)} … {percent(last)} of each layer's "
            "parameter gradient is exactly zero (no gradient reaches them, e.g. the units they feed or "
            "are fed by never fire)"
        )

    return _grouped(flags, describe, group)


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


def _describe(record: TensorRecord | None) -> str:
    if record is None:
        return "not recorded"
    if record.numel == 0:
        return "empty"
    parts = []
    zeros = round(record.zero_fraction * record.numel)
    if zeros:
        parts.append(f"{zeros} of {record.numel} values exactly 0")
    if record.nan_count:
        parts.append(f"{record.nan_count} NaN")
    if record.inf_count:
        parts.append(f"{record.inf_count} Inf")
    if record.min is not None:
        parts.append(f"min {record.min:.3g}, max {record.max:.3g}")
    return ", ".join(parts) or "no values"


def _nonfinite(records) -> int:
    return sum(r.nan_count + r.inf_count for r in records if r is not None)


def _forward_inputs(run: hookviz.data.run.Run, node_id: str) -> list[tuple[int, str, TensorRecord | None]]:
    """(slot, producer id, producer's forward output record) for each input of a node."""
    inputs = []
    for producer in run.graph.predecessors(node_id):
        slot = run.graph.edges[producer, node_id].get("slot", 0)
        inputs.append((slot, producer, run.nodes[producer].output))
    return sorted(inputs)


def _introduced_by_hooks(run: hookviz.data.run.Run, types: dict[str, str]) -> list[Finding]:
    """The first hookviz edit, and the first hook of the user's, whose output holds NaN/Inf that its
    input did not: there the edit or hook, not an op, brought them in."""
    found, kinds = [], set()
    for call in run.hook_calls:  # in the order they fired
        edit = call.kind == "edit"
        if edit in kinds or not call.after or _nonfinite(call.after) <= _nonfinite(call.before):
            continue
        kinds.add(edit)
        who = f"your edit {call.name!r}" if edit else f"your {call.kind} {call.name!r}"
        where = call.node or call.where
        module = run.nodes[call.node].module if call.node in run.nodes else call.where
        found.append(
            Finding(
                "nan",
                module,
                call.node,
                (
                    f"NaN/Inf enters backward at {where or '<root module>'}: {who} returned "
                    + ", ".join(_describe(r) for r in call.after if r is not None and not r.finite)
                    + " from finite gradients; the edit or hook caused it, not the model"
                ),
                float(_nonfinite(call.after)),
            )
        )
    return found


def nan_findings(run: hookviz.data.run.Run) -> list[Finding]:
    """Where NaN/Inf first appear: in forward (an op's output or a model input) and in backward."""
    found = []
    types = {c.module: c.type for c in run.calls}
    root_inputs = run.calls[0].inputs if run.calls else {}
    bad_inputs = [(n, r) for n, r in root_inputs.items() if isinstance(r, TensorRecord) and not r.finite]
    for name, record in bad_inputs:
        found.append(
            Finding(
                "nan",
                "",
                name if name in run.nodes else None,
                (
                    f"the model input {name!r} already holds NaN/Inf ({_describe(record)}): clean the data "
                    "before it reaches the model"
                ),
                float(record.nan_count + record.inf_count),
            )
        )
    ops = [r for r in run.nodes.values() if r.kind == "op" and r.order is not None]
    if not bad_inputs:
        # The engine runs a node only after all its consumers, so reversed backward order is a
        # forward (topological) order.
        for record in sorted(ops, key=lambda r: -r.order):
            if record.output is None or record.output.finite:
                continue
            inputs = _forward_inputs(run, record.id)
            if any(r is not None and not r.finite for _, _, r in inputs):
                continue
            what, why = _CAUSES.get(record.op, (record.op, ""))
            evidence = "; ".join(
                f"input {slot} (from {producer}): {_describe(r)}" for slot, producer, r in inputs
            )
            found.append(
                Finding(
                    "nan",
                    record.module,
                    record.id,
                    (
                        f"NaN/Inf first appears in forward at {record.id} ({what}) in "
                        f"{_label(record.module, types)}: its output has {_describe(record.output)}"
                        + (f"; {evidence}" if evidence else "")
                        + (f". {why}" if why else "")
                    ),
                    float(record.output.nan_count + record.output.inf_count),
                )
            )
            break
    introduced = _introduced_by_hooks(run, types)
    found += introduced
    blamed = {f.node for f in introduced}
    for record in sorted(ops, key=lambda r: r.order):
        bad = _nonfinite(record.grad_inputs)
        if not bad or _nonfinite(record.grad_outputs) or record.id in blamed:
            continue
        what, why = _CAUSES.get(record.op, (record.op, ""))
        slots = [i for i, r in enumerate(record.grad_inputs) if r is not None and not r.finite]
        inputs = [(s, p, r) for s, p, r in _forward_inputs(run, record.id) if s in slots]
        evidence = "; ".join(
            f"forward input {slot} (from {producer}): {_describe(r)}" for slot, producer, r in inputs
        )
        if any(r is not None and not r.finite for _, _, r in inputs):
            why = "its forward input already held NaN/Inf: the cause is where they first appear in forward"
        found.append(
            Finding(
                "nan",
                record.module,
                record.id,
                (
                    f"NaN/Inf first appears in backward at {record.id} ({what}) in "
                    f"{_label(record.module, types)}: its grad_outputs are finite but "
                    + ", ".join(f"grad_inputs[{i}] has {_describe(record.grad_inputs[i])}" for i in slots)
                    + (f"; {evidence}" if evidence else "")
                    + (f". {why}" if why else "")
                ),
                float(bad),
            )
        )
        break
    return found


def diagnose(
    run: hookviz.data.run.Run, model: torch.nn.Module | None = None, group: bool = True, **thresholds: float
) -> list[Finding]:
    """Findings about one run in plain words; an empty list for a healthy run.

    Args:
        run: a recorded :class:`~hookviz.data.run.Run`.
        model: the model it recorded; default ``run.model`` (the session's model, when it is
            still alive). Used for parameter names and norms (see :func:`gradient_stats`).
        group: one finding per run of layers (or modules) in a row with the same problem, with
            the range of its numbers (see this module's docstring); False: one per layer or module.
        **thresholds: any of ``vanishing``, ``exploding``, ``exploding_norm``, ``dead``,
            ``saturated``, ``saturation_margin`` (defaults and meaning: see this module's docstring).

    Returns:
        findings in this order: NaN/Inf origins, then per layer (nearest the loss first) exploding,
        vanishing and dead updates, then dead units and saturated activations in forward order.

    Raises:
        HookvizError: an unknown threshold or a value out of range.
        DetailsRefused: a lazy run whose details cannot be recorded any more (see
            :meth:`hookviz.data.run.Run.fill_details`, which this calls first).
    """
    limits = check_thresholds(thresholds)
    model = model if model is not None else run.model
    run.fill_details()  # the findings read values and counts: a lazy run's are recorded now
    found = nan_findings(run)
    types = {c.module: c.type for c in run.calls}
    layers = [s for s in gradient_stats(run, model) if s.kind == "layer"]
    if layers:
        parameters = _parameter_names(run, model)
        first_parameter: dict[str, str] = {}  # one pass: a search per layer is quadratic
        for name in parameters:
            first_parameter.setdefault(_module_of(name), name)
        node_of = {s.name: first_parameter[s.name] for s in layers}
        # An embedding's rows of tokens the batch does not use get no gradient by design: their
        # zeros are not dead updates.
        zeros = {s.name: s.zero_fraction for s in layers if types.get(s.name) not in _SPARSE_BY_DESIGN}
        found += layer_findings(
            {s.name: s.grad_norm for s in layers},
            layers[0].name,
            limits,
            zeros,
            node_of,
            types,
            group=group,
        )
    parents = {m.rsplit(".", 1)[0] if "." in m else "" for m in run.modules if m != ""}
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
                    f"{percent(record.zero_fraction)} of the outputs of {_label(call.module, types)} are "
                    "exactly zero: dead units, which pass no gradient back (e.g. ReLUs whose input is "
                    "always negative: check the bias and the initialisation, or use LeakyReLU)"
                ),
                record.zero_fraction,
            )
        )
    found += _grouped(
        dead_units,
        lambda run_: (
            f"dead units from {_span(run_, types, 'modules', 'to')}: {percent(run_[0].value)} … "
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
                    f"{percent(fraction)} of the {name} outputs of {_label(record.module, types)} "
                    f"({record.id}) are within {limits['saturation_margin']:g} of {low:g} or {high:g}, "
                    "where its gradient is nearly zero: the pre-activations are too large (scale the "
                    "initialisation down or normalise the layer's input)"
                ),
                fraction,
            )
        )
    found += _grouped(
        saturated,
        lambda run_: (
            f"saturated activations from {_span(run_, types, 'modules', 'to')}: {percent(run_[0].value)} … "
            f"{percent(run_[-1].value)} of each one's outputs are within {limits['saturation_margin']:g} "
            "of its limits, where the gradient is nearly zero: the pre-activations are too large "
            "(scale the initialisation down or normalise the layer's input)"
        ),
        group,
    )
    return found
