"""One ``GradScaler``'s ``step`` wrapped once, whatever the number of watches that listen to it.

A ``GradScaler`` that finds Inf/NaN skips ``optimizer.step()``, so an optimizer's step hooks never
run. Given the scaler (``scaler=``, or the one an accelerate ``AcceleratedOptimizer`` holds), a
watch listens to ``scaler.step``: the instance's ``step`` attribute is replaced once by a wrapper
that tells each listener before and after the class's ``step`` runs. :func:`listen` returns a
``torch.utils.hooks.RemovableHandle``; removing the last listener puts the class's method back.
Source: https://pytorch.org/docs/stable/amp.html#gradient-scaling
"""

from __future__ import annotations

from collections import OrderedDict

from torch.utils.hooks import RemovableHandle

from hookviz.errors import WatchError

_VERBS = ("scale", "step", "update", "unscale_", "get_scale", "is_enabled")


def check_scaler(scaler) -> None:
    """Refuse at open a ``scaler=`` that is not a ``torch.amp.GradScaler``.

    Raises:
        WatchError: ``scaler`` lacks a GradScaler's methods.
    """
    missing = [verb for verb in _VERBS if not callable(getattr(scaler, verb, None))]
    if missing:
        raise WatchError(
            f"scaler={type(scaler).__name__} is not a torch.amp.GradScaler (it has no "
            f"{', '.join(missing)}); pass the GradScaler whose scale(loss).backward() and step(optimizer) "
            "the loop calls, or leave scaler out"
        )


class _Listeners(OrderedDict):
    """The listeners of one scaler's wrapped ``step``; the wrapper goes when the last one does."""

    def __init__(self, scaler):
        super().__init__()
        self.scaler = scaler

    def __delitem__(self, key) -> None:
        super().__delitem__(key)
        if not self and getattr(self.scaler.__dict__.get("step"), "hookviz_listeners", None) is self:
            del self.scaler.__dict__["step"]


def listen(scaler, before, after) -> RemovableHandle:
    """Call ``before()`` and ``after(optimizer)`` around each ``scaler.step(optimizer)``.

    Returns:
        a ``RemovableHandle``; removing it stops these calls (and unwraps when it was the last).
    """
    step = scaler.__dict__.get("step")
    listeners = getattr(step, "hookviz_listeners", None)
    if listeners is None:
        listeners = _Listeners(scaler)
        original = type(scaler).step

        def step(optimizer, *args, **kwargs):
            calls = list(listeners.values())
            for call_before, _ in calls:
                call_before()
            result = original(scaler, optimizer, *args, **kwargs)
            for _, call_after in calls:
                call_after(optimizer)
            return result

        step.hookviz_listeners = listeners
        scaler.step = step
    handle = RemovableHandle(listeners)
    listeners[handle.id] = (before, after)
    return handle
