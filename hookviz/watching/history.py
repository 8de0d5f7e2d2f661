"""A watch's kept steps as a compact table: :class:`History` (shared by one-process and gathered watches)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from hookviz.errors import WatchError, unknown_name
from hookviz.stats.reduce import SUMMARY
from hookviz.text import NO_GRADIENT, NOT_MEASURED, number

STATISTICS = SUMMARY  # a watch keeps the engine's summary of each gradient
# Every per-name table a History may hold: what History.measured() answers for.
MEASURED = (*STATISTICS, "update_ratio", "pre_clip_norm")
# How much of a History its text shows: the first and last steps and names beyond these counts.
SHOWN_STEPS, SHOWN_NAMES = 8, 12


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


@dataclass(repr=False)
class History:
    """The kept steps of a watch as a compact table (no pandas needed).

    A NaN in a table means one of three things, told apart by :meth:`measured` and
    :meth:`gradient`: the name got no gradient at that step, the watch did not read that
    statistic then (``stats_every``: norms every step, the rest every N-th; update ratios with the
    other statistics), or the value read was NaN (a NaN gradient). ``print(history)`` writes them
    ``"no grad"``, ``"—"`` and ``"NaN"``.

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
        update_measured: bool ``[len(steps), len(names)]``: where an update ratio was read (one read
            may be NaN: weights of norm 0, or NaN weights); None without ``optimizer=``, and in
            files saved before it was kept (then a ratio counts as read where it is not NaN).
        numels: each parameter column's element count (weights a layer's zero fraction); empty
            where not known (a gathered or loaded history).
        module_types: module name -> class name, where known (an Embedding's zeros are by design).
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
    update_measured: torch.Tensor | None = None
    numels: list[int] = field(default_factory=list)
    module_types: dict[str, str] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.steps)

    def gradient(self) -> torch.Tensor:
        """bool ``[len(steps), len(names)]``: where a name got a gradient at a step. A NaN norm
        with no NaN/Inf count is no gradient; a gradient that holds NaN/Inf has its count."""
        return ~self.norm.isnan() | (self.nonfinite > 0)

    def measured(self, statistic: str = "norm") -> torch.Tensor:
        """bool ``[len(steps), len(names)]``: where the watch read ``statistic`` for a name at a
        step; the one rule of "measured". Where it is True a NaN is a real NaN.

        ``norm`` and ``nonfinite``: read for every gradient at every kept step (a finite norm
        proves the count 0). ``max_abs`` and ``zero_fraction``: read at full steps
        (``stats_every``) and alarms, where ``zero_fraction`` is never NaN. ``update_ratio``:
        where the optimizer's step was read (:attr:`update_measured`). ``pre_clip_norm``: where
        it is a number, or its gradient held NaN/Inf.

        Raises:
            WatchError: ``statistic`` is not one of :data:`MEASURED`.
        """
        got = self.gradient()
        if statistic in ("norm", "nonfinite"):
            return got
        if statistic in ("max_abs", "zero_fraction"):
            return got & ~self.zero_fraction.isnan()
        if statistic == "update_ratio":
            if self.update_ratio is None:
                return torch.zeros_like(got)
            if self.update_measured is not None:
                return self.update_measured.to(torch.bool, copy=True)
            return ~self.update_ratio.isnan()
        if statistic == "pre_clip_norm":
            if self.pre_clip_norm is None:
                return torch.zeros_like(got)
            return ~self.pre_clip_norm.isnan() | (got & (self.nonfinite > 0))
        raise WatchError(f"unknown statistic {statistic!r}; choose one of {', '.join(MEASURED)}")

    @property
    def full_steps(self) -> list[int]:
        """The steps with every statistic: where each parameter that got a gradient has its
        ``zero_fraction`` (and ``max_abs``) measured. A watch's other steps kept only norms
        (``hookviz.watch(..., stats_every=N)``): ``max_abs`` and ``zero_fraction`` NaN there."""
        parameters = [i for i, kind in enumerate(self.kinds) if kind == "parameter"]
        got = self.gradient()[:, parameters]
        full = (~got | self.measured("zero_fraction")[:, parameters]).all(1) & got.any(1)
        return [step for step, keep in zip(self.steps, full.tolist()) if keep]

    def column(self, name: str, statistic: str = "norm") -> list[float]:
        """One name's values of one statistic over the kept steps."""
        if name not in self.names:
            raise WatchError(unknown_name("parameter or module", name, self.names))
        if statistic not in STATISTICS:
            raise WatchError(f"unknown statistic {statistic!r}; choose one of {', '.join(STATISTICS)}")
        return getattr(self, statistic)[:, self.names.index(name)].tolist()

    def to_records(self) -> list[dict]:
        """Long form: one dict per (step, name) with ``step, name, kind`` and the statistics, NaN
        where not measured or no gradient (:meth:`measured` and :meth:`gradient` tell them from a
        real NaN)."""
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
        """The long form as a ``pandas.DataFrame`` (NaN as in :meth:`to_records`). Raises
        WatchError when pandas is not installed."""
        try:
            import pandas
        except ImportError:
            raise WatchError(
                "to_pandas() needs pandas, which is not installed: pip install pandas, "
                "or use to_records() / the tensors of this History"
            ) from None
        return pandas.DataFrame.from_records(self.to_records())

    def text(self, statistic: str = "norm") -> list[list[str]]:
        """``statistic``'s values as people read them, ``[len(steps)][len(names)]`` strings: a
        number by :func:`hookviz.text.number` (``"NaN"`` / ``"inf"`` only for values read so),
        :data:`hookviz.text.NOT_MEASURED` where not measured, :data:`hookviz.text.NO_GRADIENT`
        where a name got no gradient (for the gradient statistics). What ``print(history)`` and
        the watch's plots' hovers show.

        Raises:
            WatchError: ``statistic`` is not one of :data:`MEASURED`, or this history has none
            of it (``update_ratio`` / ``pre_clip_norm`` without ``optimizer=``).
        """
        return _texts(self, statistic, range(len(self.steps)), range(len(self.names)))

    def __str__(self) -> str:
        """Each statistic as a table, names x steps (the first and last of many), numbers by
        :func:`hookviz.text.number`: ``"—"`` not measured, ``"no grad"`` no gradient, ``"NaN"`` /
        ``"inf"`` only for values read so."""
        count, names = len(self.steps), len(self.names)
        parameters = self.kinds.count("parameter")
        span = f" ({self.steps[0]} … {self.steps[-1]})" if count else ""
        lines = [
            f"History: {count} kept steps{span} of {names} names ({parameters} parameters, "
            f"{names - parameters} module outputs)"
        ]
        if not count or not names:
            return "\n".join(lines)
        rows, columns = _shown(count, SHOWN_STEPS), _shown(names, SHOWN_NAMES)
        reads = []
        for statistic in MEASURED:
            table = getattr(self, statistic)
            if table is None:
                continue
            measured = self.measured(statistic)
            read = int(measured.any(1).sum())
            reads.append(f"{statistic} {'every step' if read == count else f'{read} of {count} steps'}")
            if statistic == "nonfinite" and not bool((table[measured] > 0).any()):
                continue  # said in the legend: no gradient read held NaN/Inf
            if statistic == "update_ratio" and not read:
                continue
            lines += ["", statistic] + _table(self, statistic, rows, columns)
        nonfinite = self.nonfinite[self.measured("nonfinite")]
        lines[1:1] = [
            "measured: " + ", ".join(reads),
            f'"{NOT_MEASURED}": not measured at that step; "{NO_GRADIENT}": no gradient; NaN / inf: '
            "the value read" + ("" if bool((nonfinite > 0).any()) else "; no gradient read held NaN/Inf"),
        ]
        return "\n".join(lines)

    __repr__ = __str__


