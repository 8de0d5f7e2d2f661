"""One watched step's gradients reduced to one row of statistics, in a few batched kernels.

A :class:`StepReducer` is fed the ``(column, gradient)`` pairs of one backward as its hooks see them
(:meth:`StepReducer.add`) and returns a float64 row ``[width, 4]`` of ``norm`` (2-norm), ``max_abs``,
``nonfinite`` (NaN + Inf count) and ``zero_fraction`` per column, NaN where a column got no gradient
(:meth:`StepReducer.finish`). It is what a watch spends its time on in every backward, so it is built
for speed:

- On CPU a float32 or float64 gradient that :func:`hookviz.stats.one_pass.summary` reads (contiguous, a
  contiguous matrix's transpose, or a view whose last dimension is contiguous) is reduced the moment
  its hook hands it over, while it is still in cache, by one compiled pass that yields all four
  statistics (:mod:`hookviz.stats.one_pass`, a small C loop that AVX2 vectorises). Stock CPU kernels need
  three passes (``vector_norm``, ``aminmax``, ``count_nonzero``; the last one compute-bound) or a
  copy first: on 25.5 million float32 elements 3.2 ms against 11.3 ms, and 60 MLP-sized gradients in
  0.23 ms against ~1.8 ms. Its squares are summed in double precision over float32 blocks, so its
  norm is closer to the exact one than ``torch.linalg.vector_norm``'s (which drifts by 1e-3 relative
  at that size). An install built without a C compiler lacks it, and every gradient takes the paths
  below.
- Other gradients of up to 65,536 elements and equal size (module outputs of one width, the weights
  of equal layers) are copied into the rows of one ``[k, n]`` matrix and reduced row-wise, one
  kernel per statistic: per-op overhead dominates small tensors. The matrix is kept and reused
  across steps (a fresh allocation each step costs page faults that exceed the reductions).
- Larger gradients are reduced without copies, all of one device and dtype in one batch
  (``torch._foreach_norm`` for their norms, ``aminmax`` and ``count_nonzero`` each).
- On CPU a batch is reduced during the backward once it holds ``FLUSH_BYTES`` (16 MiB) of gradients,
  so a large model's gradients are not all held until the backward ends. Smaller batches wait for
  the end, where fewer, larger batches cost fewer kernel launches. On other devices everything is
  reduced at the end, with one host transfer per device, so hooks never wait for the device.
- A second look only at a gradient whose norm is not finite (to count NaN and Inf, and to take the
  norm again in float64 when float32 squares overflowed, past ~1e19).

One gradient seen by several hooks is reduced once and counted in each hook's column: a module
that returns its last child's output tensor (both hooked it), or a module called twice whose two
outputs get one gradient object (``a + b`` hands both the same), which that column counts twice, as
it would two equal gradients. Several gradients of one column (a module called twice) are
combined: norms as the root of the sum of squares, ``max_abs`` as the max, NaN/Inf and zero counts
summed over all their elements. A sparse gradient (``Embedding(sparse=True)``) is made
dense first (one copy); a complex one is replaced by its magnitude ``|z|``.
"""

from __future__ import annotations

import array
import math

import torch

from hookviz.stats import one_pass
from hookviz.watching.history import STATISTICS

STACK_LIMIT = 1 << 16  # gradients up to this many elements are stacked and reduced row-wise
FLUSH_BYTES = 1 << 24  # on CPU, a batch this large is reduced during the backward, not held to its end


