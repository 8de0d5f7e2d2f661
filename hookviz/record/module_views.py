"""What a module's full backward hook sees, derived from what hookviz's Node hooks saw.

hookviz does not register ``register_full_backward_hook`` on the user's modules to record a run: its
identity Nodes change the order in which autograd sums gradients (docs/architecture.md, decision 1).
The full hook's view is rebuilt from Node post-hooks instead, by PyTorch's own rules
(``torch.utils.hooks.BackwardHook``, ``torch.nn.Module._call_impl``):

- ``grad_input`` has one entry per positional argument: None for an argument that is not a tensor,
  and None for every argument when none requires grad (PyTorch then wraps no input); else the
  gradient that the module's own uses of that argument send back, plus, when the module returns the
  argument itself (``nn.Identity``, ``Dropout`` in eval), the gradient arriving at that output from
  outside. A tensor argument that gets no gradient, or does not require grad beside one that does,
  is seen as zeros (the wrapping ``BackwardHookFunction`` materialises missing gradients).
- ``grad_output`` has one entry per top-level output (the output itself when it is a tensor, each
  entry of a tuple): the gradient from the module's *outside* uses only (uses inside the module do
  not go through the hook's wrapper); None where the entry is not a tensor or no gradient arrived.
- The hook fires only when the output is a tensor or a tuple, grad mode was on, some output got a
  gradient from outside, and, when an argument requires grad, some argument got a gradient.

One tensor passed as several arguments (``two(h, h)``, ``MultiheadAttention(x, x, x)``) cannot be
split by use from the model's own graph, where all uses read the same tensor. For those calls alone,
:func:`split_shared_inputs` asks autograd: it runs the module's forward again on one copy of the
tensor per argument, as PyTorch's hook wrapper would, and backpropagates the call's ``grad_output``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from hookviz.record import devices
from hookviz.record.model_state import KeptState

Use = tuple[str, int]  # (consumer node id, slot in its grad_inputs)


# A plan lives as long as the retained forward, one per module call: its sequences are tuples,
# which the garbage collector stops tracking once they hold only numbers and strings.
@dataclass
class InputPlan:
    """Where one positional argument's full-hook gradient comes from."""

    uses: tuple[Use, ...]
    passed_through: tuple[int, ...]  # output positions that are this argument itself
    shape: tuple[int, ...]
    dtype: torch.dtype
    device: torch.device | None


@dataclass
class OutputPlan:
    """Where one top-level output's full-hook gradient comes from."""

    producer: tuple[str | None, int]
    outside: tuple[Use, ...]
    read_at_producer: bool  # the gradient arriving at the producer is the answer (no hook between)
    shape: tuple[int, ...]
    dtype: torch.dtype
    device: torch.device | None


@dataclass
class CallPlan:
    """How to rebuild one module call's full backward hook view after backward."""

    hookable: bool  # grad mode on and a tensor or tuple output
    inputs: tuple[InputPlan | None, ...] = ()
    outputs: tuple[OutputPlan | None, ...] = ()
    shared_inputs: bool = False  # one tensor passed as several arguments

    def summed_uses(self) -> set[Use]:
        """Uses whose gradients are added up: they must be kept whole through backward."""
        found: set[Use] = set()
        for plan in self.inputs:
            if plan is not None and len(plan.uses) + len(plan.passed_through) > 1:
                found.update(plan.uses)
        for plan in self.outputs:
            if plan is not None and not plan.read_at_producer:
                found.update(plan.outside)
        return found

    def read_outputs(self) -> set[tuple[str, int]]:
        """(node, output_nr) whose arriving gradient the view must have whole: a shared-input
        call's grad_output, which :func:`split_shared_inputs` backpropagates."""
        if not self.shared_inputs:
            return set()
        return {p.producer for p in self.outputs if p is not None and p.read_at_producer and p.producer[0]}


def plan_call(
    call, producer_of, consumers: dict, sequence_nr: dict[str, int], hooks_between: bool
) -> CallPlan:
    """The :class:`CallPlan` of one :class:`~hookviz.record.forward_recorder.CallState`.

    Args:
        call: the module call (its input/output Edges and sequence-number bracket).
        producer_of: ``Edge -> (node id, output_nr)`` in the walked graph.
        consumers: ``(node id, output_nr) -> ((consumer, slot), ...)``.
        sequence_nr: node id -> ``Node._sequence_nr()`` (made during the call when inside
            ``[call.sequence_start, call.sequence_end)``).
        hooks_between: full backward hooks' identity Nodes sit between some nodes; their hooks may
            change a gradient after the uses sent it, so the uses are added up, not read at the
            producer.
    """
    plan = CallPlan(hookable=call.grad_enabled and call.full_hook_fires)
    inside = range(call.sequence_start, call.sequence_end)
    outputs, output_producers = [], []
    for edge in call.outputs:
        if edge is None or not edge.requires_grad or not plan.hookable:
            outputs.append(None)
            output_producers.append(None)
            continue
        producer = producer_of(edge)
        uses = consumers.get(producer, ())
        outside = tuple(u for u in uses if sequence_nr.get(u[0], -1) >= call.sequence_end)
        # With no use at all the output is the loss itself: what arrives there is the seed.
        plain = not uses or (len(outside) == len(uses) and not hooks_between)
        outputs.append(OutputPlan(producer, outside, plain, edge.shape, edge.dtype, edge.device))
        output_producers.append(producer)
    plan.outputs = tuple(outputs)
    seen: set = set()
    wrapped = call.grad_enabled and any(e is not None and e.requires_grad for e in call.inputs)
    inputs = []
    for edge in call.inputs:
        if edge is None or not wrapped:
            inputs.append(None)
            continue
        if not edge.requires_grad:
            inputs.append(InputPlan((), (), edge.shape, edge.dtype, edge.device))
            continue
        producer = producer_of(edge)
        plan.shared_inputs |= producer in seen
        seen.add(producer)
        uses = tuple(u for u in consumers.get(producer, ()) if sequence_nr.get(u[0], -1) in inside)
        passed = tuple(j for j, p in enumerate(output_producers) if p is not None and p == producer)
        inputs.append(InputPlan(uses, passed, edge.shape, edge.dtype, edge.device))
    plan.inputs = tuple(inputs)
    return plan


