"""``Run.explain(target)``: why a hook at a module, node or leaf did (not) fire, in plain words.

The reasons follow PyTorch's rules for when hooks run: a tensor hook and a Node hook run only when
gradient reaches them (https://pytorch.org/docs/stable/notes/autograd.html#backward-hooks-execution);
a full module backward hook runs only for a tensor or tuple output made with grad mode on, from the
Node of the module's inputs (``torch.utils.hooks.BackwardHook``, ``torch.nn.Module._call_impl``).
This module reads a :class:`hookviz.data.run.Run`; it imports nothing from it.
"""

from __future__ import annotations

import torch

from hookviz.advice import advice
from hookviz.data.run import Run, require_run
from hookviz.errors import TargetError
from hookviz.text import module_name


def explain(run: Run, target: str) -> str:
    """One paragraph on whether, and why not, a hook at ``target`` fires in ``run``.

    Args:
        run: a :class:`hookviz.data.run.Run`.
        target: a module name (``""`` = root), a node id or a leaf (input or parameter) name.

    Raises:
        HookvizError: ``run`` is not a Run.
        TargetError: ``target`` is none of those, in the run or in the model.
    """
    target = require_run(run, "explain(run, target)").canonical_name(target)
    if target in run.modules:
        return _explain_module(run, target) + _hooks_added_later(run, target)
    if target in run.leaf_grads:
        if run.leaf_grads[target] is None:
            return (
                f"{target!r} got no gradient: no path carries gradient from the loss to it"
                f"{_where_path_stops(run, target)}."
            )
        extra = (
            " Its gradient exists only because input_grads=True asked for it; the model does not, "
            "and PyTorch's hooks see None there."
            if target in run.asked_grads
            else ""
        )
        return f"{target!r} gets a gradient, so a tensor hook on it fires.{extra}{_accumulated(run, target)}"
    if target in run.nodes:
        return _explain_node(run, target)
    model = run.model
    if model is not None:
        parameters = dict(model.named_parameters(remove_duplicate=False))
        if target in parameters:
            parameter = parameters[target]
            if not parameter.requires_grad:
                return (
                    f"parameter {target!r} does not require grad (requires_grad=False), so autograd "
                    "computes no gradient for it and its hooks never fire; set "
                    "requires_grad_(True) to get one."
                )
            return (
                f"parameter {target!r} is not in the loss's autograd graph: forward never used it, "
                "or used it under torch.no_grad() or after .detach(), so no gradient reaches it."
            )
        modules = dict(model.named_modules(remove_duplicate=False))
        if target in modules:
            return (
                f"module {target!r} ({type(modules[target]).__name__}) was never called in forward, "
                "so none of its hooks can fire."
            )
    raise TargetError(
        f"unknown target {target!r} for explain(): pass a module name, a node id or a leaf name "
        f"(modules: {', '.join(map(repr, run.modules[:8]))} ...)"
    )


def _explain_module(run, name: str) -> str:
    calls = [c for c in run.calls if c.module == name]
    call = calls[0]
    label = "the root module" if name == "" else f"module {name!r}"
    label += f" ({call.type})"
    compiled = _compiled_region(run, name)
    if call.full_hook_fires:
        text = (
            f"A full backward hook of {label} fires: {sum(c.full_hook_fires for c in calls)} of its "
            f"{len(calls)} call(s) get gradient from the loss."
        )
        if call.shared_inputs:
            text += (
                " One tensor is passed as several of its inputs; PyTorch's hook sees one gradient per input."
            )
        return text + _changed_in_place(call, label) + compiled
    if not call.grad_enabled:
        return (
            f"{label} ran under torch.no_grad() (grad mode off), so its output does not require grad "
            "and no backward hook of it can fire." + compiled
        )
    if not call.output_kind_hookable:
        return (
            f"The outputs of {label} are not top-level tensors (it returns something other than a "
            "tensor or a tuple, e.g. a dict or a dataclass), so PyTorch never calls its full backward "
            "hooks; return a tuple, or hook the tensors themselves (Tensor.register_hook)." + compiled
        )
    if not call.output_requires_grad:
        return (
            f"The output of {label} does not require grad: it was made under torch.no_grad() or "
            "nothing it depends on requires grad, so no backward hook of it fires." + compiled
        )
    if call.output_node is None or not _got_gradient(run.nodes[call.output_node]):
        stops = _where_path_stops(run, call.output_node) if call.output_node is not None else ""
        return (
            f"No path carries gradient from the loss to the output of {label}{stops}: the output is "
            "used only after .detach(), through ops that have no gradient (argmax, comparisons, "
            ".item(), integer casts), or not at all, so its backward hooks never fire."
            + _changed_in_place(call, label)
            + compiled
        )
    return (
        f"None of the inputs of {label} got a gradient, and PyTorch calls a full backward hook from "
        "the Node of the module's inputs, which never ran." + compiled
    )


