"""The compiled one-pass summary of a tensor (``hookviz/_fused.c``), where the install built it.

:func:`summary` reads a dense float32 or float64 CPU tensor once and returns its sum of squares,
sum, min, max, zero count and NaN / Inf counts; it returns None for anything the compiled pass does
not read (another dtype or device, a layout with gaps, an empty tensor), and for every tensor when
hookviz was installed without a C compiler. Callers fall back to PyTorch's kernels then: the same
statistics, a pass each (see :mod:`hookviz.stats` and :mod:`hookviz.watch_reduce`).
"""

from __future__ import annotations

import math

import torch

try:
    from hookviz import _fused
except ImportError:  # built without a C compiler
    _fused = None

# dtype -> the compiled pass over a dense CPU buffer of it (empty when it was not built)
KERNELS = {torch.float32: _fused.summary_f32, torch.float64: _fused.summary_f64} if _fused is not None else {}


def summary(tensor: torch.Tensor) -> tuple[float, float, float, float, int, int, int] | None:
    """``(sum of squares, sum, min, max, zeros, nans, infs)`` of ``tensor`` in one compiled pass, or
    None where it cannot be read so (see the module docstring).

    The elements are read in memory order, which the statistics do not depend on, so a contiguous
    tensor and the transpose of a contiguous matrix are both read in place. Sums are taken in double
    precision over float32 blocks; NaN never wins a comparison, so ``min`` and ``max`` are those of
    the other elements (+Inf / -Inf when all are NaN). Source: ``hookviz/_fused.c``.
    """
    kernel = KERNELS.get(tensor.dtype)
    if kernel is None or not tensor.is_cpu or tensor.layout is not torch.strided:
        return None
    if not (tensor.is_contiguous() or (tensor.dim() == 2 and tensor.t().is_contiguous())):
        return None
    numel = tensor.numel()
    return kernel(tensor.data_ptr(), numel) if numel else None


def norm(found: tuple, tensor: torch.Tensor) -> float:
    """The 2-norm of ``tensor`` from its :func:`summary`: the root of its sum of squares, taken again
    in float64 when float32 squares overflowed (|x| past ~1.8e19, with no NaN or Inf among the
    elements: exploding gradients get there). NaN when an element is NaN, Inf when one is Inf."""
    value = math.sqrt(found[0])
    if math.isinf(value) and not found[5] and not found[6]:
        value = tensor.double().norm().item()
    return value
