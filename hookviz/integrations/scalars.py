"""A watch's numbers as the scalars a trainer's loggers take: ``{"hookviz/...": float}``.

At each of the trainer's logging points a callback logs (through Lightning's ``log_dict``, or
merged into the Hugging Face ``Trainer``'s ``logs``), for the last kept step of each optimizer
(of the watch, without ``optimizer=``):

- ``hookviz/grad_norm/<layer>``: the 2-norm of the layer's parameters' gradients, as the optimizer
  read them (after clipping and unscaling) (:meth:`hookviz.Watch.layer_norms`);
- ``hookviz/grad_norm_pre_clip/<layer>`` and ``hookviz/grad_norm_pre_clip_total/<optimizer>``
  (with ``optimizer=``, which both callbacks use): the same norms as the backward left the
  gradients, before clipping (unscaled when the scaler is known), and their total over the
  optimizer's parameters: what ``clip_grad_norm_`` returns, the Hugging Face Trainer logs as
  ``grad_norm`` and Lightning's ``grad_norm`` utility reads in ``on_before_optimizer_step``;
- ``hookviz/update_ratio/<layer>``: the update-to-weight ratio ``‖Δw‖/‖w‖`` of the layer's first
  parameter with one (its weight: a bias starts at zero, so its ratio says little; the watch view's
  rule), from the last kept step of that optimizer that read it (every ``stats_every``-th step);
- ``hookviz/lr/<optimizer>`` (``/group<i>`` with several param groups): the learning rate;
- ``hookviz/nonfinite/<layer>`` and ``hookviz/nonfinite``: NaN/Inf elements in the gradients;
  ``hookviz/nonfinite_steps``: the kept steps since the last log whose gradients held any;
- ``hookviz/findings/<kind>``: how many layers the step's findings name, per kind (0 once a kind
  seen before is gone);
- ``hookviz/step``: the watch's step number those numbers are of.

A layer is the module that owns a parameter (``"net.0"`` for ``"net.0.weight"``; the root module is
``(root)``), so the number of scalars is bounded by the model's layers; ``per_parameter=True`` logs
one per parameter instead (``hookviz/grad_norm/net.0.weight``). A name without a gradient at that
step is left out; a value not read at that step (an update ratio between ``stats_every`` steps) too.
"""

from __future__ import annotations

import math

from hookviz.analysis.gradient_stats import module_of
from hookviz.text import ROOT_MARK

PREFIX = "hookviz/"
ROOT = ROOT_MARK  # the root module's layer name in a scalar's name (its qualified name is "")


def _layer(name: str) -> str:
    return module_of(name) or ROOT


