"""One watched backward's gradients reduced to one row of statistics by the one engine.

A :class:`StepReducer` is given the ``(column, gradient)`` pairs of one backward
(:meth:`StepReducer.add`) and returns a float64 row ``[width, 4]`` of :data:`STATISTICS` (``norm``,
``max_abs``, ``nonfinite``, ``zero_fraction``) per column, NaN where a column got no gradient
(:meth:`StepReducer.finish`). The numbers are :func:`hookviz.stats.reduce.reduce`'s, so they equal a
run's and a rank gather's for the same tensor bit for bit. Several gradients of one column (a
module called twice) are merged by :func:`hookviz.stats.reduce.combine`; one gradient object handed
to a column twice (a module called twice whose outputs get one gradient, ``a + b``) counts twice,
as two equal gradients would.

Gradients wait for :meth:`StepReducer.finish`, where each (device, dtype) is reduced in a few batched
calls and read back with one host transfer. On CPU a batch is reduced as soon as it holds ``FLUSH_BYTES`` of
gradients, so a large model's module-output gradients are not all held to the end of the backward.
"""

from __future__ import annotations

import functools
import math
from array import array

import torch

from hookviz.analysis.diagnose import DEFAULT_THRESHOLDS
from hookviz.stats.reduce import (
    Measured,
    Statistics,
    combine,
    measure,
    norm_column,
    norm_values_in_range,
    summary_of,
)
from hookviz.watching.history import STATISTICS

FLUSH_BYTES = 1 << 24  # on CPU, gradients this large in all are reduced during the backward


class StepReducer:
    """Reduces one backward's ``(column, gradient)`` pairs to a ``[width, 4]`` float64 row (CPU)."""

    def __init__(self) -> None:
        self._pending: list[tuple[list[int], torch.Tensor]] = []
        self._pending_bytes = 0
        self._pending_cpu = True  # whether every pending gradient is on the CPU
        self._last: tuple[list[int], torch.Tensor] | None = None
        # reduced batches: (each line's columns, element counts, their [k, 4] summary on CPU, else
        # Measured, or add_all's k norms (floats) of a norms-only read); add_all's lines have one
        # column each, given as the flat list of them (no list per line on the step's path)
        self._done: list[
            tuple[list[list[int]] | list[int], list[int], torch.Tensor | Measured | list[float]]
        ] = []
        # the columns of add_all's lines in order, while only add_all gave lines; else None
        self._distinct: list[int] | None = []

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

    def add_all(
        self, columns: list[int], grads: list[torch.Tensor], full: bool = True, alarm: float = math.inf
    ) -> bool:
        """Take one gradient for each of ``columns`` (distinct columns, distinct non-empty
        gradients: a backward's parameter ``.grad`` tensors), reduced together at :meth:`finish`.

        ``full=False`` reads only their norms (:func:`hookviz.stats.reduce.norm_values_in_range`, else
        :func:`hookviz.stats.reduce.norm_column`): their rows get ``max_abs`` and ``zero_fraction``
        NaN (not measured) and ``nonfinite`` 0 (a finite norm proves there is no NaN or Inf),
        unless a norm is not finite, above ``alarm`` or exactly 0 (NaN/Inf, an explosion, a dead
        gradient): then every statistic is read, now. Returns whether every statistic was read."""
        self._flush()
        numels = list(map(torch.Tensor.numel, grads))
        if not full:
            # the usual step (plain CPU gradients, every norm in range) is read by one call
            norms = norm_values_in_range(grads, alarm)
            if norms is None:
                norms = norm_column(grads).tolist()
                if not all(0.0 < n <= alarm for n in norms):  # NaN compares false: an alarm
                    norms = None
            if norms is not None:  # kept as the k norms (floats): finish() writes them into the row
                self._done.append((columns, numels, norms))
                self._note_distinct(columns)
                return False
        self._done.append((columns, numels, measure(grads, sums=False)))
        self._note_distinct(columns)
        return True

    def _note_distinct(self, columns: list[int]) -> None:
        if self._distinct is not None:
            self._distinct.extend(columns)

    def _flush(self) -> None:
        if not self._pending:
            return
        columns = [c for c, _ in self._pending]
        grads = [g for _, g in self._pending]
        measured = measure(grads, sums=False)
        # On CPU the numbers exist already: read them now, so the gradients are not held.
        numels = [g.numel() for g in grads]
        self._done.append((columns, numels, measured.summary() if self._pending_cpu else measured))
        self._distinct = None
        self._pending, self._pending_bytes, self._pending_cpu, self._last = [], 0, True, None

    def _norms_read(self) -> list[float] | None:
        """The norms of one norms-only ``add_all`` when that is all that was added; else None."""
        done, distinct = self._done, self._distinct
        if not self._pending and distinct is not None and len(done) == 1 and _norms_only(done[0][2]):
            return done[0][2]
        return None

    def finish_lazily(self, width: int) -> torch.Tensor | NormsRow:
        """:meth:`finish`, but the usual step's row (one norms-only :meth:`add_all` of parameters
        ``0 .. k-1`` in order) as a :class:`NormsRow`, made into a tensor only when read."""
        norms = self._norms_read()
        if norms is None or not _in_column_order(self._distinct):
            return self.finish(width)
        self._done, self._distinct = [], []
        return NormsRow(norms, width)

    def finish(self, width: int) -> torch.Tensor:
        """The ``[width, 4]`` float64 row of everything added; the reducer is empty afterwards."""
        self._flush()
        norms = self._norms_read()
        done, self._done = self._done, []
        distinct, self._distinct = self._distinct, []
        if norms is not None and _in_column_order(distinct):
            return NormsRow(norms, width).tensor()
        row = torch.full((width, len(STATISTICS)), math.nan, dtype=torch.float64)
        if not done:
            return row
        if norms is not None:  # norms only, in another order
            row[distinct] = _summary(norms)
            return row
        summaries = [_summary(s) for _, _, s in done]
        summary = summaries[0] if len(summaries) == 1 else torch.cat(summaries)
        if distinct is not None:  # add_all's lines only: one per column, in this order
            if _in_column_order(distinct):
                row[: len(distinct)] = summary
            else:
                row[distinct] = summary
            return row
        places: dict[int, list[int]] = {}  # column -> its lines of the summary
        numels: list[int] = []
        for column_lists, counts, _ in done:
            if column_lists and not isinstance(column_lists[0], list):  # add_all's: one column a line
                column_lists = [[c] for c in column_lists]
            for columns, numel in zip(column_lists, counts):
                for column in columns:
                    places.setdefault(column, []).append(len(numels))
                numels.append(numel)
        single = [(c, lines[0]) for c, lines in places.items() if len(lines) == 1]
        if len(single) == len(places):  # one line per column: copy them
            columns, lines = [c for c, _ in single], [line for _, line in single]
            if columns == lines and _in_column_order(lines):
                row[: len(lines)] = summary
            else:
                row[columns] = summary[lines]
            return row
        values = summary.tolist()
        for column, lines in places.items():
            if len(lines) == 1:
                row[column] = summary[lines[0]]
            else:  # several gradients of one column: the engine's combine() merges them
                merged = combine(row_from_statistics(values[i], numels[i]) for i in lines)
                row[column] = torch.tensor(summary_of(merged), dtype=torch.float64)
        return row


