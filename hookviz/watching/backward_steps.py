"""A watch's steps, one per backward: a backward's state from its first hook to its end.

The first hook of a backward (graph task) through the watched model starts its state
(:func:`begin`) and queues the end-of-backward callback (:func:`finish`), which reduces what the
backward left into one row and keeps it as a step (:meth:`hookviz.watching.kept_steps.KeptSteps.keep`), or,
with ``optimizer=``, hands it to the next optimizer step (:mod:`hookviz.watching.optimizer_steps`).
How the hooks work together: :mod:`hookviz.watching.watch`.
"""

from __future__ import annotations

import sys
import weakref
from functools import partial
from itertools import repeat
from operator import attrgetter, is_not, itemgetter

import torch
import torch.utils.checkpoint

from hookviz.errors import WatchError
from hookviz.record import torch_compat
from hookviz.record.own_pass import in_own_pass
from hookviz.stats.reduce import Measured, summary_of
from hookviz.watching.history import StepInfo
from hookviz.watching.reduce import EXPLODING, NormsRow, StepReducer, finite_max_abs, is_alarm

# Backwards whose end has not come yet, at most: one that raised never ends, and is dropped when
# this many newer ones have begun.
PENDING_BACKWARDS = 32
_first = itemgetter(0)
_grad = attrgetter("grad")
_REENTRANT_BACKWARD = torch.utils.checkpoint.CheckpointFunction.backward.__code__
_REENTRANT_DEPTH = 16  # frames looked at below begin() for a reentrant checkpoint's backward


class Backward:
    """What one backward (graph task) through the watched model has left so far (a slotted class:
    one is made per backward).

    Attributes:
        own: hookviz's own backward (a recording): never a step.
        reached: whether it reached a watched parameter (only such a backward is a step).
        unset: the columns it reached whose parameter had no ``.grad`` just before its gradient was
            accumulated (the usual loop's, after ``zero_grad()``): one that has one at the end got
            it from this backward.
        before: ``(column, .grad, its _version)`` of each other parameter it reached, noted just
            before its gradient was accumulated: a ``.grad`` that differs at the end was
            accumulated by it.
        reducer: the module-output gradients (and, at the end, the parameters' ``.grad``).
        arrived: columns in the order their gradients arrived (module outputs).
        local: DDP / FSDP2: ``(column, statistics queued before the all-reduce)``.
        read_all: every statistic of the parameters was read (a full step, or a norm raised the alarm).
    """

    __slots__ = ("own", "reached", "unset", "before", "reducer", "arrived", "local", "read_all")

    def __init__(self, own: bool = False) -> None:
        self.own = own
        self.reached = False
        self.unset: list[int] = []
        self.before: list[tuple[int, object, int]] = []
        self.reducer = StepReducer()
        self.arrived: list[int] = []
        self.local: list[tuple[int, Measured]] = []
        self.read_all = False


class Backwards:
    """The one owner of a watch's backwards whose end has not come yet: graph task -> its
    :class:`Backward` (at most :data:`PENDING_BACKWARDS`), and how many backwards began.

    Attributes:
        pending: ``{graph task id: Backward}``; hooks read it (``pending.get(task)``). One dict for
            the watch's life, changed in place: the parameters' hooks hold it.
        seen: backwards (not hookviz's own) that reached a watched parameter, refused ones too.
    """

    def __init__(self) -> None:
        self.pending: dict[int, Backward] = {}
        self.seen = 0

    def add(self, task: int, state: Backward) -> None:
        """Note backward ``task``'s state; the oldest is dropped when too many are pending (it
        raised: its end never comes)."""
        if len(self.pending) >= PENDING_BACKWARDS:
            del self.pending[next(iter(self.pending))]
        self.pending[task] = state

    def pop(self, task: int) -> Backward | None:
        """Backward ``task`` ended: its state, no longer pending (None: dropped or closed)."""
        return self.pending.pop(task, None)

    def clear(self) -> None:
        """The watch closed: no pending backward will be a step."""
        self.pending.clear()


def begin(watch) -> Backward | None:
    """Called by every hook during backward: this backward's state (None once closed).

    The first hook of a backward looks at the model first, outside the lock
    (:meth:`~hookviz.watching.structure.WatchedParameters.check_at_backward`: a replaced parameter is
    followed, and following takes the lock)."""
    task = torch_compat.graph_task_id()
    pending = watch.backwards.pending
    state = pending.get(task)
    if state is None and not watch.closed:
        own = in_own_pass()
        if not own:
            watch.columns.check_at_backward()
        with watch.kept.lock:  # hooks of one backward may run on several autograd threads
            state = pending.get(task)
            new = state is None
            if new:
                state = _new_backward(watch, task, own)
        if new and not state.own and watch.optimizer_steps is not None:
            # outside the lock: it may keep the step an earlier backward left unstepped
            watch.optimizer_steps.backward_began()
    return state


