"""The hooks a watch registers, on the model, its modules and parameters and the graphs of forwards.

How they work together: :mod:`hookviz.watching.watch`. Each holds a weak reference to its
:class:`~hookviz.watching.watch.Watch` (a hook never keeps the watch alive) and hands what it saw to
the watch's per-backward state.
"""

from __future__ import annotations

import weakref
from functools import partial

import torch
from torch.utils import _pytree as pytree

from hookviz.stats.reduce import measure
from hookviz.watching import gather as watch_gather


def finish(reference: weakref.ref, task: int) -> None:
    """The end-of-backward callback of backward ``task``."""
    self = reference()
    if self is not None:
        self._finish(task)


def _on_parameter(reference: weakref.ref, column: int, parameter: torch.Tensor) -> None:
    """DDP / FSDP2 only: ``register_post_accumulate_grad_hook``: queue the statistics of the local
    ``.grad`` before the all-reduce writes over it; returns None."""
    self = reference()
    if self is None or watch_gather.is_shard(parameter):
        return  # FSDP2 calls a shard's hooks with the reduced .grad, from its end-of-backward callback
    state = self._begin()
    if state is not None and state.recording and parameter.grad is not None:
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
    state = self._begin()
    if state is not None and state.recording:
        state.arrived.append(column)
        state.reducer.add(column, grad)


def _on_output_grad(reference: weakref.ref, column: int, grad: torch.Tensor) -> None:
    """``Tensor.register_hook`` on a module output that is a leaf (it has no Node): as above."""
    _on_output_grads(reference, column, 0, (grad,))


def _on_model_grads(reference: weakref.ref, grad_outputs) -> None:
    """Node pre-hook (or tensor hook) on an output of the model: a backward reached the model."""
    self = reference()
    if self is not None:
        self._begin()


def _output_tensors(output) -> list[torch.Tensor]:
    """The tensors of a module's output that require grad; one returned twice is listed once."""
    if isinstance(output, torch.Tensor):
        return [output] if output.requires_grad else []
    found = {id(t): t for t in pytree.tree_leaves(output) if isinstance(t, torch.Tensor) and t.requires_grad}
    return list(found.values())


def on_model_forward(reference: weakref.ref, module, args, output) -> None:
    """Forward hook on the model: hook each output's Node, to learn when a backward reaches it."""
    self = reference()
    if self is None or self.closed:
        return
    self._check_structure()
    if not self.parameter_names or not torch.is_grad_enabled():
        return
    hook = partial(_on_model_grads, reference)
    for tensor in _output_tensors(output):
        node = tensor.grad_fn
        handle = tensor.register_hook(hook) if node is None else node.register_prehook(hook)
        self._keep_graph_handle(handle)


def on_forward(reference: weakref.ref, column: int, module, args, output) -> None:
    """Forward hook (``outputs=True``): put a gradient hook on each output tensor; returns None."""
    self = reference()
    if self is None or self.closed or not self.recording or not torch.is_grad_enabled():
        return
    for tensor in _output_tensors(output):
        node = tensor.grad_fn
        if node is None:
            handle = tensor.register_hook(partial(_on_output_grad, reference, column))
        else:
            handle = node.register_prehook(partial(_on_output_grads, reference, column, tensor.output_nr))
        self._keep_graph_handle(handle)