def _shown(count: int, limit: int) -> list[int | None]:
    """Indices to show of ``count``: all when at most ``limit``, else the first and last halves
    with None (written "…") between."""
    if count <= limit:
        return list(range(count))
    half = limit // 2
    return [*range(half), None, *range(count - half, count)]


def _texts(history: History, statistic: str, rows, columns) -> list[list[str]]:
    """:meth:`History.text` of the steps ``rows`` and the names ``columns`` only (indices)."""
    table = getattr(history, statistic)
    if table is None:
        raise WatchError(f"this history has no {statistic} (it is kept with optimizer=)")
    rows, columns = list(rows), list(columns)
    measured = history.measured(statistic)[rows][:, columns].tolist()
    values = table[rows][:, columns].tolist()
    got = history.gradient()[rows][:, columns].tolist() if statistic in STATISTICS else None
    return [
        [
            NO_GRADIENT if got is not None and not got[r][c] else number(v) if known else NOT_MEASURED
            for c, (v, known) in enumerate(zip(line, read))
        ]
        for r, (line, read) in enumerate(zip(values, measured))
    ]


def _table(history: History, statistic: str, rows, columns) -> list[str]:
    """One statistic's lines: a name column, then one right-aligned column per shown step (None
    in ``rows`` / ``columns``: "…")."""
    steps, names = [r for r in rows if r is not None], [c for c in columns if c is not None]
    texts = _texts(history, statistic, steps, names)
    cells = [["step", *("…" if r is None else str(history.steps[r]) for r in rows)]]
    for column in columns:
        if column is None:
            cells.append(["…"] * (len(rows) + 1))
            continue
        at = names.index(column)
        cells.append(
            [history.names[column], *("…" if r is None else texts[steps.index(r)][at] for r in rows)]
        )
    widths = [max(len(line[i]) for line in cells) for i in range(len(cells[0]))]
    return [
        "  " + "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths)))
        for line in cells
    ]