def _accumulated(run, leaf: str) -> str:
    """What the leaf's post-accumulate-grad hooks did in ``run``: PyTorch calls them after
    ``AccumulateGrad`` wrote ``.grad`` (``Tensor.register_post_accumulate_grad_hook``)."""
    node = run.nodes.get(leaf)
    names = [
        h.name for h in (node.user_hooks if node is not None else []) if h.kind == "post-accumulate-grad hook"
    ]
    if not names:
        return ""
    listed = ", ".join(names)
    if run.local_leaf_grads is not None:
        return (
            f" Its post-accumulate-grad hook(s) {listed} did not run in this run: on a DDP / FSDP2 model "
            "the all-reduce writes .grad, which hookviz's backward (torch.autograd.grad) does not "
            "do, so its leaf gradient is the reduced gradient before any such hook."
        )
    return (
        f" Its post-accumulate-grad hook(s) {listed} ran after its gradient was complete, with .grad "
        "holding it, as AccumulateGrad calls them; its leaf gradient is .grad as they left it."
    )


def _hooks_added_later(run, name: str) -> str:
    """Module backward hooks are set up when the module is called: ones added after the run's
    forward wait for the next forward."""
    model = run.model
    if model is None:
        return ""
    module = model.get_submodule(name)
    recorded = {(h.kind, h.name) for h in run.module_io(name).user_hooks}
    later = [
        getattr(fn, "__qualname__", type(fn).__name__)
        for attribute in ("_backward_hooks", "_backward_pre_hooks")
        for fn in getattr(module, attribute).values()
        if not any(n == getattr(fn, "__qualname__", type(fn).__name__) for _, n in recorded)
    ]
    if not later:
        return ""
    return (
        f" The backward hook(s) {', '.join(later)} were registered after this run's forward: PyTorch "
        "wires module backward hooks in when the module is called, so they fire from the next "
        f"forward on ({advice('new_forward')})."
    )


def _changed_in_place(call, label: str) -> str:
    if call.output_changed_later:
        return (
            f" An in-place op replaced the output of {label} after it returned (e.g. x += 1 or "
            "relu_): the tensor's grad_fn is now that op's Node, and the module's hooks see the "
            "gradient of the value it returned, not of the tensor as it is now."
        )
    return ""


def _got_gradient(record) -> bool:
    """The Node ran with some gradient (the engine also runs a Node that only got None)."""
    return record.order is not None and any(g is not None for g in record.grad_outputs)


def _explain_node(run, node_id: str) -> str:
    record = run.nodes[node_id]
    if _got_gradient(record):
        return f"{node_id} ({record.op}) ran in backward, so its Node hooks fire."
    if record.kind == "boundary":
        return (
            f"{node_id} was made before forward (history the inputs carried in); hookviz's backward "
            "stops there, so its hooks do not fire in this run."
        )
    return (
        f"{node_id} ({record.op}) got no gradient in backward: no path carries gradient from the loss "
        f"to it{_where_path_stops(run, node_id)}."
    )


def _where_path_stops(run, node_id: str) -> str:
    """Name the nodes next to ``node_id`` on the loss's side that ran but sent it no gradient."""
    stops = []
    for consumer in run.graph.successors(node_id):
        record = run.nodes[consumer]
        slot = run.graph.edges[node_id, consumer]["slot"]
        grads = record.grad_inputs
        if record.order is not None and (slot >= len(grads) or grads[slot] is None):
            stops.append(f"{consumer} ({record.op}) sends no gradient to it from grad_inputs[{slot}]")
    return ("; the path stops at " + ", ".join(stops[:3])) if stops else ""


def _compiled_region(run, name: str) -> str:
    model = run.model
    if model is None:
        return ""
    parts = name.split(".") if name else []
    for depth in range(len(parts) + 1):
        prefix = ".".join(parts[:depth])
        try:
            module = model.get_submodule(prefix)
        except AttributeError:
            return ""
        if isinstance(getattr(module, "_orig_mod", None), torch.nn.Module):
            region = module_name(prefix, type(model).__name__)
            return (
                f" Note: it runs inside the torch.compile'd region {region!r}; hookviz "
                "recorded it eagerly, but in the compiled model a hook added after compiling may not "
                "fire until torch._dynamo.reset()."
            )
    return ""
