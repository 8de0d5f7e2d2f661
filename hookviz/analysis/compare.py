"""Two watches' gradient norms side by side: per layer and kept step, and where the runs part.

A *layer* is the module owning parameters (:func:`hookviz.analysis.gradient_stats.module_of`) and
its norm at a step is the 2-norm of its parameters' gradients taken together
(:func:`hookviz.stats.reduce.combined_norm`), as the widget's chart and a run's diagnosis read it.

Two runs are read at the same steps: a step of one is paired with the step of the other that has
the same step number and the same optimizer (a watch with ``optimizer=`` keeps one step per
``optimizer.step()``, named by the optimizer's class; without it a step is a backward and its
optimizer is ``""``). When each run has exactly one optimizer name and the names differ (``SGD``
yesterday, ``AdamW`` today), those two are paired: the question is then "what changed", and the
optimizer is one answer.

The runs *part* at a layer and step where one norm is more than ``factor`` times the other
(either way round). A gradient that holds NaN/Inf against a finite one, or 0 against a positive
one, parts at any factor; two NaN/Inf gradients, or a layer without a gradient in one of them,
are not compared there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from hookviz.analysis.gradient_stats import module_of
from hookviz.errors import HookvizError
from hookviz.stats.reduce import combined_norm

DEFAULT_FACTOR = 10.0


@dataclass
class LayerNorms:
    """One watch's per-layer gradient norms over its kept steps.

    Attributes:
        steps: the kept step numbers, as the history has them.
        optimizers: per step, the optimizer whose ``step()`` it is (``""``: a step is a backward).
        layers: the layers (modules owning parameters), in the order their parameters come in
            the history (the model's order: input side first).
        norm: float64 ``[len(steps), len(layers)]``: the 2-norm of the layer's parameter gradients
            at that step; NaN where none of its parameters got a gradient, or where one held NaN
            (Inf where one held Inf and none NaN).
        nonfinite: float64 ``[len(steps), len(layers)]``: NaN and Inf elements in the layer's
            gradients at that step (0 where none).
    """

    steps: list[int]
    optimizers: list[str]
    layers: list[str]
    norm: torch.Tensor
    nonfinite: torch.Tensor

    def at(self, step: int, optimizer: str | None = None) -> dict[str, float]:
        """``{layer: norm}`` at ``step`` (of ``optimizer`` when two optimizers each kept that step
        number; None: the first kept row with that number).

        Raises:
            HookvizError: the step is not kept; the message lists the first kept ones.
        """
        for index, (number, name) in enumerate(zip(self.steps, self.optimizers)):
            if number == step and optimizer in (None, name):
                return dict(zip(self.layers, self.norm[index].tolist()))
        raise HookvizError(
            f"step {step} is not kept by this watch (kept: {_steps_text(self.steps)}); pick one of them"
        )


def layer_norms(history) -> LayerNorms:
    """The per-layer gradient norms of a watch history.

    Args:
        history: a :class:`hookviz.watching.history.History` (``watch.history``, or
            ``RankHistory.history(rank)`` of a loaded file): ``steps``, ``names``, ``kinds``, float64
            ``norm`` and ``nonfinite`` of shape ``[steps, names]``, ``optimizers`` (may be empty).

    Returns:
        a :class:`LayerNorms`; module-output columns are left out (a layer is its parameters).
    """
    columns: dict[str, list[int]] = {}
    for column, (name, kind) in enumerate(zip(history.names, history.kinds)):
        if kind == "parameter":
            columns.setdefault(module_of(name), []).append(column)
    layers = list(columns)
    steps = list(history.steps)
    norm = torch.full((len(steps), len(layers)), math.nan, dtype=torch.float64)
    nonfinite = torch.zeros((len(steps), len(layers)), dtype=torch.float64)
    norms, counts = history.norm.tolist(), history.nonfinite.tolist()
    for row, (row_norms, row_counts) in enumerate(zip(norms, counts)):
        for position, layer in enumerate(layers):
            # a NaN norm with no NaN/Inf element is "no gradient at this step": left out
            present = [
                row_norms[c] for c in columns[layer] if not math.isnan(row_norms[c]) or row_counts[c] > 0
            ]
            total = combined_norm(present)
            if total is not None:
                norm[row, position] = total
            nonfinite[row, position] = sum(row_counts[c] for c in columns[layer] if row_counts[c] > 0)
    optimizers = list(getattr(history, "optimizers", []) or [])
    optimizers = optimizers if len(optimizers) == len(steps) else [""] * len(steps)
    return LayerNorms(steps, optimizers, layers, norm, nonfinite)


@dataclass
class Parting:
    """Where two runs' gradient norms part: one layer at one aligned step.

    Attributes:
        step: the step number (the same in both runs).
        optimizer: the optimizer of that step in the first run (``""``: a backward); the second
            run's is ``optimizer_b``.
        layer: the layer.
        a: the layer's gradient norm in the first run at that step (NaN/Inf as recorded).
        b: the same in the second run.
        ratio: ``max(a / b, b / a)`` (``inf`` when one is 0 or NaN/Inf and the other is not).
        optimizer_b: the second run's optimizer of that step.
    """

    step: int
    optimizer: str
    layer: str
    a: float
    b: float
    ratio: float
    optimizer_b: str = ""


def ratio(a: float, b: float) -> float | None:
    """How far apart two norms are: ``max(a / b, b / a)``; ``inf`` when exactly one is 0 or not
    finite; 1.0 when both are 0; None when either is missing (NaN from no gradient is passed as
    None by the caller) or both are not finite (nothing to compare)."""
    finite_a, finite_b = math.isfinite(a), math.isfinite(b)
    if not finite_a and not finite_b:
        return None
    if finite_a != finite_b:
        return math.inf
    if a == b:
        return 1.0
    if a == 0 or b == 0:
        return math.inf
    return max(a / b, b / a)


def aligned(a: LayerNorms, b: LayerNorms) -> list[tuple[int, int]]:
    """Pairs ``(row of a, row of b)`` of the steps both runs kept: the same step number and
    optimizer (see the module docstring for two runs whose single optimizers differ), in the
    order of ``a``'s steps."""
    names_a, names_b = set(a.optimizers), set(b.optimizers)
    rename = {}
    if len(names_a) == 1 and len(names_b) == 1 and names_a != names_b:
        rename = {next(iter(names_b)): next(iter(names_a))}
    rows_b = {
        (step, rename.get(name, name)): row for row, (step, name) in enumerate(zip(b.steps, b.optimizers))
    }
    pairs = []
    for row, key in enumerate(zip(a.steps, a.optimizers)):
        if key in rows_b:
            pairs.append((row, rows_b[key]))
    return pairs


def partings(a: LayerNorms, b: LayerNorms, factor: float = DEFAULT_FACTOR) -> list[Parting]:
    """Per layer both runs have, the first aligned step where the two norms part by more than
    ``factor`` (:func:`ratio`); in the order of the steps, then of the layers (input side first).

    Raises:
        HookvizError: ``factor`` is not a number above 1.
    """
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not factor > 1:
        raise HookvizError(f"factor={factor!r} must be a number above 1 (a ratio of norms), e.g. factor=10")
    shared = [layer for layer in a.layers if layer in b.layers]
    columns = [(layer, a.layers.index(layer), b.layers.index(layer)) for layer in shared]
    found: dict[str, tuple[int, Parting]] = {}  # layer -> (row of a, its parting)
    norms_a, norms_b = a.norm.tolist(), b.norm.tolist()
    counts_a, counts_b = a.nonfinite.tolist(), b.nonfinite.tolist()
    for row_a, row_b in aligned(a, b):
        for layer, column_a, column_b in columns:
            if layer in found:
                continue
            value_a, value_b = norms_a[row_a][column_a], norms_b[row_b][column_b]
            missing_a = math.isnan(value_a) and counts_a[row_a][column_a] == 0
            missing_b = math.isnan(value_b) and counts_b[row_b][column_b] == 0
            apart = None if missing_a or missing_b else ratio(value_a, value_b)
            if apart is not None and apart > factor:
                found[layer] = (
                    row_a,
                    Parting(
                        a.steps[row_a],
                        a.optimizers[row_a],
                        layer,
                        value_a,
                        value_b,
                        apart,
                        b.optimizers[row_b],
                    ),
                )
    order = {layer: i for i, layer in enumerate(shared)}
    return [p for _, p in sorted(found.values(), key=lambda item: (item[0], order[item[1].layer]))]


def first_parting(found: list[Parting]) -> Parting | None:
    """The first step where the runs part and, of the layers that part then, the one furthest
    apart (the largest :attr:`Parting.ratio`; the first in layer order on a tie); None when
    they never part."""
    if not found:
        return None
    first = [p for p in found if (p.step, p.optimizer) == (found[0].step, found[0].optimizer)]
    return max(first, key=lambda p: p.ratio)


def _steps_text(steps: list[int]) -> str:
    shown = ", ".join(map(str, steps[:8]))
    return f"{shown} ... {steps[-1]} ({len(steps)} steps)" if len(steps) > 8 else shown
