"""A ``GradScaler`` the loop uses but the watch was not given: found when its scale looks like an explosion.

Under ``torch.amp.GradScaler``, ``scaler.scale(loss).backward()`` leaves every ``.grad`` multiplied
by the loss scale (65536 by default), so a watch without ``optimizer=`` reads norms thousands of
times too large, and without ``scaler=`` it would call a healthy run an explosion. Looking for a
scaler on every step would cost every step; a scale only matters once a norm passes the
``exploding_norm`` threshold. So a watch with no scaler looks once, at the first step a norm
passes it (:func:`notice_scaler`), for a live ``GradScaler`` (of any subclass: the deprecated
``torch.cuda.amp`` and ``torch.cpu.amp`` ones, FSDP's ``ShardedGradScaler``) that is enabled and
has scaled a loss. ``gc.get_referrers`` on the scaler classes lists their instances (an instance
refers to its class) in one pass over the collector's objects, in C: tens of milliseconds, once per
watch. Found, it is the watch's ``scaler`` from that step on: each step keeps its scale, diagnosis
divides it out (as with ``scaler=``), and the watch's notes say it was found, not given.
Source: https://pytorch.org/docs/stable/amp.html#gradient-scaling
"""

from __future__ import annotations

import gc
import math

import torch

from hookviz.analysis.diagnose import DEFAULT_THRESHOLDS


def notice_scaler(watch, row: torch.Tensor) -> None:
    """End of a backward of a watch without a scaler, whose every statistic was read (a full step,
    or one whose norms raised the alarm): if a parameter's norm is above ``exploding_norm``, look
    once for a live ``GradScaler`` and, found, make it the watch's ``scaler``.

    Args:
        watch: the :class:`hookviz.Watch` (its ``scaler`` None, not searched yet).
        row: the step's float64 ``[names, 4]`` row (column 0: the gradient norm).
    """
    if watch.scaler_origin is not None:
        return
    norms = row[: len(watch.parameter_names), 0]
    if not bool((norms > DEFAULT_THRESHOLDS["exploding_norm"]).any()):  # NaN compares False
        return
    scaler = live_grad_scaler()
    watch.scaler_origin = "found" if scaler is not None else "none found"
    if scaler is not None:
        watch.scaler = scaler


def live_grad_scaler():
    """The live, enabled ``torch.amp.GradScaler`` that has scaled a loss, or None; of several, the
    one with the largest scale (the scale that can make healthy norms look exploded)."""
    kinds, pending = [], [torch.amp.GradScaler]
    while pending:
        kind = pending.pop()
        kinds.append(kind)
        pending += kind.__subclasses__()
    found = {
        id(o): o
        for o in gc.get_referrers(*kinds)
        if isinstance(o, torch.amp.GradScaler) and o.is_enabled() and getattr(o, "_scale", None) is not None
    }
    if not found:
        return None
    return max(found.values(), key=lambda s: _scale_of(s))


def _scale_of(scaler) -> float:
    scale = float(scaler.get_scale())
    return scale if math.isfinite(scale) else 0.0
