"""hookviz's own forwards and backwards, marked, so that a watch on the same model never takes them for
training steps, and the hooks hookviz itself registers, told from the user's.

A recording (``Session.run()``, a re-run, ``Run.fill_details()``) runs inside :func:`own_pass` on
the thread that called it; its backward also inside :func:`own_backward`, which notes the graph task
(``torch._C._current_graph_task_id``) in a Node pre-hook on each root, the first Node a backward
runs: hooks that autograd runs on another thread (a CUDA device's) know the pass by that task.
:func:`in_own_pass` answers on any thread.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence

import torch

from hookviz.record import torch_compat

_local = threading.local()
# Graph tasks of hookviz's own backwards in progress (ids are unique for the life of the process).
_tasks: set[int] = set()


@contextlib.contextmanager
def own_pass() -> Iterator[None]:
    """For the block, this thread's forwards and backwards are hookviz's own (nests)."""
    depth = getattr(_local, "depth", 0)
    _local.depth = depth + 1
    try:
        yield
    finally:
        _local.depth = depth


@contextlib.contextmanager
def own_backward(roots: Sequence[torch.Tensor]) -> Iterator[None]:
    """For the block, a backward from ``roots`` (the tensors hookviz differentiates) is hookviz's own,
    on whatever thread autograd runs its hooks; returns the roots' Nodes as they were."""
    noted: list[int] = []

    def note(grad_outputs):
        task = torch_compat.graph_task_id()
        _tasks.add(task)
        noted.append(task)

    handles = [r.grad_fn.register_prehook(note) for r in roots if r.grad_fn is not None]
    try:
        with own_pass():
            yield
    finally:
        for handle in handles:
            handle.remove()
        _tasks.difference_update(noted)


def in_own_pass() -> bool:
    """Whether the forward or backward running now on this thread is hookviz's own."""
    return getattr(_local, "depth", 0) > 0 or (bool(_tasks) and torch_compat.graph_task_id() in _tasks)


def is_own_hook(hook) -> bool:
    """True for a hook hookviz's watch registered (defined in :mod:`hookviz.watching`): a recording
    neither lists it as the user's nor wraps it."""
    function = getattr(hook, "__wrapped__", hook)
    function = getattr(function, "func", function)  # functools.partial
    function = getattr(function, "__func__", function)  # bound method
    return getattr(function, "__module__", "").startswith("hookviz.watching")
