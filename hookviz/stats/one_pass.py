"""The compiled one-pass summary of a tensor (``hookviz/_fused.c``), where the install built it.

:func:`summary` reads a float32 or float64 CPU tensor once (dense, or a view whose last dimension
is contiguous) and returns its sum of squares, sum, min, max, zero count and NaN / Inf counts; it
returns None for anything the compiled pass does not read (another dtype or device, a view whose
last dimension is strided, an empty tensor), and for every tensor when hookviz was installed
without a C compiler. Callers fall back to PyTorch's kernels then: the same
statistics, a pass each (see :mod:`hookviz.stats.engine` and :mod:`hookviz.watching.reduce`).
:func:`overview` gives a large matrix's block root-mean-square overview (the inspector's heatmap)
in one read as well, where PyTorch squares a copy and pools it. :data:`Sink` is the watch's
gradient hooks written in C (see :mod:`hookviz.watching.watch`), None without the build.
"""

from __future__ import annotations

import math

import torch

try:
    from hookviz.stats import _fused
except ImportError:  # built without a C compiler
    _fused = None

if _fused is not None:
    # dtype -> the compiled pass over a dense CPU buffer of it; and its block overview of a matrix
    KERNELS = {torch.float32: _fused.summary_f32, torch.float64: _fused.summary_f64}
    STRIDED = {torch.float32: _fused.strided_f32, torch.float64: _fused.strided_f64}
    OVERVIEWS = {torch.float32: _fused.overview_f32, torch.float64: _fused.overview_f64}
    Sink = getattr(_fused, "Sink", None)  # None from a build older than the hooks: Python hooks
else:  # built without a C compiler: every caller takes PyTorch's kernels, the watch Python hooks
    KERNELS, STRIDED, OVERVIEWS, Sink = {}, {}, {}, None


def summary(tensor: torch.Tensor) -> tuple[float, float, float, float, int, int, int] | None:
    """``(sum of squares, sum, min, max, zeros, nans, infs)`` of ``tensor`` in one compiled pass, or
    None where it cannot be read so (see the module docstring).

    The elements are read in memory order, which the statistics do not depend on, so a contiguous
    tensor and the transpose of a contiguous matrix are both read in place as one buffer. A view
    whose last dimension is contiguous (``logits[:, :-1]``, heads split by ``view`` and
    ``transpose``) is read run by run along it, each element once (an expanded dimension's run is
    read again, as its elements count again). Sums are taken in double precision over float32
    blocks; NaN never wins a comparison, so ``min`` and ``max`` are those of the other elements
    (+Inf / -Inf when all are NaN). Source: ``hookviz/_fused.c``.
    """
    kernel = KERNELS.get(tensor.dtype)
    # A negative view (torch._neg_view) holds its values unnegated in memory: not read so.
    if kernel is None or not tensor.is_cpu or tensor.layout is not torch.strided or tensor.is_neg():
        return None
    numel = tensor.numel()
    if not numel:
        return None
    if tensor.is_contiguous() or (tensor.dim() == 2 and tensor.t().is_contiguous()):
        return kernel(tensor.data_ptr(), numel)
    strided, strides = STRIDED.get(tensor.dtype), tensor.stride()
    # Runs shorter than a vector of lanes would cost more per element than PyTorch's kernels.
    if strided is None or strides[-1] != 1 or tensor.shape[-1] < _SHORTEST_RUN or min(strides) < 0:
        return None
    return strided(tensor.data_ptr(), tensor.shape, strides)


_SHORTEST_RUN = 16


def overview(tensor: torch.Tensor, blocks: int) -> torch.Tensor | None:
    """float32 ``[min(rows, blocks), min(columns, blocks)]``: the root mean square of each block of
    the 2-D ``tensor``, cut as ``adaptive_avg_pool2d`` cuts them, in one compiled read (no squared
    copy); or None where it cannot be read so (not 2-D, not a dense float32 / float64 CPU matrix or
    the transpose of one, or built without a C compiler). Each column's squares are summed in double
    precision over a block of rows, then per block of columns. Source: ``hookviz/_fused.c``; the
    blocks, ATen's ``AdaptivePooling.h``.
    """
    kernel = OVERVIEWS.get(tensor.dtype)
    if kernel is None or tensor.dim() != 2 or not tensor.is_cpu or tensor.layout is not torch.strided:
        return None
    rows, columns = tensor.shape
    if not rows or not columns:
        return None
    out_rows, out_columns = min(rows, blocks), min(columns, blocks)
    if tensor.is_contiguous():
        found = torch.empty(out_rows, out_columns, dtype=torch.float32)  # what the C loop writes
        kernel(tensor.data_ptr(), rows, columns, found.data_ptr(), out_rows, out_columns)
        return found
    if tensor.t().is_contiguous():  # blocks are cut per side, so the transpose's are the transposed ones
        found = torch.empty(out_columns, out_rows, dtype=torch.float32)
        kernel(tensor.data_ptr(), columns, rows, found.data_ptr(), out_columns, out_rows)
        return found.t().contiguous()
    return None


def norm(found: tuple, tensor: torch.Tensor) -> float:
    """The 2-norm of ``tensor`` from its :func:`summary`: the root of its sum of squares, taken again
    in float64 when float32 squares overflowed (|x| past ~1.8e19, with no NaN or Inf among the
    elements: exploding gradients get there). NaN when an element is NaN, Inf when one is Inf."""
    value = math.sqrt(found[0])
    if math.isinf(value) and not found[5] and not found[6]:
        value = tensor.double().norm().item()
    return value