def _new_backward(watch, task: int, own: bool) -> Backward:
    """The first hook of backward ``task`` ran (``own``: hookviz's own): queue the end-of-backward
    callback."""
    state = Backward(own)
    if not state.own:
        watch.backwards.seen += 1  # seen, even when refused: close() warns of no unseen gradient
        check_compiled_autograd()
        check_reentrant()
    watch.backwards.add(task, state)
    torch_compat.queue_end_of_backward(partial(finish, weakref.ref(watch), task))
    return state


def check_compiled_autograd() -> None:
    """Refuse compiled autograd, at a backward's first hook: it traces the watch's hooks into a
    graph, where the watch cannot queue its end-of-backward callback (PyTorch's own AssertionError
    from ``queue_callback``). Enabled before the forward or only around ``backward()``, Dynamo
    traces the hooks (with ``in_compiled_autograd_region`` on): refused there, before the callback
    is queued and before any ``.grad`` is written, so the next eager backward is a step.
    (With ``fullgraph=True`` Dynamo stops first, at the graph task id hookviz reads.)

    Raises:
        WatchError: compiled autograd is enabled or running (``torch._dynamo.compiled_autograd``).
    """
    compiled = sys.modules.get("torch._dynamo.compiled_autograd")  # not imported: not enabled
    config = sys.modules.get("torch._dynamo.config")
    if (
        compiled is not None
        and (compiled.compiled_autograd_enabled or getattr(compiled, "in_compiled_autograd_region", False))
    ) or getattr(config, "compiled_autograd", False):
        raise WatchError(
            "hookviz.watch does not support compiled autograd (torch._dynamo.config.compiled_autograd "
            "or torch._dynamo.compiled_autograd.enable): it traces the watch's hooks, where the watch "
            "cannot queue its end-of-backward callback. Run the backward without compiled autograd "
            "while the watch is open (torch.compile of the model's forward is fine)"
        )


def check_reentrant() -> None:
    """Refuse a backward run inside another one's (reentrant checkpointing): its gradients would be
    split over several steps. Such a backward is started by ``CheckpointFunction.backward``, whose
    Python frame is then below this hook's on the stack.

    Raises:
        WatchError: the backward was started by a reentrant checkpoint's backward.
    """
    frame = sys._getframe(2)
    # the checkpoint's backward calls torch.autograd.backward, whose engine calls the hook: a few
    # frames below begin(), never the user's whole stack
    for _ in range(_REENTRANT_DEPTH):
        if frame is None:
            return
        if frame.f_code is _REENTRANT_BACKWARD:
            raise WatchError(
                "hookviz.watch: a backward ran inside another backward (torch.utils.checkpoint with "
                "use_reentrant=True, the default of older PyTorch and of gradient_checkpointing_enable() "
                "without gradient_checkpointing_kwargs): one loss.backward() would be split into "
                "several steps, each holding part of the model. Pass use_reentrant=False to "
                "torch.utils.checkpoint.checkpoint (or gradient_checkpointing_kwargs="
                "{'use_reentrant': False} to gradient_checkpointing_enable())"
            )
        frame = frame.f_back


def finish(reference: weakref.ref, task: int) -> None:
    """The end-of-backward callback of backward ``task``."""
    self = reference()
    if self is not None:
        _finish(self, task)


