"""A ``GradScaler`` the loop uses but the watch was not given: found when its scale looks like an explosion.

Under ``torch.amp.GradScaler``, ``scaler.scale(loss).backward()`` leaves every ``.grad`` multiplied
by the loss scale (65536 by default), so a watch without ``optimizer=`` reads norms thousands of
times too large, and without ``scaler=`` it would call a healthy run an explosion. Looking for a
scaler on every step would cost every step; a scale only matters once a norm passes the
``exploding_norm`` threshold. So a watch with no scaler looks once, at the first step a norm
passes it (:func:`notice_scaler`), for live ``GradScaler`` instances (of any subclass: the
deprecated ``torch.cuda.amp`` and ``torch.cpu.amp`` ones, FSDP's ``ShardedGradScaler``) that are
enabled and have scaled a loss. ``gc.get_referrers`` on the scaler classes lists their instances
(an instance refers to its class) in one pass over the collector's objects, in C: tens of
milliseconds, once per watch.

A live scaler is not proof that this loop uses it (a notebook keeps the scaler of an earlier
cell, and dividing a real explosion by its scale would hide it). The loop's scaler is the one
whose ``update()`` runs between two of its backwards: ``update()`` changes the scale and growth
tracker tensors in place, which bumps their version counter. So the candidates' versions are
noted at the first alarm and compared at the next alarm (the next step, when the gradients carry
a scale): the first whose version moved is the watch's ``scaler`` from then on, and the first
alarm's step takes the scale noted then. Each step then keeps its scale, diagnosis divides it out
(as with ``scaler=``), and the watch's notes say it was found, not given. A loop of one step
gives no second alarm: its scale is not divided out.
Source: https://pytorch.org/docs/stable/amp.html#gradient-scaling
"""

from __future__ import annotations

import gc
import math
import weakref

import torch

from hookviz.analysis.diagnose import DEFAULT_THRESHOLDS
from hookviz.stats.reduce import COLUMN
from hookviz.watching.kept_steps import set_loss_scale


def notice_scaler(watch, row: torch.Tensor, step: int) -> None:
    """End of backward ``step`` of a watch without a scaler, whose every statistic was read (a
    full step, or one whose norms raised the alarm): if a parameter's norm is above
    ``exploding_norm``, note the live ``GradScaler`` candidates (first alarm) or adopt the one the
    loop updated since (a later alarm).

    Args:
        watch: the :class:`hookviz.Watch` (its ``scaler`` None).
        row: the step's float64 ``[names, 4]`` row (column 0: the gradient norm).
        step: the step's number (its scale is set when the scaler is adopted at a later step).
    """
    if watch.scaler_origin not in (None, "pending"):
        return
    norms = row[: len(watch.parameter_names), COLUMN["norm"]]
    if not bool((norms > DEFAULT_THRESHOLDS["exploding_norm"]).any()):  # NaN compares False
        return
    if watch.scaler_origin is None:
        candidates = live_grad_scalers()
        watch.scaler_origin = "pending" if candidates else "none found"
        # weakly: a stale scaler of an earlier cell is not kept alive by the watch
        watch.scaler_candidates = (step, [(weakref.ref(s), _version(s), _scale_of(s)) for s in candidates])
        return
    first, candidates = watch.scaler_candidates
    live = [(reference(), version, scale) for reference, version, scale in candidates]
    moved = [(s, scale) for s, version, scale in live if s is not None and _version(s) != version]
    if moved:
        scaler, scale = max(moved, key=lambda pair: pair[1])
        watch.scaler, watch.scaler_origin, watch.scaler_candidates = scaler, "found", None
        set_loss_scale(watch, first, scale)


def live_grad_scalers() -> list:
    """The live, enabled ``torch.amp.GradScaler`` instances that have scaled a loss."""
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
    return list(found.values())


def _version(scaler) -> tuple[int, int]:
    """The version counters of the tensors ``GradScaler.update()`` changes in place."""
    tracker = getattr(scaler, "_growth_tracker", None)
    return scaler._scale._version, -1 if tracker is None else tracker._version


def _scale_of(scaler) -> float:
    scale = float(scaler.get_scale())
    return scale if math.isfinite(scale) else 0.0
