"""Tensor records: what a run keeps of each tensor (:class:`TensorRecord`), its JSON form, the
one rule for whether a gradient changed (:func:`same_values`), and ``==`` on records
(:func:`equal_values`, :class:`ComparedByValue`).

The records are made by :class:`hookviz.data.stats_batch.StatsBatch`.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from dataclasses import dataclass

import torch

from hookviz.advice import advice
from hookviz.data.deferred import Fillable
from hookviz.stats.reduce import combined_norm as combined_norm  # where its callers import it
from hookviz.text import number

_LOG = logging.getLogger("hookviz.data")


def json_float(value: float | None) -> float | str | None:
    """A float JSON can hold (the one rule, for records, payloads and files): NaN/Inf as
    ``"nan"``/``"inf"``/``"-inf"``; None stays None."""
    if value is None:
        return None
    value = float(value)
    if math.isfinite(value):
        return value
    return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")


def _json_values(values: list) -> list:
    return [_json_values(v) if isinstance(v, list) else _json_number(v) for v in values]


def _json_number(value) -> float | str | None:
    """A number for JSON: a complex one as text (``"0.5-1.2j"``), which JSON has no type for."""
    if isinstance(value, complex):
        return f"{value.real:.6g}{value.imag:+.6g}j"
    return json_float(float(value))


def equal_values(a, b) -> bool:
    """Whether ``a`` and ``b`` hold the same things: ``==`` on hookviz's records.

    Tensors are equal when :func:`same_values` says so (shape, dtype and every element, bit for
    bit, NaN equal to NaN) on the same device; floats when equal or both NaN; lists, tuples and
    dicts item by item; dataclasses (records) of one type field by field (those with
    ``compare=True``); anything else by its own ``==``.

    Two things that cannot be compared read as not equal, with a warning and its traceback on the
    ``hookviz.data`` logger: a tensor without values (a ``meta`` tensor: PyTorch raises
    NotImplementedError or RuntimeError reading it) or an ``==`` whose result is not a bool (a
    numpy array's: ValueError, TypeError). Any other error propagates.
    """
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    try:
        if isinstance(a, torch.Tensor):
            return a.device == b.device and same_values(a, b)
        if isinstance(a, float):
            return a == b or (math.isnan(a) and math.isnan(b))
        if isinstance(a, (list, tuple)):
            return len(a) == len(b) and all(equal_values(x, y) for x, y in zip(a, b))
        if isinstance(a, dict):
            return a.keys() == b.keys() and all(equal_values(a[k], b[k]) for k in a)
        if dataclasses.is_dataclass(a):
            compared = [f.name for f in dataclasses.fields(a) if f.compare]
            return all(equal_values(getattr(a, name), getattr(b, name)) for name in compared)
        return bool(a == b)
    except (NotImplementedError, RuntimeError, TypeError, ValueError):
        _LOG.warning("== of two %s cannot compare them: read as not equal", type(a).__name__, exc_info=True)
        return False


class ComparedByValue:
    """Mixin for a record dataclass (declared with ``eq=False``): ``==`` is :func:`equal_values`,
    so it never raises on the tensors a record holds (a dataclass's own ``==`` compares tuples of
    tensors, which raises "Boolean value of Tensor ... is ambiguous"). Records stay unhashable."""

    def __eq__(self, other) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return equal_values(self, other)

    __hash__ = None


@dataclass(eq=False)
class TensorRecord(ComparedByValue, Fillable):
    """What hookviz keeps of one tensor: metadata, statistics, and the values when small.

    In a run recorded with ``details="lazy"`` (the default) a gradient's record holds its shape,
    dtype, device and ``norm``; its other fields are None and named in ``pending`` until
    :meth:`hookviz.data.run.Run.fill_details` records them (:mod:`hookviz.record.details`).
    Nothing is recorded on read.

    Attributes:
        shape: the tensor's shape.
        dtype: dtype name without the ``torch.`` prefix, e.g. ``"float32"``.
        device: device string, e.g. ``"cpu"`` or ``"cuda:0"``.
        numel: number of elements.
        value: a detached CPU copy when ``numel`` is at most the run's full-tensor limit, else None.
        norm: 2-norm over all elements (``torch.linalg.vector_norm``); None for an empty tensor.
        mean: over all elements; None for an empty tensor; NaN propagates.
        min: over all elements, exact (an int for an integer tensor); None for an empty tensor.
        max: over all elements, exact (an int for an integer tensor); None for an empty tensor.
        nan_count: number of NaN elements.
        inf_count: number of +/-Inf elements.
        zero_fraction: fraction of elements exactly equal to 0 (0.0 for an empty tensor).
        histogram: ``(counts, edges)`` with ``len(edges) == len(counts) + 1`` over ``[min, max]``,
            for tensors of more than ``HISTOGRAM_ABOVE`` (16) elements with finite min and max
            (exact up to ``HISTOGRAM_SAMPLE`` elements, of a fixed sample above); else None.
        overview: of a 2-D tensor above the full-tensor limit, for a heatmap: float32
            ``[min(rows, 32), min(columns, 32)]``, the root mean square of each block of rows x
            columns (``adaptive_avg_pool2d`` of ``x**2``, square-rooted: no sign cancels); else None.
        note: why something is missing, e.g. the value was modified in place after it was recorded,
            or what the statistics are of: a complex tensor's are of its magnitude ``|z|``, a
            sparse tensor's of its stored values (the zeros it does not store count in
            ``zero_fraction`` and ``mean``).
        nnz: of a sparse tensor, ``_nnz()`` after coalescing (the number of stored indices: rows of an
            embedding's gradient), else None.
        pending: the fields that wait for ``Run.fill_details()`` (None meanwhile); ``()`` when
            the record is complete.
    """

    shape: tuple[int, ...]
    dtype: str
    device: str
    numel: int
    value: torch.Tensor | None = None
    norm: float | None = None
    mean: float | None = None
    min: float | None = None
    max: float | None = None
    nan_count: int | None = 0
    inf_count: int | None = 0
    zero_fraction: float | None = 0.0
    histogram: tuple[list[int], list[float]] | None = None
    overview: torch.Tensor | None = None
    note: str = ""
    nnz: int | None = None
    pending: tuple[str, ...] = ()

    DEFERRED = (
        "value",
        "norm",
        "mean",
        "min",
        "max",
        "nan_count",
        "inf_count",
        "zero_fraction",
        "histogram",
        "overview",
    )

    @property
    def finite(self) -> bool:
        """True when the tensor holds no NaN and no Inf. On a record whose counts are pending it
        reads the norm (a finite 2-norm proves there is neither)."""
        if "nan_count" in self.pending:
            return self.norm is None or math.isfinite(self.norm)
        return self.nan_count == 0 and self.inf_count == 0

    def to_dict(self, fields: tuple[str, ...] | None = None) -> dict:
        """A JSON-safe dict of every field, or of ``fields`` only (in that order; the others are
        not read, so a lazy record fills nothing for them); NaN/Inf become the strings "nan",
        "inf", "-inf".

        Args:
            fields: names of the fields to write, in that order; None for every field.
        """
        return {name: _JSON_FIELD[name](self) for name in (fields or _JSON_FIELD)}

    def __repr__(self) -> str:
        if self.pending:
            shown = "" if self.norm is None else f", norm={number(self.norm)}"
            return (
                f"TensorRecord(shape={list(self.shape)}, dtype={self.dtype}{shown}, "
                f"pending={list(self.pending)}: {advice('fill_details')} records them)"
            )
        if self.value is not None:
            return f"TensorRecord({self.value.tolist()}, dtype={self.dtype}, device={self.device})"
        return (
            f"TensorRecord(shape={list(self.shape)}, dtype={self.dtype}, norm={number(self.norm)}, "
            f"min={self.min}, max={self.max}, nan={self.nan_count}, inf={self.inf_count})"
            if self.norm is not None
            else f"TensorRecord(shape={list(self.shape)}, dtype={self.dtype}, {self.note or 'empty'})"
        )


def same_values(a: torch.Tensor, b: torch.Tensor) -> bool:
    """The one rule for "did this gradient change?": same shape and the same elements, bit for bit,
    with NaN equal to NaN (a NaN that stays a NaN is no change); sparse tensors compared dense."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    a = (a.to_dense() if a.is_sparse else a).detach().cpu()
    b = (b.to_dense() if b.is_sparse else b).detach().cpu()
    if torch.equal(a, b):
        return True
    if not (a.is_floating_point() or a.is_complex()):
        return False
    nan_a, nan_b = torch.isnan(a), torch.isnan(b)
    return torch.equal(nan_a, nan_b) and torch.equal(a.masked_fill(nan_a, 0), b.masked_fill(nan_b, 0))


def _json_value(record: TensorRecord):
    value = record.value
    if value is None:
        return None
    if value.dim() and value.is_floating_point() and record.finite:  # JSON-safe floats already
        return value.tolist()
    return _json_values(value.tolist()) if value.dim() > 0 else _json_number(value.item())


def _json_histogram(record: TensorRecord):
    if record.histogram is None:
        return None
    counts, edges = record.histogram
    return {"counts": counts, "edges": [json_float(e) for e in edges]}


# Each field of TensorRecord.to_dict as JSON, in its order.
_JSON_FIELD = {
    "shape": lambda r: list(r.shape),
    "dtype": lambda r: r.dtype,
    "device": lambda r: r.device,
    "numel": lambda r: r.numel,
    "value": _json_value,
    "norm": lambda r: json_float(r.norm),
    "mean": lambda r: json_float(r.mean),
    "min": lambda r: json_float(r.min),
    "max": lambda r: json_float(r.max),
    "nan_count": lambda r: r.nan_count,
    "inf_count": lambda r: r.inf_count,
    "zero_fraction": lambda r: r.zero_fraction,
    "histogram": _json_histogram,
    "overview": lambda r: None if r.overview is None else _json_values(r.overview.tolist()),
    "note": lambda r: r.note or (_PENDING_NOTE if r.pending else ""),
    "nnz": lambda r: r.nnz,
    "pending": lambda r: list(r.pending),
}
# What the page shows in place of a pending record's values.
_PENDING_NOTE = f"details not recorded yet: {advice('fill_details')} records them"