def _finish(watch, task: int) -> None:
    """End of backward ``task``: read what it left, and keep it as a step when the kept steps say so."""
    state = watch.backwards.pop(task)
    if state is None or watch.closed or state.own or not state.reached:
        return  # hookviz's own, or a backward that reached no watched parameter: not a step
    steps = watch.optimizer_steps
    changed = _changed(watch, state)
    if steps is not None:  # the optimizer's step is the step: hand it what this backward left
        outputs = state.reducer.finish(len(watch.names)) if watch.module_names else None
        steps.backward_ended(changed, outputs, measure_rows(state.local))
        watch.streams.note_left(changed[0], changed[1])
        if watch.ranks is not None:
            # queued now, so after DDP's callback (queued once its last bucket was ready) or FSDP2's
            # wrote the reduced gradients to .grad: the norms that clipping reads
            torch_compat.queue_end_of_backward(partial(steps.read_reduced, changed[0]))
        return
    if not changed[0] and not state.arrived:
        return  # autograd.grad: no .grad changed and no module output watched: not a step
    plan = watch.kept.plan(watch.streams.of_backward(changed[0], changed[2]))
    row, alarm = _row_of(watch, state, changed, plan.full)
    # after the norms were read (they bring each .grad into the cache): its version, for the next
    # backward to tell a reset from an accumulation
    watch.streams.note_left(changed[0], changed[1])
    info = StepInfo()
    if watch.scaler is not None and watch.scaler.is_enabled():
        info = StepInfo(loss_scale=float(watch.scaler.get_scale()))
    if watch.kept.keep(plan, row, info, alarm, state.arrived, len(watch.parameter_names)):
        if watch.ranks is not None:
            watch.ranks.finish(plan.step)


def _changed(watch, state: Backward) -> tuple[list[int], list[torch.Tensor], bool]:
    """``(columns, their .grad, fresh)``: the parameters whose ``.grad`` this backward changed, in
    column order, and whether one of them had been reset since the last backward (None, another
    tensor or written in place: a new iteration)."""
    tensors = watch.columns.parameters
    if watch.ranks is not None:  # DDP / FSDP2: the parameters measured in their hooks
        return sorted({c for c, _ in state.local}), [], True
    unset, before = state.unset, state.before
    if len(unset) + len(before) < len(tensors):
        # not every column reached: a parameter replaced without a registration (no hook on the new
        # one) is followed now, and its .grad, which only this backward can have written, is read
        moved = watch.columns.follow_replaced()
        if moved:
            unset = unset + [c for c in moved if c not in unset]
    if not before and unset and not watch.columns.empty:
        # the usual loop (every gradient reset to None before the backward): C loops, each .grad
        # touched once (the first read of a new .grad makes its Python object)
        unset.sort()
        grads = list(map(_grad, map(tensors.__getitem__, unset)))
        if all(map(is_not, grads, repeat(None))):
            return unset, grads, True
    columns, grads, seen = [], [], set()
    # in column order (a stable sort: a column's first note first), so that the usual step's norms
    # are the row's first lines as they are (StepReducer.finish), not scattered into it
    notes = sorted([*before, *((c, None, -1) for c in unset)], key=_first)
    fresh = False
    left = watch.streams.left
    for column, grad, version in notes:
        now = tensors[column].grad
        if now is not None and (now is not grad or now._version != version) and column not in seen:
            seen.add(column)
            if grad is None or left.get(column) != (id(grad), version):
                fresh = True
            if now.numel():
                columns.append(column)
                grads.append(now)
    return columns, grads, fresh


def _row_of(watch, state: Backward, changed: tuple, full: bool) -> tuple[torch.Tensor | NormsRow, bool]:
    """``(row, alarm)``: the ``[names, 4]`` row of one ended backward (every ``.grad`` it
    accumulated into and the module-output gradients its hooks handed over, reduced together; the
    usual step's as a :class:`~hookviz.watching.reduce.NormsRow`), and whether a gradient holds
    NaN/Inf or a norm is above ``exploding_norm``."""
    columns, grads, _ = changed
    if grads and watch.ranks is None:
        state.read_all = state.reducer.add_all(columns, grads, full, EXPLODING)
    row = state.reducer.finish_lazily(len(watch.names))
    if isinstance(row, NormsRow):  # the usual step: norms only, each finite and in range
        return row, False
    if state.local:  # DDP / FSDP2: parameters measured in their hooks, before the all-reduce
        for column, values in measure_rows(state.local).items():
            row[column] = torch.tensor(values, dtype=torch.float64)
    alarm = (state.read_all or bool(state.arrived) or bool(state.local)) and is_alarm(row)
    if alarm and grads:
        finite_max_abs(row, columns, grads)
    return row, alarm


def measure_rows(local: list[tuple[int, Measured]]) -> dict[int, tuple]:
    """``{column: (norm, max_abs, nonfinite, zero_fraction)}`` of statistics queued in hooks."""
    return {column: summary_of(measured.rows()[0]) for column, measured in local}


def reduce_pairs(pairs: list[tuple[int, torch.Tensor]], width: int) -> torch.Tensor:
    """A ``[width, 4]`` row of ``(column, gradient)`` pairs (DDP / FSDP2's reduced ``.grad``)."""
    return StepReducer()(pairs, width)
