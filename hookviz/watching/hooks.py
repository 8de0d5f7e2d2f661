"""The hooks a watch registers: on its parameters, and with ``outputs=True`` on its modules and the
graphs of forwards (none on the model's own forward: :mod:`hookviz.watching.structure` says when the
model is looked at).

How they work together: :mod:`hookviz.watching.watch`; the optimizer's step hooks:
:mod:`hookviz.watching.optimizer_steps`. Each holds a weak reference to its
:class:`~hookviz.watching.watch.Watch` (a hook never keeps the watch alive) and hands what it saw to
the watch's per-backward state.
"""

from __future__ import annotations

import weakref
from functools import partial

import torch

from hookviz.record import torch_compat
from hookviz.record.own_pass import in_own_pass
from hookviz.record.torch_compat import pytree
from hookviz.stats.reduce import measure
from hookviz.watching import gather as watch_gather
from hookviz.watching.backward_steps import begin

_graph_task_id = torch_compat.graph_task_id


def _on_parameter(reference: weakref.ref, column: int, parameter: torch.Tensor) -> None:
    """DDP / FSDP2 only: ``register_post_accumulate_grad_hook``: queue the statistics of the local
    ``.grad`` before the all-reduce writes over it; returns None."""
    self = reference()
    if self is None or watch_gather.is_shard(parameter):
        return  # FSDP2 calls a shard's hooks with the reduced .grad, from its end-of-backward callback
    state = begin(self)
    if state is not None and not state.own:
        state.reached = True  # FSDP2: the sharded parameters' own tensor hooks never run
    if state is not None and not state.own and parameter.grad is not None:
        state.arrived.append(column)
        state.local.append((column, measure([parameter.grad], sums=False, counts=True)))


def parameter_hook(reference: weakref.ref, column: int):
    """The parameter hook of one column (DDP / FSDP2's parameters, and FSDP2's unsharded ones)."""
    return partial(_on_parameter, reference, column)


def _on_output_grads(reference: weakref.ref, column: int, output_nr: int, grad_outputs: tuple) -> None:
    """Node pre-hook on the Node that made a module output: hand the gradient w.r.t. that output to the
    step's reduction; returns None (the gradients are unchanged)."""
    grad = grad_outputs[output_nr]
    if grad is None:
        return
    self = reference()
    if self is None:
        return
    state = begin(self)
    if state is not None and not state.own:
        state.reached = True  # a backward that reaches module outputs only (autograd.grad) is a step too
        state.arrived.append(column)
        state.reducer.add(column, grad)


def _on_output_grad(reference: weakref.ref, column: int, grad: torch.Tensor) -> None:
    """``Tensor.register_hook`` on a module output that is a leaf (it has no Node): as above."""
    _on_output_grads(reference, column, 0, (grad,))


def step_start_hook(reference: weakref.ref, pending: dict, parameters: list, column: int):
    """The tensor hook of one watched parameter, ``parameters[column]`` (``parameters``: the
    watch's columns, the list itself, followed when a parameter is replaced; ``pending``: the
    watch's ``Backwards.pending``; ``column`` -1: a parameter that starts steps but has no column,
    under ``parameters=False``).

    ``Tensor.register_hook`` runs it in every backward that reaches the parameter, before
    ``AccumulateGrad`` adds the gradient to ``.grad``, so the first of a backward starts its step
    (:func:`~hookviz.watching.backward_steps.begin`) before any parameter's ``.grad`` changed (a
    parameter the loss uses directly included). Each notes the ``.grad`` its parameter holds now.
    The hook returns None (the gradient is unchanged)."""
    task_id = _graph_task_id

    # a closure, not a partial of a function reading the watch: it runs once per parameter per
    # backward, so what it reads is bound here
    def on_parameter_grad(grad: torch.Tensor) -> None:
        state = pending.get(task_id())
        if state is None:
            self = reference()
            if self is None:
                return
            state = begin(self)
            if state is None:
                return
        if state.own:
            return
        state.reached = True
        if column >= 0:
            held = parameters[column].grad
            if held is None:
                state.unset.append(column)
            else:
                state.before.append((column, held, held._version))

    return on_parameter_grad


def _output_tensors(output) -> list[torch.Tensor]:
    """The tensors of a module's output that require grad; one returned twice is listed once."""
    if isinstance(output, torch.Tensor):
        return [output] if output.requires_grad else []
    found = {id(t): t for t in pytree.tree_leaves(output) if isinstance(t, torch.Tensor) and t.requires_grad}
    return list(found.values())


def on_forward(reference: weakref.ref, column: int, module, args, output) -> None:
    """Forward hook (``outputs=True``): put a gradient hook on each output tensor; returns None."""
    self = reference()
    if self is None or self.closed or not torch.is_grad_enabled() or in_own_pass():
        return
    for tensor in _output_tensors(output):
        node = tensor.grad_fn
        if node is None:
            handle = tensor.register_hook(partial(_on_output_grad, reference, column))
        else:
            handle = node.register_prehook(partial(_on_output_grads, reference, column, tensor.output_nr))
        self.handles.add_graph(handle)