def full_hook_view(plan: CallPlan, sent, arriving, ran) -> tuple[bool, tuple, tuple]:
    """``(fires, grad_input, grad_output)`` as tensors (or None), by the rules in the module docstring.

    Args:
        plan: from :func:`plan_call`.
        sent: ``(consumer, slot) -> Tensor | None``: what that consumer's post-hook sent there.
        arriving: ``(node id, output_nr) -> Tensor | None``: the gradient that reached a node's output.
        ran: node id -> True when that Node ran in this backward.
    """
    if not plan.hookable:
        return False, (), ()

    def total(uses: list[Use]):
        # In the order the engine ran the uses, as autograd's input buffer adds them up.
        grads = [sent(use) for use in uses if ran(use[0])]
        grads = [g for g in grads if g is not None]
        if not grads:
            return None
        result = grads[0]
        for grad in grads[1:]:
            result = result + grad
        return result

    grad_output, got_outside = [], False
    for plan_out in plan.outputs:
        if plan_out is None:
            grad_output.append(None)
            continue
        grad = arriving(plan_out.producer) if plan_out.read_at_producer else total(plan_out.outside)
        got_outside |= grad is not None
        grad_output.append(grad)
    if not got_outside:
        return False, (), ()
    grad_input, got_inside, wants = [], False, False
    for plan_in in plan.inputs:
        if plan_in is None:
            grad_input.append(None)
            continue
        wants = True
        grad = total(plan_in.uses)
        for j in plan_in.passed_through:
            if grad_output[j] is not None:
                grad = grad_output[j] if grad is None else grad + grad_output[j]
        got_inside |= grad is not None
        grad_input.append(grad if grad is not None else _zeros(plan_in))
    if wants and not got_inside:
        return False, (), ()  # PyTorch calls the hook from the inputs' Node, which never ran
    return True, tuple(grad_input), tuple(grad_output)


def _zeros(plan: InputPlan) -> torch.Tensor:
    return torch.zeros(plan.shape, dtype=plan.dtype, device=plan.device)


def split_shared_inputs(model: torch.nn.Module, call, grad_output: tuple, grad_input: tuple) -> tuple:
    """``grad_input`` per argument of a call that got one tensor as several arguments.

    The module's forward runs again on a fresh leaf per tensor argument, with the random state the
    call had on the CPU and on every accelerator it used (so a dropout draws the same mask there),
    and afterwards the module's state (hooks its forward registers included) and every random state
    put back, since plain PyTorch runs no such forward; the user's hooks inside it run and print as
    they do in any forward. Then ``torch.autograd.grad`` sends ``grad_output`` back through it. This
    is what PyTorch's full hook sees: its ``BackwardHookFunction`` gives every argument a tensor of
    its own, so the module may even take another code path (``MultiheadAttention`` checks
    ``query is key``).
    """
    args, kwargs, used, random_state = call.shared
    module = model.get_submodule(call.module)
    leaves = [a.detach().requires_grad_(a.requires_grad) if isinstance(a, torch.Tensor) else a for a in args]
    wanted = [i for i, a in enumerate(leaves) if isinstance(a, torch.Tensor) and a.requires_grad]
    kept = KeptState(module)  # put back after the backward below, as after a run
    try:
        with devices.forked_random_state(used, random_state), torch.enable_grad():
            with kept.watching(), kept.accumulation_watched():
                output = module.forward(*leaves, **kwargs)
            outputs = [output] if isinstance(output, torch.Tensor) else list(output)
            pairs = [
                (o, g)
                for o, g in zip(outputs, grad_output)
                if isinstance(o, torch.Tensor) and o.requires_grad and g is not None
            ]
            grads = torch.autograd.grad(
                [o for o, _ in pairs],
                [leaves[i] for i in wanted],
                [g.to(o.dtype) for o, g in pairs],
                allow_unused=True,
                materialize_grads=True,
            )
    finally:
        kept.put_back()
    result = list(grad_input)
    for i, grad in zip(wanted, grads):
        result[i] = grad
    return tuple(result)