class NormsRow:
    """The usual step's ``[width, 4]`` row before it is made: the norms of columns ``0 .. k-1``
    (Python floats, each finite and above 0), ``max_abs`` and ``zero_fraction`` not measured (NaN),
    ``nonfinite`` 0 (a finite norm proves there is none); columns ``k ..`` got no gradient (NaN).
    Kept as it is (a few Python objects, no torch call on the step's path) and made by
    :meth:`tensor` when read.

    Attributes:
        norms: the ``k`` norms, in column order.
        width: the row's column count (``k`` or more).
    """

    __slots__ = ("norms", "width")

    def __init__(self, norms: list[float], width: int) -> None:
        self.norms, self.width = norms, width

    def measured(self) -> range:
        """The columns that hold a norm."""
        return range(len(self.norms))

    def tensor(self) -> torch.Tensor:
        """The float64 ``[width, 4]`` row."""
        count = len(self.norms)
        # one stack of the norms wrapped, not converted, and two constant columns, by name
        nan, zero = _constant_columns(count)
        by_name = {
            "norm": torch.frombuffer(array("d", self.norms), dtype=torch.float64),
            "max_abs": nan,
            "nonfinite": zero,
            "zero_fraction": nan,
        }
        lines = torch.stack([by_name[name] for name in STATISTICS], 1)
        if count == self.width:  # every column
            return lines
        row = torch.full((self.width, len(STATISTICS)), math.nan, dtype=torch.float64)
        row[:count] = lines
        return row


@functools.lru_cache(maxsize=8)
def _constant_columns(count: int) -> tuple[torch.Tensor, torch.Tensor]:
    """float64 ``[count]`` NaN and zeros (read, never written: :meth:`StepReducer.finish` copies them)."""
    return torch.full((count,), math.nan, dtype=torch.float64), torch.zeros(count, dtype=torch.float64)


def _in_column_order(columns: list[int]) -> bool:
    """Whether ``columns`` are ``0 .. k-1`` in order (parameters' columns come first in a row)."""
    return columns == list(range(len(columns)))


def _norms_only(summary) -> bool:
    """Whether a reduced batch is add_all's norms (a norms-only read: a list of floats), not a summary."""
    return isinstance(summary, list)


def _summary(summary: torch.Tensor | Measured | list[float]) -> torch.Tensor:
    """A reduced batch's ``[k, 4]`` summary: a norms-only batch gets ``max_abs`` and
    ``zero_fraction`` NaN (not measured) and ``nonfinite`` 0 (its norms are finite)."""
    if isinstance(summary, list):
        return NormsRow(summary, len(summary)).tensor()
    if not isinstance(summary, torch.Tensor):
        return summary.summary()
    return summary


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


EXPLODING = DEFAULT_THRESHOLDS["exploding_norm"]  # a norm above it is an alarm: the step is kept


def is_alarm(row: torch.Tensor) -> bool:
    """Whether a ``[width, 4]`` row holds NaN/Inf (``nonfinite`` above 0, or a norm that is not
    finite) or a norm above ``exploding_norm``: such a step is always kept."""
    norms = row[:, 0]
    return bool(((row[:, 2] > 0) | norms.isinf() | (norms > EXPLODING)).any())


def finite_max_abs(row: torch.Tensor, columns: list[int], grads: list[torch.Tensor]) -> None:
    """Set ``max_abs`` of each of ``columns`` whose gradient holds NaN/Inf to the largest finite
    magnitude (NaN when none is finite), in place: NaN/Inf are counted apart, in ``nonfinite``."""
    for column, grad in zip(columns, grads):
        if row[column, 2] > 0 and grad.is_floating_point():
            with torch.no_grad():
                magnitudes = grad.detach().abs()
                finite = magnitudes.isfinite()
                found = torch.where(finite, magnitudes, 0).max() if bool(finite.any()) else math.nan
                row[column, 1] = float(found)