class StepReducer:
    """Reduces one step's ``(column, gradient)`` pairs to a ``[width, 4]`` float64 row (CPU).

    Feed it with :meth:`add` during a backward and read the row with :meth:`finish`, or do both at
    once by calling it with the pairs. Keeps one workspace matrix per (device, dtype, size) of the
    small gradients, reused by every later step; :meth:`clear` frees them.
    """

    def __init__(self) -> None:
        self._workspaces: dict[tuple, torch.Tensor] = {}
        self._sink = None
        self.reset()

    def attach(self, sink) -> None:
        """Share this step's results with ``sink`` (a :class:`hookviz.stats.one_pass.Sink`): the gradients
        its compiled hooks read go to the same list as those given to :meth:`add`."""
        self._sink = sink
        self.reset()

    def reset(self) -> None:
        """Drop what was added since the last :meth:`finish` (a backward that raised)."""
        # (device, dtype, row size or 0 for a large gradient) -> [(columns, gradient)] not reduced yet
        self._batches: dict[tuple, list[tuple[list[int], torch.Tensor]]] = {}
        self._batch_bytes: dict[tuple, int] = {}
        self._last: tuple[torch.Tensor, list[int]] | None = None
        # reduced: (columns, numel, norm, max_abs, nonzero, nonfinite) as Python numbers ...
        self._done: list[tuple] = []
        # ... or, off the CPU, still on the device: (entries, [3, k] statistics) per device
        self._on_device: dict[torch.device, list[tuple[list, torch.Tensor]]] = {}
        if self._sink is not None:
            self._sink.done = self._done
            self._sink.reset_last()

    def clear(self) -> None:
        """Free the workspaces (a later call allocates them again)."""
        self._workspaces.clear()

    def __call__(self, tensors: list[tuple[int, torch.Tensor]], width: int) -> torch.Tensor:
        self.reset()
        for column, grad in tensors:
            self.add(column, grad)
        return self.finish(width)

    def add(self, column: int, grad: torch.Tensor) -> None:
        """Take one gradient of ``column`` (reduced now or at :meth:`finish`)."""
        last = self._last
        if last is not None and last[0] is grad:  # hooks on one tensor fire one after the other
            last[1].append(column)
            return
        # The common case first (a watched MLP step adds 80 gradients: each microsecond here is
        # 1.5 % of its step): a dense float CPU gradient, reduced now in one compiled pass.
        found = one_pass.summary(grad)
        if found is not None:
            columns = [column]
            self._last = (grad, columns)
            self._done.append((columns, grad.numel(), *_from_summary(found, grad)))
            return
        if grad.layout != torch.strided or grad.is_complex():
            grad = plain(grad)
        numel = grad.numel()
        columns = [column]
        self._last = (grad, columns)
        if not numel:
            return
        key = (grad.device, grad.dtype, numel if numel <= STACK_LIMIT else 0)
        batch = self._batches.setdefault(key, [])
        batch.append((columns, grad))
        if grad.device.type == "cpu":
            size = self._batch_bytes.get(key, 0) + numel * grad.element_size()
            self._batch_bytes[key] = size
            if size >= FLUSH_BYTES:  # the batch's column lists stay shared with _last
                self._reduce(key, self._batches.pop(key))
                del self._batch_bytes[key]

    def finish(self, width: int) -> torch.Tensor:
        """The ``[width, 4]`` float64 row of everything added since the last finish; resets."""
        # What is left: equal-size gradients to the rows of a matrix, the rest, of every size, to one
        # batch per (device, dtype), since each batch costs a dozen kernel launches.
        singles: dict[tuple, list] = {}
        for key, batch in self._batches.items():
            if key[2] and len(batch) > 1:
                self._reduce(key, batch)
            else:
                singles.setdefault((key[0], key[1], 0), []).extend(batch)
        for key, batch in singles.items():
            self._reduce(key, batch)
        for entries_and_statistics in self._on_device.values():  # one host transfer per device
            entries = [e for batch_entries, _ in entries_and_statistics for e in batch_entries]
            statistics = torch.cat([s for _, s in entries_and_statistics], dim=1)
            self._take(entries, statistics)
        row = _row(self._done, width)
        self.reset()
        return row

    def _reduce(self, key: tuple, batch: list[tuple[list[int], torch.Tensor]]) -> None:
        device, dtype, size = key
        grads = [grad for _, grad in batch]
        with torch.no_grad():
            statistics = self._rows(grads, device, dtype, size) if size else _one_by_one(grads)
            statistics = statistics.double()
        if device.type == "cpu":
            self._take(batch, statistics)
        else:
            self._on_device.setdefault(device, []).append((batch, statistics))

    def _take(self, batch: list[tuple[list[int], torch.Tensor]], statistics: torch.Tensor) -> None:
        """Note each gradient's numbers, a second look at any whose norm is not finite."""
        for (columns, grad), (norm, max_abs, nonzero) in zip(batch, zip(*statistics.tolist())):
            nonfinite = 0
            if not math.isfinite(norm):
                nonfinite = int((~torch.isfinite(grad)).sum())
                nonzero = int(torch.count_nonzero(grad))  # NaN made the row's count NaN
                if not nonfinite:  # float32 squares overflow past ~1e19: exploding gradients get there
                    norm = torch.linalg.vector_norm(grad, dtype=torch.float64).item()
            self._done.append((columns, grad.numel(), norm, max_abs, nonzero, nonfinite))

    def _rows(self, grads: list[torch.Tensor], device, dtype, size: int) -> torch.Tensor:
        """``[3, k]``: norm, max_abs and nonzero count of equal-size gradients, as rows of the workspace."""
        workspace = self._workspaces.get((device, dtype, size))
        if workspace is None or workspace.shape[0] < len(grads):
            workspace = torch.empty(len(grads), size, dtype=dtype, device=device)
            self._workspaces[(device, dtype, size)] = workspace
        rows = workspace[: len(grads)]
        torch.stack([grad.reshape(-1) for grad in grads], out=rows)
        wide = torch.float32 if dtype.itemsize < 4 else dtype  # half precision sums in float32
        # In place, since the rows are a copy: |x| has the same 2-norm, gives max_abs in one pass
        # (NaN propagates), and sign(|x|) summed counts the nonzeros exactly (float32 holds integers
        # to 2^24); on CPU this runs several times faster than count_nonzero along a dim. sign(NaN) is
        # 0, but a NaN row's norm is NaN, which sends it to the exact recount in _take.
        rows.abs_()
        norm = torch.linalg.vector_norm(rows, dim=1, dtype=wide)
        max_abs = rows.amax(1).to(wide)
        if device.type != "cpu":  # no host sync inside a backward: count every row
            return torch.stack([norm, max_abs, rows.sign_().sum(1, dtype=wide)])
        # On CPU only rows that hold an exact zero are counted: min |x| > 0 says there is none
        # (one read, where counting is a write and a read; dense gradients rarely hold zeros).
        nonzero = torch.full_like(norm, size)
        holes = (rows.amin(1) == 0).nonzero().flatten()
        if len(holes):
            nonzero[holes] = rows[holes].sign_().sum(1, dtype=wide)
        return torch.stack([norm, max_abs, nonzero])


