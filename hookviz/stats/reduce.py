"""The one statistics engine: tensors reduced to :class:`Statistics` rows, rows combined.

Runs (:class:`hookviz.data.stats_batch.StatsBatch`), watches (:mod:`hookviz.watching.watch`) and the
DDP / FSDP2 gather (:mod:`hookviz.watching.gather`) all reduce tensors with :func:`measure` /
:func:`reduce` and merge rows with :func:`combine`, so one tensor gets the same numbers, to the last
bit, wherever hookviz shows it. Each number depends on the tensor alone (its values, dtype, layout
and device), never on the other tensors of the batch: a tensor is never stacked with others.

Numerics:

- ``norm`` (2-norm), with squares that never underflow or overflow. On CPU every tensor's squares
  are summed in float32 (float16 and bfloat16 too; float64 in float64) by one ``torch._foreach_norm``
  call for all; a norm that is not finite (an overflow, or a NaN / Inf element) or below
  ``2**-61 * sqrt(numel)`` (squares lost to underflow could matter, see ``_FLOAT32_FLOOR``) is
  summed again in float64 (a float32 square lies in [1e-90, 1.2e77]), and a float64 tensor's scaled
  first by the power of two nearest its largest magnitude, as LAPACK's ``nrm2`` scales (exact: a
  power-of-two scaling rounds nothing). So only gradients whose float32 norm is below about
  ``1e-18 * sqrt(numel)``, or not finite, take the float64 pass; no extremes are needed. On other
  devices, where reading the extremes would be a host sync, every square is summed in float64
  (``torch.linalg.vector_norm(x, dtype=torch.float64)``), a float64 tensor scaled first.
- ``min`` / ``max``: ``torch.aminmax`` in the tensor's own dtype, read back exactly (an int32
  2147483647 reads 2147483647). NaN propagates into both.
- ``sum``: in float64 for floating tensors, in int64 for integer ones.
- ``zero_count``: ``numel - torch.count_nonzero`` (NaN counts as nonzero).
- ``nan_count`` / ``inf_count``: counted only where the norm is not finite (a finite norm proves
  there is neither), at :meth:`Measured.rows`; or at once with ``counts=True``, for a tensor that
  will change before the rows are read (DDP's all-reduce writes over a local gradient).

Stand-ins, each stated in :attr:`Statistics.note`: a complex tensor's statistics are those of its
magnitude ``|z|`` (the 2-norm is the same); a sparse COO tensor's are over its coalesced stored
values, with the zeros it does not store counted in ``zero_count`` and in ``min`` / ``max``; sparse
CSR, CSC, BSR and BSC likewise over ``values()``; a ``torch._efficientzerotensor`` is all zeros
without a read; a meta tensor has no values, so only ``numel``. Negative and conjugate views are
resolved first.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from itertools import repeat
from operator import attrgetter, le, mul

import torch

from hookviz.errors import HookvizError

# On CPU a norm summed in float32 is kept when it is finite (no square overflowed) and at least
# _FLOAT32_FLOOR * sqrt(numel). Each square that underflows loses at most 2**-150 (half the smallest
# subnormal), so numel of them lose at most numel * 2**-150 against a sum of squares (the norm
# squared) of at least 4 * numel * 2**-124: under 2**-28 of it, below one float32 rounding. The
# factor 2 covers the computed norm being below the true one by that loss. Likewise in float64 with
# 2**-1075 per square. (With torch.set_flush_denormal(True) a square below 2**-126 is lost whole;
# hookviz does not set it.)
_FLOAT32_FLOOR = 2.0 * 2.0**-62
_FLOAT64_FLOOR = 2.0 * 2.0**-511
_COMPRESSED = (torch.sparse_csr, torch.sparse_csc, torch.sparse_bsr, torch.sparse_bsc)
NOTES = {
    "complex": "complex: statistics of the magnitude |z|",
    "sparse": "sparse: statistics over the stored values; the zeros it does not store count in mean "
    "and zero_fraction",
    "zero": "a ZeroTensor (torch._efficientzerotensor): every element is zero, nothing is stored",
    "meta": "a meta tensor holds no values: no statistics",
}


@dataclass(frozen=True)
class Statistics:
    """The statistics of one tensor (a row), or of several taken together (:func:`combine`).

    Attributes:
        numel: number of elements (of the whole tensor, for a sparse one).
        norm: 2-norm over all elements, float64; None for no elements (or a meta tensor).
        sum: sum of all elements (float for floating tensors, int for integer ones); None when not
            asked for, for no elements, or a meta tensor.
        min, max: over all elements, exact (int for integer tensors); NaN when an element is NaN;
            None for no elements or a meta tensor.
        nan_count, inf_count: NaN and +/-Inf elements.
        zero_count: elements exactly equal to 0.
        stored: of a sparse tensor, ``_nnz()`` after coalescing (its stored indices: rows of an
            embedding's gradient); else None.
        note: what the statistics are of, where that is not the plain elements (module docstring).
    """

    numel: int
    norm: float | None = None
    sum: float | int | None = None
    min: float | int | None = None
    max: float | int | None = None
    nan_count: int = 0
    inf_count: int = 0
    zero_count: int = 0
    stored: int | None = None
    note: str = ""

    @property
    def max_abs(self) -> float | int | None:
        """The largest magnitude: ``max(max, -min)``; NaN when an element is NaN."""
        if self.min is None:
            return None
        if math.isnan(self.min) or math.isnan(self.max):
            return math.nan
        return max(self.max, -self.min)

    @property
    def mean(self) -> float | None:
        """``sum / numel``; None without a sum."""
        return None if self.sum is None or not self.numel else self.sum / self.numel

    @property
    def zero_fraction(self) -> float:
        """Fraction of elements exactly 0 (0.0 for no elements)."""
        return self.zero_count / self.numel if self.numel else 0.0

    @property
    def nonfinite(self) -> int:
        """NaN and Inf elements together."""
        return self.nan_count + self.inf_count


def reduce(tensors: Sequence[torch.Tensor], *, sums: bool = True) -> list[Statistics]:
    """The :class:`Statistics` of each tensor (see the module docstring for the numerics).

    Args:
        tensors: any tensors: any dtype, device, layout, view. Not modified.
        sums: also take each tensor's sum (one more pass; a watch does without).

    Returns:
        one row per tensor, in order.
    """
    return measure(tensors, sums=sums).rows()


def combine(rows: Iterable[Statistics]) -> Statistics:
    """The statistics of several tensors taken together (the calls of a module, the shards of a
    parameter on several ranks) from their rows: counts and sums added, min of mins, max of maxes
    (NaN wins), norm the root of the sum of squared norms (``math.hypot``: it neither underflows
    nor overflows). Rows with no elements add nothing but their count.

    Raises:
        HookvizError: no rows.
    """
    rows = list(rows)
    if not rows:
        raise HookvizError(
            "combine() needs at least one row of statistics: pass the rows of one tensor or more"
        )
    present = [r for r in rows if r.norm is not None]
    sums = [r.sum for r in present]
    return Statistics(
        numel=sum(r.numel for r in rows),
        norm=combined_norm(r.norm for r in present),
        sum=None if not present or any(s is None for s in sums) else sum(sums),
        min=_extreme(min, [r.min for r in present]),
        max=_extreme(max, [r.max for r in present]),
        nan_count=sum(r.nan_count for r in rows),
        inf_count=sum(r.inf_count for r in rows),
        zero_count=sum(r.zero_count for r in rows),
        stored=None if any(r.stored is None for r in rows) else sum(r.stored for r in rows),
        note=rows[0].note if all(r.note == rows[0].note for r in rows) else "",
    )


def combined_norm(norms: Iterable[float | None]) -> float | None:
    """The 2-norm of several tensors taken together from their own 2-norms: ``sqrt(sum n**2)`` by
    ``math.hypot`` (no underflow or overflow; an Inf gives Inf, else a NaN gives NaN). None entries
    are skipped; None when none is left. The one place this rule lives."""
    present = [n for n in norms if n is not None]
    return math.hypot(*present) if present else None


def _extreme(pick, values: list):
    if not values:
        return None
    if any(isinstance(v, float) and math.isnan(v) for v in values):
        return math.nan
    return pick(values)


class Measured:
    """The statistics of some tensors, queued on their devices; :meth:`rows` reads them.

    Made by :func:`measure`. Until :meth:`rows` it holds the tensors it reads (a NaN or Inf count
    may need a second look), so autograd cannot free them meanwhile.
    """

    def __init__(self, count: int, sums: bool, counts: bool):
        self._rows: list[Statistics | None] = [None] * count
        self._sums, self._counts = sums, counts
        # per (device, dtype) read: ([(index, read tensor, numel, stored, note)], float64 [fields, k]
        # table of norm, min, max, nonzero, then sum and the NaN / Inf counts where asked; for an
        # integer dtype also an int64 [3, k] table of exact min, max and sum)
        self._queued: list[tuple[list[tuple], torch.Tensor, torch.Tensor | None]] = []

    def rows(self) -> list[Statistics]:
        """The rows, in the order the tensors were given (one host transfer per dtype and device)."""
        for entries, table, exact in self._queued:
            columns = table.tolist()
            norms, lows, highs, nonzeros = columns[:4]
            sums = [None] * len(entries)
            if exact is not None:  # integers: exact extremes and sums
                lows, highs, exact_sums = exact.tolist()
                sums = exact_sums if self._sums else sums
            elif self._sums:
                sums = columns[4]
            for position, (index, tensor, numel, stored, note) in enumerate(entries):
                norm, low, high = norms[position], lows[position], highs[position]
                nans = infs = 0
                if self._counts and exact is None:
                    nans, infs = int(columns[-2][position]), int(columns[-1][position])
                elif not math.isfinite(norm):
                    nans, infs = int(torch.isnan(tensor).sum()), int(torch.isinf(tensor).sum())
                elements = tensor.numel()  # of a sparse tensor, the values it stores
                zeros = elements - int(nonzeros[position])
                if elements < numel:  # the zeros a sparse tensor does not store
                    zeros += numel - elements
                    low, high = _with_zero(min, low), _with_zero(max, high)
                self._rows[index] = Statistics(
                    numel, norm, sums[position], low, high, nans, infs, zeros, stored, note
                )
        self._queued = []
        return list(self._rows)

    def summary(self) -> torch.Tensor:
        """float64 CPU ``[count, 4]``, one line per tensor in order: its :data:`SUMMARY` (``norm``,
        ``max_abs``, ``nonfinite``, ``zero_fraction``), the numbers :meth:`rows` would give (as
        :func:`summary_of` reads a row), bit for bit, computed as whole columns instead of one
        :class:`Statistics` per tensor. NaN where a row has no such number (no elements). One host
        transfer; a NaN / Inf count is taken only where a norm is not finite. Like :meth:`rows`,
        it reads the queue once."""
        found = torch.full((len(self._rows), len(SUMMARY)), math.nan, dtype=torch.float64)
        for index, row in enumerate(self._rows):
            if row is not None:  # known without a read (ZeroTensor, meta, no elements)
                found[index] = torch.tensor(summary_of(row), dtype=torch.float64)
        parts, where, recount = [], [], []
        for entries, table, _ in self._queued:
            norms, lows, highs, nonzeros = table[:4]
            elements = [e[1].numel() for e in entries]
            numels = [e[2] for e in entries]
            zeros = nonzeros.new_tensor(elements) - nonzeros
            if elements != numels:  # the zeros a sparse tensor does not store; its extremes with 0
                unstored = nonzeros.new_tensor(numels) - nonzeros.new_tensor(elements)
                zeros = zeros + unstored
                zero = lows.new_zeros(())
                lows = torch.where(unstored > 0, torch.minimum(lows, zero), lows)
                highs = torch.where(unstored > 0, torch.maximum(highs, zero), highs)
            if self._counts and entries[0][1].dtype.is_floating_point:
                nonfinite = table[-2] + table[-1]
            else:
                nonfinite = torch.zeros_like(norms)
                recount += [(len(where) + i, e[1]) for i, e in enumerate(entries)]
            fraction = zeros / zeros.new_tensor(numels)
            parts.append(torch.stack([norms, torch.maximum(highs, -lows), nonfinite, fraction], 1))
            where += [e[0] for e in entries]
        self._queued = []
        if not parts:
            return found
        measured = parts[0].cpu() if len(parts) == 1 else torch.cat([p.cpu() for p in parts])
        norms = measured[:, COLUMN["norm"]].tolist()
        for position, tensor in recount:  # NaN / Inf exist only where the norm is not finite
            if not math.isfinite(norms[position]):
                measured[position, COLUMN["nonfinite"]] = int(torch.isnan(tensor).sum()) + int(
                    torch.isinf(tensor).sum()
                )
        if len(where) == len(found):  # every tensor was read: the lines are a permutation
            return measured if where == list(range(len(where))) else measured[torch.tensor(where).argsort()]
        found[where] = measured
        return found


# What a watch keeps of each tensor, in this order: the columns of Measured.summary().
SUMMARY = ("norm", "max_abs", "nonfinite", "zero_fraction")
COLUMN = {statistic: column for column, statistic in enumerate(SUMMARY)}
"""The column of each statistic of :data:`SUMMARY` in a row (``row[:, COLUMN["norm"]]``): code
reads the columns by name, through this, never by a bare index."""


def summary_of(row: Statistics) -> tuple[float, float, float, float]:
    """A row's :data:`SUMMARY`: ``(norm, max_abs, nonfinite, zero_fraction)`` as floats (NaN for a
    norm or extreme the row does not have)."""
    if row.min is None:
        return (math.nan if row.norm is None else float(row.norm), math.nan, float(row.nonfinite), 0.0)
    # max() keeps a NaN maximum (aminmax makes both extremes NaN together)
    return (float(row.norm), float(max(row.max, -row.min)), float(row.nonfinite), row.zero_fraction)


def _with_zero(pick, value):
    return value if isinstance(value, float) and math.isnan(value) else pick(value, 0)


def measure(tensors: Sequence[torch.Tensor], *, sums: bool = True, counts: bool = False) -> Measured:
    """Queue the statistics of ``tensors`` on their devices without a host sync; read them with
    :meth:`Measured.rows` (what :func:`reduce` does at once).

    Args:
        tensors: as :func:`reduce`.
        sums: as :func:`reduce`.
        counts: count NaN and Inf now, on the device, in every tensor (two more passes each), for
            tensors that will change before the rows are read; the counts are the same either way.
    """
    measured = Measured(len(tensors), sums, counts)
    read: dict[tuple, list[tuple]] = {}
    with torch.no_grad():
        for index, tensor in enumerate(tensors):
            found = _prepare(tensor.detach())
            if isinstance(found, Statistics):
                measured._rows[index] = found
                continue
            values, stored, note = found
            read.setdefault((values.device, values.dtype), []).append(
                (index, values, tensor.numel(), stored, note)
            )
        for (device, dtype), entries in read.items():
            measured._queued.append((entries, *_table([e[1] for e in entries], device, dtype, sums, counts)))
    return measured


def _table(values: list[torch.Tensor], device, dtype, sums: bool, counts: bool):
    """The float64 table and, for integers, the int64 one (see :class:`Measured`) of tensors of one
    device and dtype, on that device."""
    bounds = [torch.aminmax(v) for v in values]
    lows, highs = torch.stack([b[0] for b in bounds]), torch.stack([b[1] for b in bounds])
    norms = _norms(values, device, dtype)
    nonzeros = torch.stack([torch.count_nonzero(v) for v in values])
    floating = dtype.is_floating_point
    columns = [norms, lows.double(), highs.double(), nonzeros.double()]
    exact = None
    if floating:
        if sums:
            columns.append(torch.stack([v.sum(dtype=torch.float64) for v in values]))
        if counts:
            columns.append(torch.stack([torch.isnan(v).sum() for v in values]).double())
            columns.append(torch.stack([torch.isinf(v).sum() for v in values]).double())
    else:
        totals = torch.stack([v.sum(dtype=torch.int64) for v in values]) if sums else lows.long()
        exact = torch.stack([lows.long(), highs.long(), totals])
    return torch.stack(columns), exact


def _prepare(tensor: torch.Tensor):
    """What to read of ``tensor``: ``(dense real values, stored or None, note)``, or its whole
    :class:`Statistics` where there is nothing to read."""
    numel = tensor.numel()
    if tensor.is_meta:
        return Statistics(numel=numel, note=NOTES["meta"])
    stored, note = None, ""
    if tensor.layout == torch.sparse_coo:
        tensor = tensor.coalesce()
        stored, tensor, note = tensor._nnz(), tensor.values(), NOTES["sparse"]
    elif tensor.layout in _COMPRESSED:
        stored, tensor, note = tensor._nnz(), tensor.values(), NOTES["sparse"]
    elif tensor._is_zerotensor():
        empty = not numel
        zero = None if empty else (0 if not (tensor.is_floating_point() or tensor.is_complex()) else 0.0)
        return Statistics(
            numel=numel,
            norm=None if empty else 0.0,
            sum=zero,
            min=zero,
            max=zero,
            zero_count=numel,
            note=NOTES["zero"],
        )
    if tensor.is_complex():
        tensor, note = tensor.resolve_conj().abs(), note or NOTES["complex"]
    tensor = tensor.resolve_neg()
    if tensor.dtype == torch.bool:
        tensor = tensor.view(torch.uint8)
    if tensor.numel() == 0:
        if stored is None:  # no elements at all
            return Statistics(numel=numel, note=note)
        # a sparse tensor that stores nothing: all zeros
        zero = 0.0 if tensor.is_floating_point() else 0
        return Statistics(numel, 0.0, zero, zero, zero, zero_count=numel, stored=0, note=note)
    return tensor, stored, note


def _norms(values: list[torch.Tensor], device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """float64 ``[k]``: the 2-norm of each tensor, on its device (module docstring)."""
    if not dtype.is_floating_point:  # integers: exact below 2**53
        return torch.stack([torch.linalg.vector_norm(v.double()) for v in values])
    if device.type != "cpu":  # no host sync: every square in float64
        if dtype == torch.float64:
            return torch.stack([_scaled_norm(v) for v in values])
        return torch.stack([torch.linalg.vector_norm(v, dtype=torch.float64) for v in values])
    # On CPU every norm is first summed in the tensor's precision (float32 for half precision) in one
    # torch._foreach_norm call; a norm that does not prove itself accurate (float32_norm_is_exact) is
    # summed again in float64, or scaled.
    accumulate = torch.float64 if dtype == torch.float64 else torch.float32
    own = torch.stack(torch._foreach_norm(values, dtype=accumulate)).double()
    floor = _FLOAT64_FLOOR if dtype == torch.float64 else _FLOAT32_FLOOR
    redo = [
        i
        for i, norm in enumerate(own.tolist())
        if not (math.isfinite(norm) and norm >= floor * math.sqrt(values[i].numel()))
    ]
    _sum_again(own, values, redo, dtype)
    return own


def _sum_again(
    own: torch.Tensor, values: Sequence[torch.Tensor], redo: list[int], dtype: torch.dtype
) -> None:
    """Replace ``own[i]`` for each ``i`` of ``redo`` (a norm ``torch._foreach_norm`` summed that
    does not prove itself accurate) by the norm of ``values[i]`` summed in float64, or scaled
    first when ``values[i]`` is float64 (module docstring)."""
    if redo:
        wide = partial(torch.linalg.vector_norm, dtype=torch.float64)
        again = _scaled_norm if dtype == torch.float64 else wide
        for i in redo:
            own[i] = again(values[i])


def _scaled_norm(tensor: torch.Tensor) -> torch.Tensor:
    """The 2-norm of a float64 tensor, scaled by a power of two near its largest magnitude first."""
    largest = tensor.abs().amax()
    exponent = torch.frexp(largest).exponent.clamp(-1020, 1020).to(torch.float64)
    # The powers of two are made in float64 here: torch 2.4's ldexp made them in the default
    # dtype (float32), where 2**130 is inf and the norm came out NaN. A power of two scales exactly.
    two = torch.tensor(2.0, dtype=torch.float64, device=tensor.device)
    scaled = torch.linalg.vector_norm(tensor * torch.pow(two, -exponent))
    return scaled * torch.pow(two, exponent)


def queue_norms(tensors: Sequence[torch.Tensor]) -> list[tuple[torch.Tensor | float | None, int | None, str]]:
    """The 2-norm :func:`reduce` gives each tensor, bit for bit, queued on its device (a 0-dim
    float64 tensor, no host sync; a float where nothing is read; None where its row has no norm),
    with the ``stored`` and ``note`` its row would have. For a run that keeps only norms at once."""
    found: list = [None] * len(tensors)
    read: dict[tuple, list[tuple[int, torch.Tensor]]] = {}
    with torch.no_grad():
        for index, tensor in enumerate(tensors):
            prepared = _prepare(tensor.detach())
            if isinstance(prepared, Statistics):
                found[index] = (prepared.norm, prepared.stored, prepared.note)
                continue
            values, stored, note = prepared
            found[index] = (None, stored, note)
            read.setdefault((values.device, values.dtype), []).append((index, values))
        for (device, dtype), entries in read.items():
            for (index, _), norm in zip(entries, _norms([v for _, v in entries], device, dtype)):
                found[index] = (norm, *found[index][1:])
    return found


# What a norms-only read accepts without preparing each tensor: a dense real floating dtype and the
# precision _norms sums its squares in on CPU.
_PLAIN_ACCUMULATE = {
    torch.float32: torch.float32,
    torch.float16: torch.float32,
    torch.bfloat16: torch.float32,
    torch.float64: torch.float64,
}


_DTYPE_LAYOUT_CPU = attrgetter("dtype", "layout", "is_cpu")


def norm_values_in_range(tensors: Sequence[torch.Tensor], highest: float) -> list[float] | None:
    """As Python floats: the 2-norm :func:`norm_column` gives each tensor, bit for bit, when every
    tensor is a dense, real, floating CPU tensor of one dtype (no ZeroTensor, no negative view) and
    every norm is in ``(0, highest]``. None otherwise (a NaN or Inf, a norm of 0 or above
    ``highest``, a tensor needing preparation): the caller takes the general path
    (:func:`norm_column`, :func:`measure`).

    One ``torch._foreach_norm`` call and one host transfer, no per-tensor preparation: a watch's
    steps that keep only norms (:class:`hookviz.watching.reduce.StepReducer`). A norm that does not
    prove itself accurate (below the float32 or float64 floor times ``sqrt(numel)``: a vanishing
    gradient; module docstring) is summed again as :func:`norm_column` sums it, that one alone.

    Args:
        tensors: the tensors (a backward's ``.grad``), at least one.
        highest: the largest norm accepted (a watch's ``exploding_norm`` alarm).
    """
    if not tensors:
        return None
    if torch.is_grad_enabled():  # a backward with create_graph=True: read without recording
        with torch.no_grad():
            return norm_values_in_range(tensors, highest)
    dtype = tensors[0].dtype
    accumulate = _PLAIN_ACCUMULATE.get(dtype)
    if accumulate is None:
        return None
    # each check one C loop over the tensors (a Python loop touches each tensor several times). A
    # ZeroTensor (no memory to read) needs none: its norm is 0, which no norm read here may be
    if set(map(_DTYPE_LAYOUT_CPU, tensors)) != {(dtype, torch.strided, True)} or any(
        map(torch.Tensor.is_neg, tensors)
    ):
        return None
    # the same call as _norms on CPU: the same bits (float32 and float64 values are exact in a
    # Python float); read as floats, not made into another tensor here (a torch call more per step)
    norms = torch.stack(torch._foreach_norm(tensors, dtype=accumulate)).tolist()
    floor = _FLOAT64_FLOOR if dtype == torch.float64 else _FLOAT32_FLOOR
    # The usual step in C loops: a NaN makes the sum NaN and an Inf makes it Inf (norms are never
    # negative), and a norm above its tensor's floor (floor * sqrt(numel)) proves itself accurate.
    if sum(norms) < math.inf and max(norms) <= highest and 0.0 < min(norms):
        floors = map(mul, repeat(floor), map(math.sqrt, map(torch.Tensor.numel, tensors)))
        if all(map(le, floors, norms)):
            return norms
    sqrt, inf = math.sqrt, math.inf
    redo = []
    for index, (norm, tensor) in enumerate(zip(norms, tensors)):
        # NaN fails every comparison; a tensor with no elements has norm 0; an Inf may be an overflow
        if not 0.0 < norm <= highest or norm == inf:
            return None
        if norm < floor * sqrt(tensor.numel()):  # tiny (a vanishing gradient): as _norms sums it
            redo.append(index)
    if redo:
        found = torch.tensor(norms, dtype=torch.float64)
        _sum_again(found, tensors, redo, dtype)
        norms = found.tolist()
        if not all(0.0 < norms[i] <= highest for i in redo):
            return None
    return norms


def norms_in_range(tensors: Sequence[torch.Tensor], highest: float) -> torch.Tensor | None:
    """float64 CPU ``[k]``: :func:`norm_values_in_range` as a tensor (None where it gives None).

    Args:
        tensors: the tensors (a backward's ``.grad``), at least one.
        highest: the largest norm accepted (a watch's ``exploding_norm`` alarm).
    """
    values = norm_values_in_range(tensors, highest)
    return None if values is None else torch.tensor(values, dtype=torch.float64)


def norm_column(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """float64 CPU ``[k]``: the 2-norm :func:`reduce` gives each tensor, bit for bit, NaN where its
    row has none (no elements, a meta tensor). One host transfer per device and dtype; no extremes
    or counts are read. For a watch's steps that keep only norms."""
    found = torch.full((len(tensors),), math.nan, dtype=torch.float64)
    read: dict[tuple, list[tuple[int, torch.Tensor]]] = {}
    with torch.no_grad():
        for index, tensor in enumerate(tensors):
            prepared = _prepare(tensor.detach())
            if isinstance(prepared, Statistics):
                if prepared.norm is not None:
                    found[index] = prepared.norm
                continue
            read.setdefault((prepared[0].device, prepared[0].dtype), []).append((index, prepared[0]))
        for (device, dtype), entries in read.items():
            norms = _norms([v for _, v in entries], device, dtype).cpu()
            if len(entries) == len(tensors):
                return norms
            found[[i for i, _ in entries]] = norms
    return found
