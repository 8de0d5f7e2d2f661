"""Tensor summaries, computed for many tensors at once.

A run may see thousands of gradients. Summarising them one by one costs a few kernel launches and a
host sync each; here they are concatenated per (device, dtype) and reduced with
``torch.segment_reduce`` and cumulative sums, so a whole run costs a handful of passes over memory and
one host transfer per chunk. Norms come from ``torch._foreach_norm``, the batched norm PyTorch's own
``clip_grad_norm_`` uses (it accumulates float32 in double on CPU, so huge gradients do not overflow).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

DEFAULT_FULL_TENSOR_LIMIT = 4096
DEFAULT_HISTOGRAM_BINS = 32
_CHUNK_ELEMENTS = 1 << 26  # bounds the transient memory of one concatenation (256 MiB of float32)


def _json_float(value: float | None) -> float | str | None:
    if value is None or math.isfinite(value):
        return value
    return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")


def _json_values(values: list) -> list:
    return [_json_values(v) if isinstance(v, list) else _json_float(float(v)) for v in values]


@dataclass
class TensorRecord:
    """What hookviz keeps of one tensor: metadata, statistics, and the values when small.

    Attributes:
        shape: the tensor's shape.
        dtype: dtype name without the ``torch.`` prefix, e.g. ``"float32"``.
        device: device string, e.g. ``"cpu"`` or ``"cuda:0"``.
        numel: number of elements.
        value: a detached CPU copy when ``numel`` is at most the run's full-tensor limit, else None.
        norm: 2-norm over all elements (``torch.linalg.vector_norm``); None for an empty tensor.
        mean, min, max: over all elements; None for an empty tensor. NaN propagates into them.
        nan_count, inf_count: number of NaN and of +/-Inf elements.
        zero_fraction: fraction of elements exactly equal to 0 (0.0 for an empty tensor).
        histogram: ``(counts, edges)`` with ``len(edges) == len(counts) + 1`` over ``[min, max]``,
            for tensors above the full-tensor limit with finite min and max; else None.
        note: why something is missing, e.g. the value was modified in place after it was recorded.
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
    nan_count: int = 0
    inf_count: int = 0
    zero_fraction: float = 0.0
    histogram: tuple[list[int], list[float]] | None = None
    note: str = ""

    @property
    def finite(self) -> bool:
        """True when the tensor holds no NaN and no Inf."""
        return self.nan_count == 0 and self.inf_count == 0

    def to_dict(self) -> dict:
        """A JSON-safe dict of every field; NaN/Inf become the strings "nan", "inf", "-inf"."""
        return {
            "shape": list(self.shape),
            "dtype": self.dtype,
            "device": self.device,
            "numel": self.numel,
            "value": None if self.value is None else _json_values(self.value.tolist())
            if self.value.dim() > 0
            else _json_float(float(self.value)),
            "norm": _json_float(self.norm),
            "mean": _json_float(self.mean),
            "min": _json_float(self.min),
            "max": _json_float(self.max),
            "nan_count": self.nan_count,
            "inf_count": self.inf_count,
            "zero_fraction": self.zero_fraction,
            "histogram": None
            if self.histogram is None
            else {"counts": self.histogram[0], "edges": [_json_float(e) for e in self.histogram[1]]},
            "note": self.note,
        }

    def __repr__(self) -> str:
        if self.value is not None:
            return f"TensorRecord({self.value.tolist()}, dtype={self.dtype}, device={self.device})"
        return (
            f"TensorRecord(shape={list(self.shape)}, dtype={self.dtype}, norm={self.norm:.4g}, "
            f"min={self.min}, max={self.max}, nan={self.nan_count}, inf={self.inf_count})"
            if self.norm is not None
            else f"TensorRecord(shape={list(self.shape)}, dtype={self.dtype}, {self.note or 'empty'})"
        )


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.float32`` -> ``"float32"``."""
    return str(dtype).removeprefix("torch.")


def _metadata_record(tensor: torch.Tensor, note: str = "") -> TensorRecord:
    return TensorRecord(
        shape=tuple(tensor.shape),
        dtype=dtype_name(tensor.dtype),
        device=str(tensor.device),
        numel=tensor.numel(),
        note=note,
    )


@dataclass
class StatsBatch:
    """Collects tensors during a run and summarises them all in :meth:`compute`.

    ``add`` returns a key; after ``compute`` the record of that key is ``records[key]``. Adding the
    same tensor object twice returns the same key, so a gradient seen by two hooks is reduced once.

    Args:
        full_limit: tensors with at most this many elements keep a full CPU copy in ``value``.
        histogram_bins: bins of the histogram of each larger tensor; 0 disables histograms.
    """

    full_limit: int = DEFAULT_FULL_TENSOR_LIMIT
    histogram_bins: int = DEFAULT_HISTOGRAM_BINS
    tensors: list[torch.Tensor] = field(default_factory=list)
    versions: list[int | None] = field(default_factory=list)
    records: list[TensorRecord] = field(default_factory=list)
    _keys: dict[int, int] = field(default_factory=dict)

    def add(self, tensor: torch.Tensor, check_version: bool = False) -> int:
        """Register ``tensor`` (detached) for summary; returns its key.

        With ``check_version``, a tensor whose version counter moved before ``compute`` (it was
        modified in place after it was recorded) gets a record with a note instead of values.
        """
        key = self._keys.get(id(tensor))
        if key is not None and self.tensors[key] is tensor:
            return key
        key = len(self.tensors)
        self._keys[id(tensor)] = key
        self.tensors.append(tensor)
        self.versions.append(tensor._version if check_version else None)
        return key

    def compute(self) -> list[TensorRecord]:
        """Summarise every added tensor; drops the references to them. Returns ``records``."""
        records: list[TensorRecord | None] = [None] * len(self.tensors)
        groups: dict[tuple, list[int]] = {}
        for key, tensor in enumerate(self.tensors):
            version = self.versions[key]
            if version is not None and tensor._version != version:
                records[key] = _metadata_record(tensor, "modified in place after it was recorded")
            elif tensor.numel() == 0 or tensor.is_complex() or tensor.is_meta or tensor.is_sparse:
                records[key] = _metadata_record(tensor)
            else:
                groups.setdefault((tensor.device, tensor.dtype), []).append(key)
        for keys in groups.values():
            for chunk in _chunks(keys, self.tensors):
                for key, record in zip(chunk, self._summarise([self.tensors[k] for k in chunk])):
                    records[key] = record
        self.records = records
        self.tensors, self.versions, self._keys = [], [], {}
        return records

    def _summarise(self, tensors: list[torch.Tensor]) -> list[TensorRecord]:
        with torch.no_grad():
            device = tensors[0].device
            lengths_list = [t.numel() for t in tensors]
            lengths = torch.tensor(lengths_list, device=device)
            flat = torch.cat([t.detach().reshape(-1) for t in tensors])
            if not flat.is_floating_point():
                flat = flat.to(torch.float32)
            norms = torch.stack(torch._foreach_norm([t.detach().to(flat.dtype) for t in tensors]))
            summed = torch.segment_reduce(flat.float(), "sum", lengths=lengths)
            mins = torch.segment_reduce(flat, "min", lengths=lengths)
            maxs = torch.segment_reduce(flat, "max", lengths=lengths)
            ends = lengths.cumsum(0) - 1
            zeros = _segment_counts(flat == 0, ends)
            if bool(torch.isfinite(flat).all()):
                nans = infs = torch.zeros_like(zeros)
            else:
                nans = _segment_counts(torch.isnan(flat), ends)
                infs = _segment_counts(torch.isinf(flat), ends)
            table = torch.stack(
                [norms.double(), summed.double(), mins.double(), maxs.double(),
                 zeros.double(), nans.double(), infs.double()], dim=1,
            ).tolist()
            small = [i for i, n in enumerate(lengths_list) if n <= self.full_limit]
            values = {}
            if small:
                small_flat = torch.cat([tensors[i].detach().reshape(-1) for i in small]).cpu()
                for i, piece in zip(small, small_flat.split([lengths_list[i] for i in small])):
                    values[i] = piece.reshape(tensors[i].shape)
            records = []
            for i, (tensor, row) in enumerate(zip(tensors, table)):
                norm, total, low, high, zero_count, nan_count, inf_count = row
                numel = lengths_list[i]
                records.append(TensorRecord(
                    shape=tuple(tensor.shape), dtype=dtype_name(tensor.dtype),
                    device=str(tensor.device), numel=numel, value=values.get(i), norm=norm,
                    mean=total / numel, min=low, max=high, nan_count=int(nan_count),
                    inf_count=int(inf_count), zero_fraction=zero_count / numel,
                ))
            self._add_histograms(tensors, records)
            return records

    def _add_histograms(self, tensors: list[torch.Tensor], records: list[TensorRecord]) -> None:
        if self.histogram_bins <= 0:
            return
        wanted = [
            i for i, r in enumerate(records)
            if r.numel > self.full_limit and math.isfinite(r.min) and math.isfinite(r.max)
        ]
        if not wanted:
            return
        histograms = torch.stack([
            torch.histc(tensors[i].detach().float(), bins=self.histogram_bins,
                        min=records[i].min, max=records[i].max if records[i].max > records[i].min
                        else records[i].min + 1.0)
            for i in wanted
        ]).tolist()
        for i, counts in zip(wanted, histograms):
            low = records[i].min
            high = records[i].max if records[i].max > low else low + 1.0
            step = (high - low) / self.histogram_bins
            records[i].histogram = (
                [int(c) for c in counts], [low + step * b for b in range(self.histogram_bins + 1)]
            )


def _segment_counts(mask: torch.Tensor, ends: torch.Tensor) -> torch.Tensor:
    """Exact per-segment counts of True in ``mask`` (int64 cumulative sum, read at segment ends)."""
    running = mask.cumsum(0)
    at_end = running[ends]
    return at_end - torch.cat([at_end.new_zeros(1), at_end[:-1]])


def _chunks(keys: list[int], tensors: list[torch.Tensor]):
    chunk, size = [], 0
    for key in keys:
        numel = tensors[key].numel()
        if chunk and size + numel > _CHUNK_ELEMENTS:
            yield chunk
            chunk, size = [], 0
        chunk.append(key)
        size += numel
    if chunk:
        yield chunk


def summarise(tensor: torch.Tensor, full_limit: int = DEFAULT_FULL_TENSOR_LIMIT) -> TensorRecord:
    """Summarise one tensor (a convenience over :class:`StatsBatch`)."""
    batch = StatsBatch(full_limit=full_limit)
    batch.add(tensor)
    return batch.compute()[0]
