"""A watch's steps, one per backward: a backward's state from its first hook to its end.

The first hook of a backward (graph task) through the watched model starts its state
(:func:`begin`) and queues the end-of-backward callback (:func:`finish`), which reduces what the
backward left into one row and keeps it as a step (:func:`hookviz.watching.kept_steps.keep`), or,
with ``optimizer=``, hands it to the next optimizer step (:mod:`hookviz.watching.optimizer_steps`).
How the hooks work together: :mod:`hookviz.watching.watch`.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from functools import partial
from operator import itemgetter

import torch

from hookviz.analysis.diagnose import DEFAULT_THRESHOLDS
from hookviz.record import torch_compat
from hookviz.record.own_pass import in_own_pass
from hookviz.stats.reduce import Measured, summary_of
from hookviz.watching.history import StepInfo
from hookviz.watching.kept_steps import keep
from hookviz.watching.reduce import StepReducer
from hookviz.watching.scaler_search import notice_scaler
from hookviz.watching.structure import follow_replaced

# Backwards whose end has not come yet, at most: one that raised never ends, and is dropped when
# this many newer ones have begun.
PENDING_BACKWARDS = 32
_first = itemgetter(0)


@dataclass
class Backward:
    """What one backward (graph task) through the watched model has left so far.

    Attributes:
        recording: whether this backward's gradients are recorded.
        own: hookviz's own backward (a recording): never a step.
        reached: whether it reached a watched parameter (only such a backward is a step).
        before: ``(column, .grad, its _version)`` of each parameter it reached, noted just before
            its gradient was accumulated: a ``.grad`` that differs at the end was accumulated by it.
        reducer: the module-output gradients (and, at the end, the parameters' ``.grad``).
        arrived: columns in the order their gradients arrived (module outputs).
        local: DDP / FSDP2: ``(column, statistics queued before the all-reduce)``.
        read_all: every statistic of the parameters was read (a full step, or a norm raised the alarm).
    """

    recording: bool
    own: bool = False
    reached: bool = False
    before: list[tuple[int, object, int]] = field(default_factory=list)
    reducer: StepReducer = field(default_factory=StepReducer)
    arrived: list[int] = field(default_factory=list)
    local: list[tuple[int, Measured]] = field(default_factory=list)
    read_all: bool = False


def begin(watch) -> Backward | None:
    """Called by every hook during backward: this backward's state (None once closed)."""
    task = torch_compat.graph_task_id()
    state = watch._backwards.get(task)
    if state is None and not watch.closed:
        with watch._lock:  # hooks of one backward may run on several autograd threads
            state = watch._backwards.get(task) or _new_backward(watch, task)
    return state


def _new_backward(watch, task: int) -> Backward:
    """The first hook of backward ``task`` ran: note each parameter's ``.grad`` and queue the
    end-of-backward callback."""
    follow_replaced(watch)
    state = Backward(watch.recording, own=in_own_pass())
    if len(watch._backwards) >= PENDING_BACKWARDS:  # the oldest is one that raised: never a step
        del watch._backwards[next(iter(watch._backwards))]
    watch._backwards[task] = state
    torch_compat.queue_end_of_backward(partial(finish, weakref.ref(watch), task))
    return state


def finish(reference: weakref.ref, task: int) -> None:
    """The end-of-backward callback of backward ``task``."""
    self = reference()
    if self is not None:
        _finish(self, task)


def _finish(watch, task: int) -> None:
    """End of backward ``task``: reduce what it left, store one row, count the step."""
    state = watch._backwards.pop(task, None)
    if state is None or watch.closed or state.own or not state.reached:
        return  # hookviz's own, or a backward that reached no watched parameter: not a step
    watch._backwards_seen += 1
    by_optimizer = watch._optimizer_steps is not None
    # with optimizer=, the optimizer's step reads the parameters' .grad: a backward keeps outputs only
    recorded = state.recording and (watch.module_names or not by_optimizer)
    row = _row_of(watch, state, not by_optimizer) if recorded else None
    if by_optimizer:  # the optimizer's step is the step: keep for it
        if row is not None:
            watch._outputs_row = row
        watch._local_rows.update(measure_rows(state.local))
        return
    with watch._lock:  # the step's number and its row are kept together
        step = watch.step
        watch.step += 1
    if row is None:
        return
    if state.read_all and watch.scaler is None:  # a GradScaler's scale may look like an explosion
        notice_scaler(watch, row, step)
    if watch.scaler is not None and watch.scaler.is_enabled():
        info = StepInfo(loss_scale=float(watch.scaler.get_scale()))
    else:
        info = StepInfo()
    keep(watch, step, row, state.arrived, info)
    if watch._ranks is not None:
        watch._ranks.finish(step)


def _row_of(watch, state: Backward, parameters: bool = True) -> torch.Tensor:
    """The ``[names, 4]`` row of one ended backward: every ``.grad`` it accumulated into (unless
    ``parameters`` is False) and the module-output gradients its hooks handed over, reduced together."""
    columns, grads, seen = [], [], set()
    tensors = watch._parameters
    # in column order (a stable sort: a column's first note first), so that the usual step's norms
    # are the row's first lines as they are (StepReducer.finish), not scattered into it
    before = sorted(state.before, key=_first) if parameters and watch._ranks is None else ()
    for column, grad, version in before:
        now = tensors[column].grad
        if now is not None and (now is not grad or now._version != version) and column not in seen:
            seen.add(column)
            if now.numel():
                columns.append(column)
                grads.append(now)
    if grads:
        full = watch.step % watch.stats_every == 0
        state.read_all = state.reducer.add_all(columns, grads, full, DEFAULT_THRESHOLDS["exploding_norm"])
    row = state.reducer.finish(len(watch.names))
    if state.local and parameters:  # DDP / FSDP2: parameters measured in their hooks, before the all-reduce
        for column, values in measure_rows(state.local).items():
            row[column] = torch.tensor(values, dtype=torch.float64)
    return row


def measure_rows(local: list[tuple[int, Measured]]) -> dict[int, tuple]:
    """``{column: (norm, max_abs, nonfinite, zero_fraction)}`` of statistics queued in hooks."""
    return {column: summary_of(measured.rows()[0]) for column, measured in local}


def reduce_pairs(pairs: list[tuple[int, torch.Tensor]], width: int) -> torch.Tensor:
    """A ``[width, 4]`` row of ``(column, gradient)`` pairs (DDP / FSDP2's reduced ``.grad``)."""
    return StepReducer()(pairs, width)
