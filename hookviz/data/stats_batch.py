"""Summaries of many tensors at once: :class:`StatsBatch` turns the tensors a run sees into records.

A run may see thousands of gradients. Their statistics come from the one engine
(:mod:`hookviz.stats.reduce`), so a record's numbers are the ones a watch or a rank gather shows
for the same tensor; this module adds what only records need (small values, histograms, the
overview of a large matrix) and the bookkeeping of a run: a tensor seen by two hooks is reduced
once, views holding the same elements (a gradient and its transpose) are reduced once, a lazy run
queues norms without a host sync.
"""

from __future__ import annotations

import functools
import math
import weakref
from dataclasses import dataclass, field, replace
from typing import NamedTuple

import torch

from hookviz.data.tensors import TensorRecord
from hookviz.stats.reduce import NOTES, Statistics, queue_norms, reduce

DEFAULT_FULL_TENSOR_LIMIT = 4096
DEFAULT_HISTOGRAM_BINS = 32
HISTOGRAM_SAMPLE = 1024
# Tensors of more elements than this get a histogram: the inspector shows a tensor of up to 16
# elements as its numbers (js/src/inspector.js, SHOWN_ELEMENTS) and any larger one as statistics
# and a histogram.
HISTOGRAM_ABOVE = 16
# A 2-D tensor too large to keep whole gets an overview of at most this many blocks per side.
OVERVIEW_BLOCKS = 32
SETTLE_ABOVE = 1 << 20  # elements; larger CPU gradients are summarised as soon as a hook sees them
VIEWS_ABOVE = 1 << 12  # elements; a lazy batch looks whether a gradient this large is a view of another
# A lazy batch holds smaller float CPU gradients to the end of the run and takes their norms in one
# call, up to this many elements in all (64 KiB of float32 at most each).
HOLD_SMALL_UP_TO = 1 << 22
# ... and larger dense gradients until this many bytes of them wait, then takes their norms in one
# call: few calls, and never more than this much of the gradients autograd would have freed held.
HOLD_LARGE_BYTES = 1 << 23
_HELD_DTYPES = (torch.float32, torch.float64)