class Scalars:
    """The scalars of a watch to log next, and what was logged before.

    Args:
        per_parameter: one scalar per parameter instead of per layer.

    Attributes:
        logged: the step numbers logged, in order.
    """

    def __init__(self, per_parameter: bool = False):
        self.per_parameter = per_parameter
        self.logged: list[int] = []
        self._kinds: set[str] = set()  # finding kinds logged before (logged as 0 once gone)
        self._nonfinite_steps = 0  # kept steps with NaN/Inf since the last log

    def note_step(self, nonfinite: bool) -> None:
        """A kept step (from the watch's step listener): ``nonfinite`` when its gradients held NaN/Inf."""
        self._nonfinite_steps += bool(nonfinite)

    def take(self, watch) -> dict[str, float]:
        """The scalars of ``watch``'s newest kept steps (module docstring); ``{}`` when no step was
        kept since the last call (nothing new to log)."""
        if watch is None:
            return {}
        history = watch.history
        if not history.steps or (self.logged and history.steps[-1] == self.logged[-1]):
            return {}
        streams: dict[str, int] = {}  # optimizer name ("" without optimizer=) -> its last kept step
        optimizers = history.optimizers or [""] * len(history.steps)
        for index, name in enumerate(optimizers):
            streams[name] = index
        found: dict[str, float] = {}
        kinds: dict[str, int] = {}
        for name, index in sorted(streams.items(), key=lambda item: item[1]):
            step = history.steps[index]
            found.update(self._named("grad_norm", self._norms(watch, step)))
            found.update(self._named("grad_norm_pre_clip", self._pre_clip(history, index)))
            if history.pre_clip_total and not math.isnan(history.pre_clip_total[index]):
                found[f"{PREFIX}grad_norm_pre_clip_total/{name or 'optimizer'}"] = history.pre_clip_total[
                    index
                ]
            found.update(self._named("update_ratio", self._ratios(history, optimizers, index)))
            found.update(self._named("nonfinite", self._nonfinite(history, index)))
            rates = history.learning_rates[index] if history.learning_rates else []
            for group, rate in enumerate(rates):
                suffix = f"/group{group}" if len(rates) > 1 else ""
                found[f"{PREFIX}lr/{name or 'optimizer'}{suffix}"] = rate
            for finding in watch.diagnose(step, group=False):
                kinds[finding.kind] = kinds.get(finding.kind, 0) + 1
        found[f"{PREFIX}nonfinite"] = float(
            sum(v for k, v in found.items() if k.startswith(f"{PREFIX}nonfinite/"))
        )
        found[f"{PREFIX}nonfinite_steps"] = float(self._nonfinite_steps)
        self._kinds |= set(kinds)
        for kind in sorted(self._kinds):
            found[f"{PREFIX}findings/{kind}"] = float(kinds.get(kind, 0))
        found[f"{PREFIX}step"] = float(history.steps[-1])
        self._nonfinite_steps = 0
        self.logged.append(history.steps[-1])
        return found

    @staticmethod
    def _named(series: str, values: dict[str, float]) -> dict[str, float]:
        return {f"{PREFIX}{series}/{name}": value for name, value in values.items()}

    def _norms(self, watch, step: int) -> dict[str, float]:
        if self.per_parameter:
            return watch.norms(step, kind="parameter")
        return {layer or ROOT: norm for layer, norm in watch.layer_norms(step).items()}

    def _columns(self, history) -> list[tuple[int, str]]:
        """(column, the scalar's name suffix) of each parameter, in column order."""
        return [
            (c, name if self.per_parameter else _layer(name))
            for c, (name, kind) in enumerate(zip(history.names, history.kinds))
            if kind == "parameter"
        ]

    def _ratios(self, history, optimizers: list[str], index: int) -> dict[str, float]:
        """The update ratios of the last step of this step's optimizer, up to it, that read them."""
        ratios = history.update_ratio
        if ratios is None or not bool(ratios.isfinite().any()):  # without optimizer=: none read
            return {}
        for earlier in range(index, -1, -1):
            if optimizers[earlier] != optimizers[index]:
                continue
            row = ratios[earlier].tolist()
            values: dict[str, float] = {}
            for column, name in self._columns(history):
                if math.isfinite(row[column]) and name not in values:
                    values[name] = row[column]
            if values:
                return values
        return {}

    def _pre_clip(self, history, index: int) -> dict[str, float]:
        """The 2-norm per layer (or parameter) of the gradients as the backward left them, before
        clipping, at kept step ``index``; ``{}`` without ``optimizer=`` (none read)."""
        if history.pre_clip_norm is None:
            return {}
        row = history.pre_clip_norm[index].tolist()
        squares: dict[str, float] = {}
        for column, name in self._columns(history):
            if not math.isnan(row[column]):
                squares[name] = squares.get(name, 0.0) + row[column] ** 2
        return {name: math.sqrt(total) for name, total in squares.items()}

    def _nonfinite(self, history, index: int) -> dict[str, float]:
        """NaN/Inf elements per layer (or parameter) at kept step ``index``, where a gradient came."""
        norms, counts = history.norm[index].tolist(), history.nonfinite[index].tolist()
        values: dict[str, float] = {}
        for column, name in self._columns(history):
            if not math.isnan(norms[column]) or counts[column] > 0:
                values[name] = values.get(name, 0.0) + counts[column]
        return values
