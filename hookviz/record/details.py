"""The details of a lazy run, computed the first time they are read.

A run recorded with ``details="lazy"`` (the default) keeps what every view needs at once: each
gradient's shape, dtype and 2-norm (one reduction per gradient, queued while backward runs; the
gradient itself is not held). Everything else (values, min, max, mean, NaN/Inf counts, zero
fractions, histograms, forward values and what module hooks saw in forward) is *deferred*: the
first read of any of it records the same run once more with full details (a fresh forward with the
session's first random state and the run's own edits, so the same numbers come out: hookviz's runs
are reproducible, see :class:`hookviz.Session`), pairs that run's records with the lazy run's by
their place (node id and slot, module call and slot, hook call), and fills every deferred field of
the lazy run at once.

What hook calls saw (the user's hooks and hookviz's edits) is summarised in full at once: a hook
removed after the run would not be called again. When the details can no longer be recomputed (the
model's parameters or inputs changed since the run), or the second run does not reproduce
a gradient (its norm differs, say because a hook that changed gradients was removed since), those
fields get empty values and a note saying why, and forward values are filled only when every
gradient matched; nothing is guessed.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable

from hookviz.errors import HookvizError

UNAVAILABLE = {
    "value": None,
    "mean": None,
    "min": None,
    "max": None,
    "nan_count": 0,
    "inf_count": 0,
    "zero_fraction": math.nan,
    "histogram": None,
    "overview": None,
}


class DetailsUnavailable(HookvizError):
    """The details of a lazy run cannot be recomputed; the message says why."""


class Details:
    """The source of one lazy run's deferred fields (see the module docstring).

    Records are registered with :meth:`defer` while the run is assembled; :meth:`bind` then names
    the run and ``recompute``, a callable that records the same run with full details and returns
    it, or raises :class:`DetailsUnavailable`. :meth:`fill` runs at most once.
    """

    def __init__(self):
        self.deferred: list = []  # the records with fields left to fill
        # The records reach this source through one link that holds it weakly: a record holding it
        # would make each unfilled run one reference cycle, freed only by the cyclic collector
        # after its records had filled the older generations (and a weak reference per record
        # instead was a seventh of the objects a run keeps).
        self.link = _Link(self)
        self.run_ref: weakref.ref | None = None
        self.recompute: Callable | None = None
        self.filled = False

    def defer(self, record, names) -> None:
        """Leave ``names`` of ``record`` (a :class:`~hookviz.data.deferred.Deferrable`) to :meth:`fill`."""
        record.defer(names, self.link)
        self.deferred.append(record)

    def pending(self, cls, fields: dict):
        """A new record of ``cls`` holding ``fields``, its other deferred fields left to :meth:`fill`
        (see :meth:`~hookviz.data.deferred.Deferrable.pending_record`)."""
        record = cls.pending_record(self.link, fields)
        self.deferred.append(record)
        return record

    def bind(self, run, recompute: Callable) -> None:
        """Name the run these records belong to and how to record it again with full details."""
        self.run_ref, self.recompute = weakref.ref(run), recompute

    def fill(self, record=None) -> None:
        """Fill every deferred field of the run (one full re-run), or mark them unavailable.
        (``record``: the record whose read asked; every one is filled.)"""
        if self.filled:
            return
        self.filled = True  # also while filling: a read inside recompute must not recurse
        run = self.run_ref() if self.run_ref is not None else None
        if run is not None:
            run.fill_deferred()  # its records first: they register here as they are made
        reason = _GONE
        interrupted = None
        if run is not None and self.recompute is not None:
            try:
                _fill_from(run, self.recompute())
                reason = "the run could not be reproduced (a record's norm differs the second time)"
            except DetailsUnavailable as error:
                reason = str(error)
            except BaseException as error:  # a hook that raised, out of memory, Ctrl+C: no half-run
                reason = f"recording them again failed: {type(error).__name__}: {error}"
                interrupted = error
        note = f"details unavailable: {reason}"
        for record in self.deferred:
            if record.pending:
                _mark_unavailable(record, note)
        self.deferred, self.recompute = [], None
        if interrupted is not None and not isinstance(interrupted, Exception):
            raise interrupted  # KeyboardInterrupt and SystemExit still stop the caller


_GONE = "the run they belong to is gone"


class _Link:
    """What the records of one lazy run hold to reach its :class:`Details`: it weakly, so that
    the records keep it from nothing (the run does). A record read after its run and its
    Details are gone is marked unavailable."""

    __slots__ = ("details",)

    def __init__(self, details: Details):
        self.details = weakref.ref(details)

    def fill(self, record=None) -> None:
        details = self.details()
        if details is not None:
            details.fill(record)
        elif record is not None and record.pending:
            _mark_unavailable(record, f"details unavailable: {_GONE}")


def _mark_unavailable(record, note: str) -> None:
    names = type(record).DEFERRED
    if "value" in names:  # a TensorRecord
        record.settle(**{n: UNAVAILABLE.get(n) for n in names if n != "norm"}, norm=None)
        record.note = "; ".join(filter(None, [record.note, note]))
    elif names == ("output",):  # a NodeRecord's forward value
        record.settle(output=None)
    else:  # what a ModuleCall's forward hooks saw
        record.settle(inputs={}, output=[], output_replaced=None)


def _same_norm(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if not (math.isfinite(a) and math.isfinite(b)):
        return not math.isfinite(a) and not math.isfinite(b)
    return math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-30)


def _pair(mine, theirs) -> int:
    """Fill the pending records of ``mine`` from the full records of ``theirs`` (same places);
    returns how many did not match (another shape, dtype or norm: not the same run)."""
    if mine is None or theirs is None:
        return 0
    mismatches = 0
    for a, b in zip(mine, theirs):
        if a is None or b is None or not a.pending:
            continue
        known = a.__dict__.get("norm")
        if a.shape != b.shape or a.dtype != b.dtype or not _same_norm(known, b.norm):
            mismatches += 1
            continue
        fields = {n: getattr(b, n) for n in type(a).DEFERRED if n != "norm"}
        if known is not None and not math.isfinite(known):
            a.__dict__["norm"] = b.norm  # float32 squares overflow; the full record took double
        a.settle(**fields)
    return mismatches


def _fill_from(run, full) -> None:
    """Gradients first, each checked by its norm; forward values (which have no norm to check
    by) only when every gradient matched, i.e. the second run was the same run."""
    mismatches = _fill_gradients(run, full)
    if mismatches:
        return
    for node_id, record in run.nodes.items():
        other = full.nodes.get(node_id)
        if record.pending and other is not None and other.op == record.op:
            record.settle(output=other.output)
    for call, other in zip(run.calls, full.calls):
        if call.pending and (call.module, call.call) == (other.module, other.call):
            call.settle(inputs=other.inputs, output=other.output, output_replaced=other.output_replaced)


def _fill_gradients(run, full) -> int:
    mismatches = 0
    for node_id, record in run.nodes.items():
        other = full.nodes.get(node_id)
        if other is None or other.op != record.op:
            mismatches += 1
            continue
        mismatches += _pair(record.grad_outputs, other.grad_outputs)
        mismatches += _pair(record.grad_inputs, other.grad_inputs)
        mismatches += _pair(record.grad_inputs_before_edit, other.grad_inputs_before_edit)
        mismatches += _pair(record.grad_outputs_before_edit, other.grad_outputs_before_edit)
    if len(run.calls) != len(full.calls):
        return mismatches + 1
    for call, other in zip(run.calls, full.calls):
        if (call.module, call.call) != (other.module, other.call):
            mismatches += 1
            continue
        for name in (
            "grad_input",
            "grad_output",
            "grad_input_before_edit",
            "grad_output_before_edit",
            "legacy_grad_input",
            "legacy_grad_output",
        ):
            mismatches += _pair(getattr(call, name), getattr(other, name))
    return mismatches
