"""A watch's kept steps as a compact table: :class:`History` (shared by one-process and gathered watches)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from hookviz.errors import WatchError, unknown_name
from hookviz.stats.reduce import SUMMARY

STATISTICS = SUMMARY  # a watch keeps the engine's summary of each gradient


@dataclass
class StepInfo:
    """What one kept step was, beside its gradients.

    Attributes:
        optimizer: the name of the optimizer whose ``step()`` it is (``""``: a step is a backward).
        skipped: the ``GradScaler`` found Inf/NaN and skipped ``optimizer.step()``.
        learning_rates: each param group's learning rate when it stepped (empty without optimizer).
        loss_scale: the ``GradScaler``'s scale then (NaN without one). Without ``optimizer=`` the
            gradients carry it; with one they were unscaled before the step read them.
        pre_clip_total: with ``optimizer=``, the 2-norm of all the step's gradients as the last
            backward left them (before clipping; unscaled when the scaler is known), as
            ``torch.nn.utils.clip_grad_norm_`` returns it; NaN where not read. DDP: the all-reduced
            gradients' (the same on every rank); FSDP2: NaN (a rank holds shards: ``gather()``
            combines them).
    """

    optimizer: str = ""
    skipped: bool = False
    learning_rates: list[float] = field(default_factory=list)
    loss_scale: float = math.nan
    pre_clip_total: float = math.nan


@dataclass
class History:
    """The kept steps of a watch as a compact table (no pandas needed).

    Attributes:
        steps: the step numbers kept, ascending (list of int).
        names: parameter and module names, one column each (parameters first).
        kinds: ``"parameter"`` or ``"output"`` per name.
        norm, max_abs, nonfinite, zero_fraction: float64 tensors of shape ``[len(steps),
            len(names)]``; NaN where a name got no gradient in that step.
        update_ratio: float64 ``[len(steps), len(names)]``: ``‖w_after - w_before‖ / ‖w_after‖``
            of each parameter the step updated (``optimizer=`` only); NaN elsewhere, or None.
        optimizers, skipped, learning_rates, loss_scales: per step, as :class:`StepInfo` holds them
            (empty lists for a history saved before they existed).
        pre_clip_norm: float64 ``[len(steps), len(names)]`` with ``optimizer=``: each gradient's
            2-norm as the backward left it, before clipping (unscaled when the ``GradScaler`` is
            known); NaN where not read; None without ``optimizer=`` (there ``norm`` is that already).
            DDP / FSDP2: this rank's own gradient's, before the all-reduce (as ``norm`` is).
        pre_clip_total: per step, the total of ``pre_clip_norm`` over the step's parameters (what
            ``clip_grad_norm_`` returns; DDP / FSDP2: as :class:`StepInfo` says); empty without
            ``optimizer=`` or in older files.
    """

    steps: list[int]
    names: list[str]
    kinds: list[str]
    norm: torch.Tensor
    max_abs: torch.Tensor
    nonfinite: torch.Tensor
    zero_fraction: torch.Tensor
    update_ratio: torch.Tensor | None = None
    optimizers: list[str] = field(default_factory=list)
    skipped: list[bool] = field(default_factory=list)
    learning_rates: list[list[float]] = field(default_factory=list)
    loss_scales: list[float] = field(default_factory=list)
    pre_clip_norm: torch.Tensor | None = None
    pre_clip_total: list[float] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.steps)

    @property
    def full_steps(self) -> list[int]:
        """The steps with every statistic: where each parameter that got a gradient has its
        ``zero_fraction`` (and ``max_abs``) measured. A watch's other steps kept only norms
        (``hookviz.watch(..., stats_every=N)``): ``max_abs`` and ``zero_fraction`` NaN there."""
        parameters = [i for i, kind in enumerate(self.kinds) if kind == "parameter"]
        norm, fraction = self.norm[:, parameters], self.zero_fraction[:, parameters]
        got = ~norm.isnan() | (self.nonfinite[:, parameters] > 0)
        full = (~got | ~fraction.isnan()).all(1) & got.any(1)
        return [step for step, keep in zip(self.steps, full.tolist()) if keep]

    def column(self, name: str, statistic: str = "norm") -> list[float]:
        """One name's values of one statistic over the kept steps."""
        if name not in self.names:
            raise WatchError(unknown_name("parameter or module", name, self.names))
        if statistic not in STATISTICS:
            raise WatchError(f"unknown statistic {statistic!r}; choose one of {', '.join(STATISTICS)}")
        return getattr(self, statistic)[:, self.names.index(name)].tolist()

    def to_records(self) -> list[dict]:
        """Long form: one dict per (step, name) with ``step, name, kind`` and the statistics."""
        tables = [getattr(self, s).tolist() for s in STATISTICS]
        return [
            {
                "step": step,
                "name": name,
                "kind": kind,
                **{s: table[row][column] for s, table in zip(STATISTICS, tables)},
            }
            for row, step in enumerate(self.steps)
            for column, (name, kind) in enumerate(zip(self.names, self.kinds))
        ]

    def to_pandas(self):
        """The long form as a ``pandas.DataFrame``. Raises WatchError when pandas is not installed."""
        try:
            import pandas
        except ImportError:
            raise WatchError(
                "to_pandas() needs pandas, which is not installed: pip install pandas, "
                "or use to_records() / the tensors of this History"
            ) from None
        return pandas.DataFrame.from_records(self.to_records())
