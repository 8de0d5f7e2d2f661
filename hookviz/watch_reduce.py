"""One watched step's gradients reduced to one row of statistics, in a few batched kernels.

A :class:`StepReducer` takes the ``(column, gradient)`` pairs of one backward and returns a float64
row ``[width, 4]`` of ``norm`` (2-norm), ``max_abs``, ``nonfinite`` (NaN + Inf count) and
``zero_fraction`` per column, NaN where a column got no gradient. It is what a watch spends its time
on after every backward, so it is built for speed:

- Gradients of up to 65,536 elements and equal size (module outputs of one width, the weights of
  equal layers) are copied into the rows of one ``[k, n]`` matrix and reduced row-wise, one kernel
  per statistic: per-op overhead dominates small tensors. The matrix is kept and reused across steps
  (a fresh multi-megabyte allocation each step costs page faults that exceed the reductions), so a
  watch holds at most one copy of its small gradients between steps.
- Larger gradients are reduced one by one without copies (``torch._foreach_norm`` for all their
  norms at once, ``aminmax`` and ``count_nonzero`` each).
- One host transfer per step and device; a second look only at a gradient whose norm is not finite (to count
  NaN and Inf, and to take the norm again in float64 when float32 squares overflowed, past ~1e19).

Several gradients of one column (a module called twice) are combined: norms as the root of the sum of
squares, ``max_abs`` as the max, NaN/Inf and zero counts summed over all their elements. A sparse
gradient (``Embedding(sparse=True)``) is made dense first (one copy); a complex one is replaced by
its magnitude ``|z|``.
"""

from __future__ import annotations

import math

import torch

from hookviz.history import STATISTICS

STACK_LIMIT = 1 << 16  # gradients up to this many elements are stacked and reduced row-wise


class StepReducer:
    """Reduces one step's ``(column, gradient)`` pairs to a ``[width, 4]`` float64 row (CPU).

    Keeps one workspace matrix per (device, dtype, size) of the small gradients, reused by every
    later step; :meth:`clear` frees them.
    """

    def __init__(self) -> None:
        self._workspaces: dict[tuple, torch.Tensor] = {}

    def clear(self) -> None:
        """Free the workspaces (a later call allocates them again)."""
        self._workspaces.clear()

    def __call__(self, tensors: list[tuple[int, torch.Tensor]], width: int) -> torch.Tensor:
        groups: dict[tuple, list[tuple[int, torch.Tensor]]] = {}
        for column, grad in tensors:
            if grad.layout != torch.strided or grad.is_complex():
                grad = plain(grad)
            numel = grad.numel()
            if numel:
                key = (grad.device, grad.dtype, numel if numel <= STACK_LIMIT else 0)
                groups.setdefault(key, []).append((column, grad))
        entries: dict[torch.device, list[tuple[int, torch.Tensor]]] = {}
        pieces: dict[torch.device, list[torch.Tensor]] = {}
        with torch.no_grad():
            for (device, dtype, size), members in groups.items():
                grads = [grad for _, grad in members]
                if size and len(grads) > 1:
                    norm, max_abs, nonzero = self._rows(grads, device, dtype, size)
                else:
                    norm, max_abs, nonzero = _one_by_one(grads)
                statistics = torch.stack([norm.double(), max_abs.double(), nonzero.double()], dim=1)
                pieces.setdefault(device, []).append(statistics)
                entries.setdefault(device, []).extend(members)
            values = []
            for device_pieces in pieces.values():  # one host transfer per device
                values += torch.cat(device_pieces).tolist()
        return _combine([e for device_entries in entries.values() for e in device_entries], values, width)

    def _rows(self, grads: list[torch.Tensor], device, dtype, size: int):
        """norm, max_abs and nonzero count of equal-size gradients, as rows of the workspace."""
        workspace = self._workspaces.get((device, dtype, size))
        if workspace is None or workspace.shape[0] < len(grads):
            workspace = torch.empty(len(grads), size, dtype=dtype, device=device)
            self._workspaces[(device, dtype, size)] = workspace
        rows = workspace[: len(grads)]
        torch.stack([grad.reshape(-1) for grad in grads], out=rows)
        low, high = rows.amin(1), rows.amax(1)
        wide = torch.float32 if dtype.itemsize < 4 else dtype  # half precision sums in float32
        norm = torch.linalg.vector_norm(rows, dim=1, dtype=wide)
        # |sign| summed counts the nonzeros exactly (float32 holds integers to 2^24) and runs several
        # times faster on CPU than count_nonzero along a dim; in place, since the rows are a copy
        nonzero = rows.sign_().abs_().sum(1, dtype=wide)
        return norm, torch.maximum(high, -low), nonzero


def _one_by_one(grads: list[torch.Tensor]):
    """norm, max_abs and nonzero count of each gradient, without copies."""
    norm = torch.stack(torch._foreach_norm(grads))
    # On CPU aminmax is several times faster than an inf-norm (which takes abs first).
    bounds = [torch.aminmax(grad) for grad in grads]
    low, high = torch.stack([b[0] for b in bounds]), torch.stack([b[1] for b in bounds])
    nonzero = torch.stack([torch.count_nonzero(grad) for grad in grads])
    return norm, torch.maximum(high, -low), nonzero


def _combine(entries: list[tuple[int, torch.Tensor]], values: list, width: int) -> torch.Tensor:
    """The row from each entry's (norm, max_abs, nonzero), columns with several entries combined."""
    found: dict[int, list] = {}
    for (column, grad), (norm, max_abs, nonzero) in zip(entries, values):
        nonfinite = 0
        if not math.isfinite(norm):
            nonfinite = int((~torch.isfinite(grad)).sum())
            nonzero = int(torch.count_nonzero(grad))  # NaN made the row's count NaN
            if not nonfinite:  # float32 squares overflow past ~1e19: exploding gradients get there
                norm = torch.linalg.vector_norm(grad, dtype=torch.float64).item()
        numel = grad.numel()
        total = found.get(column)
        if total is None:
            found[column] = [norm, max_abs, nonfinite, numel - nonzero, numel]
        else:
            total[0] = math.hypot(total[0], norm)
            total[1] = max_abs if math.isnan(max_abs) else max(total[1], max_abs)
            total[2] += nonfinite
            total[3] += numel - nonzero
            total[4] += numel
    row = [[math.nan] * len(STATISTICS) for _ in range(width)]
    for column, (norm, max_abs, nonfinite, zeros, numel) in found.items():
        row[column] = [norm, max_abs, float(nonfinite), zeros / numel]
    return torch.tensor(row, dtype=torch.float64)


def plain(grad: torch.Tensor) -> torch.Tensor:
    """A gradient the reductions take: a sparse one made dense (``Embedding(sparse=True)``; this
    costs a dense copy), a complex one replaced by its magnitude ``|z|``."""
    grad = grad.detach()
    if grad.layout != torch.strided:
        grad = grad.to_dense()
    return grad.abs() if grad.is_complex() else grad
