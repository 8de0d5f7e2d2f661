"""One watched backward's gradients reduced to one row of statistics by the one engine.

A :class:`StepReducer` is given the ``(column, gradient)`` pairs of one backward
(:meth:`StepReducer.add`) and returns a float64 row ``[width, 4]`` of :data:`STATISTICS` (``norm``,
``max_abs``, ``nonfinite``, ``zero_fraction``) per column, NaN where a column got no gradient
(:meth:`StepReducer.finish`). The numbers are :func:`hookviz.stats.reduce.reduce`'s, so they equal a
run's and a rank gather's for the same tensor bit for bit. Several gradients of one column (a
module called twice) are merged by :func:`hookviz.stats.reduce.combine`; one gradient object handed
to a column twice (a module called twice whose outputs get one gradient, ``a + b``) counts twice,
as two equal gradients would.

Gradients wait for :meth:`finish`, where each (device, dtype) is reduced in a few batched calls and
read back with one host transfer. On CPU a batch is reduced as soon as it holds ``FLUSH_BYTES`` of
gradients, so a large model's module-output gradients are not all held to the end of the backward.
"""

from __future__ import annotations

import math

import torch

from hookviz.stats.reduce import Measured, Statistics, combine, measure
from hookviz.watching.history import STATISTICS

FLUSH_BYTES = 1 << 24  # on CPU, gradients this large in all are reduced during the backward


class StepReducer:
    """Reduces one backward's ``(column, gradient)`` pairs to a ``[width, 4]`` float64 row (CPU)."""

    def __init__(self) -> None:
        self._pending: list[tuple[list[int], torch.Tensor]] = []
        self._pending_bytes = 0
        self._pending_cpu = True  # whether every pending gradient is on the CPU
        self._last: tuple[list[int], torch.Tensor] | None = None
        # reduced batches: (column lists, their rows) on CPU, (column lists, Measured) elsewhere
        self._done: list[tuple[list[list[int]], list[Statistics] | Measured]] = []

    def __call__(self, pairs: list[tuple[int, torch.Tensor]], width: int) -> torch.Tensor:
        for column, grad in pairs:
            self.add(column, grad)
        return self.finish(width)

    def add(self, column: int, grad: torch.Tensor) -> None:
        """Take one gradient of ``column`` (reduced at :meth:`finish`, or on CPU once enough waits)."""
        last = self._last
        if last is not None and last[1] is grad:  # hooks on one tensor fire one after the other
            last[0].append(column)
            return
        if not grad.numel():
            return
        columns = [column]
        self._last = (columns, grad)
        self._pending.append((columns, grad))
        if grad.is_cpu:
            self._pending_bytes += grad.numel() * grad.element_size()
            if self._pending_bytes >= FLUSH_BYTES:
                self._flush()
        else:
            self._pending_cpu = False

    def _flush(self) -> None:
        if not self._pending:
            return
        columns = [c for c, _ in self._pending]
        measured = measure([g for _, g in self._pending], sums=False)
        # On CPU the numbers exist already: read them now, so the gradients are not held.
        self._done.append((columns, measured.rows() if self._pending_cpu else measured))
        self._pending, self._pending_bytes, self._pending_cpu, self._last = [], 0, True, None

    def finish(self, width: int) -> torch.Tensor:
        """The ``[width, 4]`` float64 row of everything added; the reducer is empty afterwards."""
        self._flush()
        found: dict[int, list[Statistics]] = {}
        for column_lists, rows in self._done:
            if isinstance(rows, Measured):
                rows = rows.rows()
            for columns, row in zip(column_lists, rows):
                for column in columns:
                    found.setdefault(column, []).append(row)
        self._done = []
        merged = {c: rows[0] if len(rows) == 1 else combine(rows) for c, rows in found.items()}
        return watch_row(merged, width)


def watch_row(rows: dict[int, Statistics], width: int) -> torch.Tensor:
    """float64 ``[width, 4]``: each column's :data:`STATISTICS` from its row, NaN where none."""
    flat = [math.nan] * (width * len(STATISTICS))
    for column, row in rows.items():
        at = column * len(STATISTICS)
        flat[at : at + len(STATISTICS)] = statistics_of(row)
    return torch.tensor(flat, dtype=torch.float64).view(width, len(STATISTICS))


def statistics_of(row: Statistics) -> tuple[float, float, float, float]:
    """A watch's ``(norm, max_abs, nonfinite, zero_fraction)`` from one engine row."""
    # max() keeps a NaN maximum (aminmax makes both extremes NaN together)
    return (
        float(row.norm),
        float(max(row.max, -row.min)),
        float(row.nan_count + row.inf_count),
        row.zero_fraction,
    )


def row_from_statistics(values, numel: int) -> Statistics:
    """An engine row back from a watch's four numbers and the gradient's element count (for
    :func:`hookviz.stats.reduce.combine`): its min and max are ``-max_abs`` and ``max_abs``, its
    NaN count the NaN + Inf count, which is what combining them needs."""
    norm, max_abs, nonfinite, zero_fraction = values
    return Statistics(
        numel=numel,
        norm=norm,
        min=-max_abs,
        max=max_abs,
        nan_count=int(nonfinite),
        zero_count=round(zero_fraction * numel),
    )