@dataclass(frozen=True)
class Settled:
    """Stands for a tensor already summarised by :meth:`StatsBatch.settle`: its key in the batch."""

    key: int


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.float32`` -> ``"float32"`` (worked out once per dtype: it is asked per tensor)."""
    return _DTYPE_NAMES[dtype]


def device_name(device) -> str:
    """``torch.device("cuda", 0)`` -> ``"cuda:0"`` (worked out once per device; any other key, say
    ``"elsewhere"``, as ``str`` gives it)."""
    return _DEVICE_NAMES[device]


class _Names(dict):
    """``names[key]`` is ``name_of(key)``, computed once per key (looked up per gradient in backward)."""

    def __init__(self, name_of):
        super().__init__()
        self.name_of = name_of

    def __missing__(self, key):
        self[key] = name = self.name_of(key)
        return name


_DTYPE_NAMES = _Names(lambda dtype: str(dtype).removeprefix("torch."))
_DEVICE_NAMES = _Names(str)


def _metadata_record(tensor: torch.Tensor, note: str = "") -> TensorRecord:
    return TensorRecord(
        shape=tuple(tensor.shape),
        dtype=dtype_name(tensor.dtype),
        device=str(tensor.device),
        numel=tensor.numel(),
        note=note,
    )


_TRANSFORM_NOTE = (
    "made inside torch.func.vmap (or another torch.func transform): PyTorch gives no access to its "
    "values outside that transform, so only its shape, dtype and device are recorded"
)


def _storage_readable(tensor: torch.Tensor) -> bool:
    """False for a tensor a ``torch.func`` transform made (a BatchedTensor of ``vmap``), read after
    the transform returned: PyTorch refuses its storage ("Cannot access storage of
    BatchedTensorImpl"), so neither its values nor its statistics can be taken."""
    if tensor.layout != torch.strided or tensor.is_nested:
        return True
    try:
        tensor.untyped_storage()
    except (NotImplementedError, RuntimeError):
        return False
    return True


_WAITING = object()  # a lazy batch's place for a norm that comes with the next batched call


class _SameAs(NamedTuple):
    """A lazy batch's place for the norm of a view of the elements of the tensor at ``key``."""

    key: int


@dataclass
class StatsBatch:
    """Collects tensors during a run and summarises them all in :meth:`compute`.

    ``add`` returns a key; after ``compute`` the record of that key is ``records[key]``. Adding the
    same tensor object twice (at the same version) returns the same key, so a gradient seen by two
    hooks is reduced once.

    Args:
        full_limit: tensors with at most this many elements keep a full CPU copy in ``value``.
        histogram_bins: bins of the histogram of each tensor of more than ``HISTOGRAM_ABOVE``
            elements; 0 disables histograms.
        source: None for full records. Otherwise the :class:`hookviz.record.details.Details` of a lazy
            run: each tensor's 2-norm is queued the moment it is added (nothing else is computed,
            and the tensor is not held, so autograd frees it as it would without hookviz; only
            float CPU tensors under ``VIEWS_ABOVE`` elements, up to ``HOLD_SMALL_UP_TO`` elements
            in all, are held to ``compute``, which takes their norms in one call), and
            ``compute`` makes records whose other fields ``source`` fills on first read. A held
            tensor changed in place before ``compute`` (a hook that broke PyTorch's rule not to
            modify its argument) gets a record that says so and no norm.
    """

    full_limit: int = DEFAULT_FULL_TENSOR_LIMIT
    histogram_bins: int = DEFAULT_HISTOGRAM_BINS
    source: object = None
    # lazy: key -> (metadata, 0-dim norm tensor, note, nnz), or (its whole record, None, "", None)
    _norms: list = field(default_factory=list)
    _refs: dict[tuple, tuple[int, weakref.ref]] = field(default_factory=dict)
    # lazy: (data pointer, numel, device, version) of a large dense tensor -> its key, a weak reference
    _views: dict[tuple, tuple[int, weakref.ref]] = field(default_factory=dict)
    # lazy: (key, version seen) of each small CPU tensor held until compute (it stands in the norm's
    # place in ``_norms``)
    _held: list[tuple[int, int]] = field(default_factory=list)
    _held_elements: int = 0
    # lazy: (key, tensor, version seen) of the larger dense tensors waiting for one batched norm call
    # (their place in ``_norms`` holds _WAITING until then), and their bytes
    _waiting: list[tuple[int, torch.Tensor, int]] = field(default_factory=list)
    _waiting_bytes: int = 0
    tensors: list[torch.Tensor] = field(default_factory=list)
    versions: list[int | None] = field(default_factory=list)
    records: list[TensorRecord] = field(default_factory=list)
    _keys: dict[tuple, int] = field(default_factory=dict)
    _settled: dict[int, TensorRecord] = field(default_factory=dict)
    _settled_refs: dict[int, weakref.ref] = field(default_factory=dict)
    _settled_elements: dict[tuple, int] = field(default_factory=dict)

    def add(self, tensor: torch.Tensor, version: int | None = None) -> int:
        """Register ``tensor`` for summary; returns its key.

        With ``version`` (the tensor's ``_version`` when it was seen), a tensor modified in place
        since then gets a record with a note instead of values that are no longer the ones seen.
        """
        if self.source is not None:
            return self._queue_norm(tensor)
        key = self._keys.get((id(tensor), version))
        if key is not None and self.tensors[key] is tensor:
            return key
        key = len(self.tensors)
        self._keys[(id(tensor), version)] = key
        self.tensors.append(tensor)
        self.versions.append(version)
        return key

    def settle(self, tensor: torch.Tensor):
        """During backward: summarise a large CPU tensor now and return a :class:`Settled` key in
        place of it, so hookviz does not hold the gradient and autograd can free or reuse it as it
        would without hookviz. Other tensors (small ones, and any on an accelerator, where summing
        now would force a host sync) are added now with the version seen (:meth:`add`), and
        summarised by :meth:`compute`: one changed in place meanwhile gets a record that says so.
        A lazy batch queues every tensor's norm now. Returns a Settled key in every case.
        """
        if self.source is not None:
            return Settled(self._queue_norm(tensor))
        if tensor.device.type != "cpu" or tensor.numel() <= max(self.full_limit, SETTLE_ABOVE):
            return Settled(self.add(tensor, tensor._version))
        identity = (id(tensor), tensor._version)
        key = self._keys.get(identity)
        reference = self._settled_refs.get(key) if key is not None else None
        if reference is not None and reference() is tensor:
            return Settled(key)
        key = len(self.tensors)
        self._keys[identity] = key
        self.tensors.append(None)
        self.versions.append(None)
        # A transposed view of a gradient summarised already (TBackward's) has the same statistics.
        elements = _elements_key(tensor)
        same = self._settled_elements.get(elements)
        if same is not None and self._settled_refs[same]() is not None:
            self._settled[key] = replace(self._settled[same], shape=tuple(tensor.shape))
        else:
            self._settled[key] = self._summarise([tensor])[0]
            self._settled_elements[elements] = key
        self._settled_refs[key] = weakref.ref(tensor)
        return Settled(key)

    def _queue_norm(self, tensor: torch.Tensor) -> int:
        """Lazy batch: the key of ``tensor``, its 2-norm queued (no host sync). A view of exactly
        the elements of a tensor queued before, still alive and unchanged, takes that one's norm:
        ``TBackward0`` passes on the transpose of a ``Linear``'s weight gradient, which was reduced
        twice. A small float CPU tensor is held until :meth:`compute`, which takes the norms of all
        of them in one call (a per-tensor call costs microseconds of dispatch, a 20,000-Node graph
        makes 22,000 of them); a larger one is not held, so autograd frees it as it would without
        hookviz."""
        # Each attribute is read once: a hook calls this for every gradient a Node sends or gets.
        version = tensor._version
        identity = (id(tensor), version)
        seen = self._refs.get(identity)
        if seen is not None:
            known = seen[1]
            if known is tensor or (type(known) is weakref.ReferenceType and known() is tensor):
                return seen[0]
        key = len(self._norms)
        numel, dtype = tensor.numel(), tensor.dtype
        strided = tensor.layout == torch.strided
        if (
            0 < numel < VIEWS_ABOVE
            and strided
            and tensor.is_cpu
            and dtype in _HELD_DTYPES
            and self._held_elements + numel <= HOLD_SMALL_UP_TO
        ):
            self._held_elements += numel
            self._refs[identity] = (key, tensor)  # held: its id cannot be reused meanwhile
            self._held.append((key, version))
            meta = (tuple(tensor.shape), _DTYPE_NAMES[dtype], _DEVICE_NAMES[tensor.device], numel)
            self._norms.append((meta, tensor, "", None))
            return key
        reference = weakref.ref(tensor)
        self._refs[identity] = (key, reference)
        meta = (tuple(tensor.shape), _DTYPE_NAMES[dtype], _DEVICE_NAMES[tensor.device], numel)
        if not strided or not numel or tensor.is_meta:
            whole = self._whole_record(tensor)
            if whole is not None:  # nothing to reduce
                self._norms.append((whole, None, "", None))
                return key
        # What two views of the same unchanged elements share (a dense tensor this large only)
        view = (tensor.data_ptr(), numel, meta[2], version) if strided and numel >= VIEWS_ABOVE else None
        if view is not None:
            known = self._views.get(view)
            other = known[1]() if known is not None else None
            if other is not None and _elements_key(other) == _elements_key(tensor):  # both alive
                _, norm, note, nnz = self._norms[known[0]]
                if norm is _WAITING:  # its norm comes with the next batch: share it then
                    norm = _SameAs(known[0])
                self._norms.append((meta, norm, note, nnz))
                return key
        if strided and numel:
            self._norms.append((meta, _WAITING, "", None))
            self._waiting.append((key, tensor, version))
            self._waiting_bytes += numel * tensor.element_size()
            if self._waiting_bytes >= HOLD_LARGE_BYTES:
                self._reduce_waiting()
        else:
            ((norm, nnz, note),) = queue_norms([tensor])
            self._norms.append((meta, norm, note, nnz))
        if view is not None:
            self._views[view] = (key, reference)
        return key

    def _reduce_waiting(self) -> None:
        """Queue the norms of the waiting larger tensors in one call (a tensor changed in place
        since a hook saw it gets a record that says so instead) and let them go."""
        live = []
        for key, tensor, version in self._waiting:
            if tensor._version != version:
                changed = _metadata_record(tensor, "modified in place after it was recorded")
                self._norms[key] = (changed, None, "", None)
            else:
                live.append((key, tensor))
        for (key, _), (norm, nnz, note) in zip(live, queue_norms([t for _, t in live])):
            self._norms[key] = (self._norms[key][0], norm, note, nnz)
        self._waiting, self._waiting_bytes = [], 0

    def _compute_lazy(self) -> list[TensorRecord]:
        self._reduce_waiting()
        for key, (meta, norm, _, _) in enumerate(self._norms):
            if type(norm) is _SameAs:  # a view of a tensor that waited: its norm, note and nnz
                shared = self._norms[norm.key]
                if shared[1] is None:  # that one's whole record (changed in place): with this shape
                    self._norms[key] = (replace(shared[0], shape=meta[0]), None, "", None)
                else:
                    self._norms[key] = (meta, *shared[1:])
        values: dict[int, float] = {}
        held: list[int] = []
        for key, version in self._held:
            meta, tensor, _, _ = self._norms[key]
            if tensor._version != version:  # changed in place since a hook saw it: norm lost
                changed = _metadata_record(tensor, "modified in place after it was recorded")
                self._norms[key] = (changed, None, "", None)
            else:
                held.append(key)
        # The held tensors' norms in one call per dtype, each bit for bit the one queued alone.
        norms = queue_norms([self._norms[k][1] for k in held])
        for key, (norm, _, _) in zip(held, norms):
            meta, _, note, nnz = self._norms[key]
            self._norms[key] = (meta, norm, note, nnz)
        by_device: dict[str, list[int]] = {}
        for key, (meta, norm, _, _) in enumerate(self._norms):
            if type(norm) is float:  # known without a read (a ZeroTensor)
                values[key] = norm
            elif norm is not None:
                by_device.setdefault(meta[2], []).append(key)
        for keys in by_device.values():  # one host transfer per device
            for key, value in zip(keys, torch.stack([self._norms[k][1] for k in keys]).double().tolist()):
                values[key] = value
        records = []
        for key, (meta, norm, note, nnz) in enumerate(self._norms):
            if norm is None:  # nothing to reduce: ``meta`` is its whole record already
                records.append(meta)
                continue
            shape, dtype, device, numel = meta
            fields = {"shape": shape, "dtype": dtype, "device": device, "numel": numel, "norm": values[key]}
            fields["note"], fields["nnz"] = note, nnz
            records.append(self.source.pending(TensorRecord, fields))
        self.records = records
        self._norms, self._refs, self._views = [], {}, {}
        self._held, self._held_elements = [], 0
        return records

    def compute(self) -> list[TensorRecord]:
        """Summarise every added tensor; drops the references to them. Returns ``records``."""
        if self.source is not None:
            return self._compute_lazy()
        records: list[TensorRecord | None] = [None] * len(self.tensors)
        views: dict[tuple, list[int]] = {}
        for key, tensor in enumerate(self.tensors):
            version = self.versions[key]
            if tensor is None:
                records[key] = self._settled.pop(key)
            elif version is not None and tensor._version != version:
                records[key] = _metadata_record(tensor, "modified in place after it was recorded")
            elif (whole := self._whole_record(tensor)) is not None:
                records[key] = whole
            elif tensor.layout == torch.strided and not tensor._is_zerotensor():
                views.setdefault(_elements_key(tensor), []).append(key)
            else:
                views[(key,)] = [key]
        # Views of the same elements (a gradient and its transpose) are reduced once, through a
        # contiguous one where there is one.
        chosen: list[int] = []
        copies: list[tuple[int, int]] = []
        for keys in views.values():
            if len(keys) == 1:
                chosen.append(keys[0])
                continue
            first = next((k for k in keys if self.tensors[k].is_contiguous()), keys[0])
            copies += [(k, first) for k in keys if k != first]
            chosen.append(first)
        for key, record in zip(chosen, self._summarise([self.tensors[k] for k in chosen])):
            records[key] = record
        for key, original in copies:
            tensor, source = self.tensors[key], records[original]
            value = None if source.value is None else tensor.detach().cpu().clone()
            records[key] = replace(source, shape=tuple(tensor.shape), value=value)
        self.records = records
        self.tensors, self.versions, self._keys = [], [], {}
        self._settled_refs, self._settled_elements = {}, {}
        return records

    def _whole_record(self, tensor: torch.Tensor) -> TensorRecord | None:
        """The complete record of a tensor with nothing to reduce (meta, empty, or made inside a
        ``torch.func`` transform), else None."""
        if tensor.is_meta:
            return _metadata_record(tensor, NOTES["meta"])
        if not _storage_readable(tensor):
            return _metadata_record(tensor, _TRANSFORM_NOTE)
        if tensor.numel() == 0:
            return replace(_metadata_record(tensor), value=self._small_value(tensor))
        return None

    def _small_value(self, tensor: torch.Tensor) -> torch.Tensor | None:
        if tensor.numel() > self.full_limit:
            return None
        if tensor._is_zerotensor():
            return torch.zeros(tensor.shape, dtype=tensor.dtype)
        dense = tensor.to_dense() if tensor.layout != torch.strided else tensor
        return dense.detach().cpu().clone()

    def _summarise(self, originals: list[torch.Tensor]) -> list[TensorRecord]:
        """The records of tensors with elements, their statistics from :func:`hookviz.stats.reduce.reduce`."""
        rows = reduce(originals)
        with torch.no_grad():
            # The values read for histograms and overviews: dense real ones (a complex tensor's
            # magnitudes, as its statistics); a sparse tensor, or a ZeroTensor, gets neither.
            real = [
                (t.detach().abs() if t.is_complex() else t.detach())
                if t.layout == torch.strided and not t._is_zerotensor()
                else None
                for t in originals
            ]
            samples: dict[int, torch.Tensor] = {}
            for i, tensor in enumerate(real):
                if tensor is not None:
                    self._sample_one(tensor, i, samples)
            histograms = self._histograms(samples, rows)
            # The small tensors' values: one copy per shape and dtype, each value a row of it.
            by_shape: dict[tuple, list[int]] = {}
            for i, t in enumerate(originals):
                if t.numel() <= self.full_limit and t.layout == torch.strided and not t._is_zerotensor():
                    by_shape.setdefault((t.shape, t.dtype), []).append(i)
            values = {}
            for members in by_shape.values():
                values.update(zip(members, torch.stack([originals[i] for i in members]).cpu().unbind(0)))
            return [
                TensorRecord(
                    shape=tuple(tensor.shape),
                    dtype=dtype_name(tensor.dtype),
                    device=str(tensor.device),
                    numel=tensor.numel(),
                    value=values[i] if i in values else self._small_value(tensor),
                    norm=row.norm,
                    mean=row.mean,
                    min=row.min,
                    max=row.max,
                    nan_count=row.nan_count,
                    inf_count=row.inf_count,
                    zero_fraction=row.zero_fraction,
                    histogram=histograms.get(i),
                    overview=None if real[i] is None else self._overview(real[i]),
                    note=row.note,
                    nnz=row.stored,
                )
                for i, (tensor, row) in enumerate(zip(originals, rows))
            ]

    def _overview(self, tensor: torch.Tensor) -> torch.Tensor | None:
        """The block root-mean-square overview of a 2-D tensor too large to keep (see
        :class:`TensorRecord`); None for any other, and with histograms off (the inspector draws
        both; the leaf table neither)."""
        if tensor.dim() != 2 or tensor.numel() <= self.full_limit or self.histogram_bins <= 0:
            return None
        blocks = (min(tensor.shape[0], OVERVIEW_BLOCKS), min(tensor.shape[1], OVERVIEW_BLOCKS))
        squares = tensor.detach().float().square()[None, None]
        return torch.nn.functional.adaptive_avg_pool2d(squares, blocks)[0, 0].sqrt_().cpu()

    def _sample(self, rows: torch.Tensor, members: list[int], samples: dict) -> None:
        """Keep each row that will get a histogram (see :meth:`_histograms`): whole when it has at
        most ``HISTOGRAM_SAMPLE`` elements, else a fixed sample of it."""
        if self.histogram_bins > 0 and rows.shape[1] > HISTOGRAM_ABOVE:
            if rows.shape[1] > HISTOGRAM_SAMPLE:
                rows = rows[:, _sample_indices(rows.shape[1], rows.device)]
            for i, sample in zip(members, rows):
                samples[i] = sample

    def _sample_one(self, tensor: torch.Tensor, i: int, samples: dict) -> None:
        """:meth:`_sample` of one tensor's elements in row-major order. A large view that is not
        contiguous (a transposed gradient, ``logits[:, :-1]``) is not copied whole to be sampled:
        the sampled elements are gathered through it, the same ones in the same order."""
        numel = tensor.numel()
        if tensor.is_contiguous() or numel <= HISTOGRAM_SAMPLE:
            self._sample(tensor.reshape(1, -1), [i], samples)
        elif self.histogram_bins > 0:
            samples[i] = tensor[torch.unravel_index(_sample_indices(numel, tensor.device), tensor.shape)]

    def _histograms(self, samples: dict[int, torch.Tensor], rows: list[Statistics]) -> dict[int, tuple]:
        """Histograms over [min, max] of each tensor of more than ``HISTOGRAM_ABOVE`` elements, in
        a few batched ops (one set per device and sample length).

        A tensor of up to ``HISTOGRAM_SAMPLE`` elements is counted whole, so its counts are exact.
        A larger one is counted on a fixed sample (``HISTOGRAM_SAMPLE`` elements at indices
        ``i * 2654435761 mod numel``; no random number generator is used), which keeps the cost
        independent of the tensor's size.
        """
        found = {}
        by_length: dict[tuple, list[int]] = {}
        for i, sample in samples.items():
            if math.isfinite(rows[i].min) and math.isfinite(rows[i].max):
                by_length.setdefault((sample.device, len(sample)), []).append(i)
        for (device, _), wanted in by_length.items():
            table = {i: (float(rows[i].min), float(rows[i].max)) for i in wanted}
            found.update(self._histograms_of(wanted, samples, table, device))
        return found

    def _histograms_of(self, wanted: list[int], samples: dict, table: list, device) -> dict[int, tuple]:
        """The histograms of samples of one length, in one ``bincount``."""
        bins = self.histogram_bins
        stacked = torch.stack([samples[i] for i in wanted]).float()
        low = torch.tensor([table[i][0] for i in wanted], device=device)
        high = torch.tensor([table[i][1] for i in wanted], device=device)
        width = torch.where(high > low, high - low, torch.ones_like(high))
        position = ((stacked - low[:, None]) / width[:, None] * bins).long().clamp_(0, bins - 1)
        position += torch.arange(len(wanted), device=device)[:, None] * bins
        counts = torch.bincount(position.reshape(-1), minlength=len(wanted) * bins)
        counts = counts.reshape(len(wanted), bins).tolist()
        found = {}
        for row, i in enumerate(wanted):
            lo, hi = table[i]
            step = (hi - lo) / bins if hi > lo else 1.0 / bins
            found[i] = (counts[row], [lo + step * b for b in range(bins + 1)])
        return found


@functools.lru_cache(maxsize=64)  # bounded: a long session meets ever more sizes (8 KB each)
def _sample_indices(numel: int, device) -> torch.Tensor:
    indices = (torch.arange(HISTOGRAM_SAMPLE, dtype=torch.int64) * 2654435761) % numel
    return indices.to(device)


def _elements_key(tensor: torch.Tensor) -> tuple:
    """Equal for two views of exactly the same elements (e.g. a matrix and its transpose)."""
    return (
        tensor.untyped_storage().data_ptr(),
        tensor.storage_offset(),
        tensor.dtype,
        tensor.is_neg(),
        tensor.is_conj(),
        tuple(sorted(zip(tensor.shape, tensor.stride()))),
    )