def _from_summary(found: tuple, grad: torch.Tensor) -> tuple[float, float, int, int]:
    """``(norm, max_abs, nonzero, nonfinite)`` from :func:`hookviz.stats.one_pass.summary` of ``grad``."""
    _, _, low, high, zeros, nans, infs = found
    max_abs = math.nan if nans else max(high, -low)  # as amax gives it: NaN propagates
    return one_pass.norm(found, grad), max_abs, grad.numel() - zeros, nans + infs


def _one_by_one(grads: list[torch.Tensor]) -> torch.Tensor:
    """``[3, k]``: norm, max_abs and nonzero count of each gradient, without copies."""
    norm = torch.stack(torch._foreach_norm(grads))
    # On CPU aminmax is several times faster than an inf-norm (which takes abs first).
    bounds = [torch.aminmax(grad) for grad in grads]
    low, high = torch.stack([b[0] for b in bounds]), torch.stack([b[1] for b in bounds])
    nonzero = torch.stack([torch.count_nonzero(grad) for grad in grads])
    return torch.stack([norm.double(), torch.maximum(high, -low).double(), nonzero.double()])


def _row(done: list[tuple], width: int) -> torch.Tensor:
    """The ``[width, 4]`` row from each gradient's numbers, a column's several gradients combined."""
    found: dict[int, list] = {}
    for columns, numel, norm, max_abs, nonzero, nonfinite in done:
        for column in columns:
            total = found.get(column)
            if total is None:
                found[column] = [norm, max_abs, nonfinite, numel - nonzero, numel]
            else:
                total[0] = math.hypot(total[0], norm)
                total[1] = max_abs if math.isnan(max_abs) else max(total[1], max_abs)
                total[2] += nonfinite
                total[3] += numel - nonzero
                total[4] += numel
    row = [math.nan] * (width * len(STATISTICS))  # one flat list: a list per column costs twice
    for column, (norm, max_abs, nonfinite, zeros, numel) in found.items():
        at = column * len(STATISTICS)
        row[at : at + len(STATISTICS)] = norm, max_abs, float(nonfinite), zeros / numel
    # from a buffer: torch.tensor() of a list reads it number by number, 20 us for 80 columns
    return torch.frombuffer(array.array("d", row), dtype=torch.float64).view(width, len(STATISTICS))


def plain(grad: torch.Tensor) -> torch.Tensor:
    """A gradient the reductions take: a sparse one made dense (``Embedding(sparse=True)``; this
    costs a dense copy), a complex one replaced by its magnitude ``|z|``."""
    grad = grad.detach()
    if grad.layout != torch.strided:
        grad = grad.to_dense()
    return grad.abs() if grad.is_complex() else grad
