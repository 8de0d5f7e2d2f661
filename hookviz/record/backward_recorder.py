"""The backward recorder: what hookviz's hooks on graph Nodes record and edit during backward.

One Node post-hook per Node (``Node.register_hook``) records ``grad_outputs`` and
``grad_inputs`` and applies the run's ``grad_inputs`` edits; Node pre-hooks are added only where an
edit replaces ``grad_outputs``. PyTorch runs a Node's post-hooks in registration order, so the user's
own legacy module hooks (registered during forward) run first, as they would without hookviz.
Full backward hooks are registered only where an edit of a module's ``grad_input`` needs one, because
their identity Nodes change the order in which autograd sums gradients (docs/architecture.md,
decision 1).

The hooks on graph Nodes live as long as hookviz's retained graph; they read the current run from a
shared :class:`RecordingState`, so a backward-only re-run records into a fresh recorder.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator

import torch

from hookviz.data.run import Event, HookCall
from hookviz.edits.edit import Edit, replace_slots


class RecordingState:
    """Where the hooks on a retained graph send what they see: the active recorder, or nowhere."""

    def __init__(self):
        self.active: BackwardRecorder | None = None


class BackwardRecorder:
    """Collects one forward's hook calls and one backward pass: grads at every Node, execution
    order, hook calls, edits.

    Args:
        edits: the session's edits. Module edits (``grad_input`` / ``grad_output``, run by real full
            backward (pre-)hooks) apply from forward on; the others once :meth:`begin_backward`
            says which targets are op Nodes.
    """

    def __init__(self, edits: list[Edit] = ()):
        self.edits = list(edits)
        self.module_input_edits: dict[str, list[Edit]] = {}
        self.module_output_edits: dict[str, list[Edit]] = {}
        for edit in self.edits:
            if edit.slot.on_module:
                table = (
                    self.module_input_edits if edit.slot.name == "grad_input" else self.module_output_edits
                )
                table.setdefault(edit.target, []).append(edit)
        self.post_edits: dict[str, list[Edit]] = {}  # node id -> edits of its grad_inputs
        self.pre_edits: dict[str, list[Edit]] = {}  # node id -> edits of its grad_outputs
        self.leaf_edits: dict[str, list[Edit]] = {}  # leaf name -> edits of its grad
        self.settle = None  # grad -> grad, or a stand-in once summarised (see StatsBatch.settle)
        self.keep: frozenset[tuple[str, int]] = frozenset()  # (node, slot) whose grad_inputs are summed later
        self.keep_outputs: frozenset[tuple[str, int]] = frozenset()  # (node, output_nr) read whole later
        self.steps = itertools.count()
        self.order: dict[str, int] = {}
        self.grad_outputs: dict[str, tuple] = {}
        self.grad_inputs: dict[str, tuple] = {}
        self.received_grad_inputs: dict[str, tuple] = {}
        self.grad_outputs_before_edit: dict[str, tuple] = {}
        self.hidden_seen: dict[int, tuple[tuple, tuple]] = {}  # call index -> legacy view on a hidden Node
        self.events: list[Event] = []  # user hook and edit events; Node events are node_steps
        self.node_steps: list[tuple[int, str, str]] = []  # (step, node id, op) of each Node run
        self.hook_calls: list[tuple[HookCall, tuple, tuple]] = []  # with live before/after grads

    def begin_backward(
        self, op_nodes, settle, keep: frozenset, keep_outputs: frozenset = frozenset()
    ) -> None:
        """Sort the Node and leaf edits, now that the graph is known, before backward runs.

        Args:
            op_nodes: ids of the op Nodes (``grad`` on one of them edits its ``grad_outputs[0]``,
                as a tensor hook on its output would; on a leaf, the leaf's gradient).
            settle: see :meth:`hookviz.data.stats_batch.StatsBatch.settle`. keep: (node, slot) pairs whose
                ``grad_inputs`` a module view adds up, kept whole. keep_outputs: (node, output_nr)
                pairs whose ``grad_outputs`` a module view reads whole.
        """
        self.settle, self.keep, self.keep_outputs = settle, keep, keep_outputs
        for edit in self.edits:
            name = edit.slot.name
            if name == "grad_inputs":
                self.post_edits.setdefault(edit.target, []).append(edit)
            elif name == "grad_outputs":
                self.pre_edits.setdefault(edit.target, []).append(edit)
            elif name == "grad" and edit.target in op_nodes:
                self.pre_edits.setdefault(edit.target, []).append(edit.on_grad_outputs(edit.target, 0))
            elif name == "grad":
                self.leaf_edits.setdefault(edit.target, []).append(edit)

    def leaf_grads(self, grads: dict[str, torch.Tensor | None]) -> dict[str, torch.Tensor | None]:
        """Apply the leaf edits to what ``torch.autograd.grad`` returned (where a tensor hook on
        the leaf would act), recording each as an edit call."""
        edited = dict(grads)
        for name, edits in self.leaf_edits.items():
            if name in edited:
                new, _ = replace_slots((edited[name],), edits)
                self._edit_call(name, name, edits, (edited[name],), new)
                edited[name] = new[0]
        return edited

    def node_ran(self, node_id: str, op: str, grad_inputs: tuple, grad_outputs: tuple):
        """Called by the Node post-hook; returns replacement grad_inputs when an edit applies."""
        # Runs once per Node of every backward: its Event is made when the run is read
        # (:meth:`all_events`), and a Node with no gradient kept whole settles each in one pass.
        step = next(self.steps)
        self.order[node_id] = len(self.order)
        self.node_steps.append((step, node_id, op))
        self.grad_outputs[node_id] = self._held(node_id, grad_outputs, self.keep_outputs)
        self.received_grad_inputs[node_id] = held = self._held(node_id, grad_inputs, self.keep)
        edits = self.post_edits.get(node_id)
        if not edits:
            self.grad_inputs[node_id] = held
            return None
        new, _ = replace_slots(grad_inputs, edits)
        self.grad_inputs[node_id] = self._held(node_id, new, self.keep)
        self._edit_call(node_id, node_id, edits, grad_inputs, new)
        return new

    def _held(self, node_id: str, grads: tuple, kept: frozenset) -> tuple:
        """What to keep of a Node's grads until the run is assembled (see ``settle``): ``kept``
        holds the (node, slot) pairs kept whole."""
        settle = self.settle
        if settle is None:
            return grads
        if not kept:
            return tuple([None if g is None else settle(g) for g in grads])
        return tuple(
            [g if g is None or (node_id, slot) in kept else settle(g) for slot, g in enumerate(grads)]
        )

    def all_events(self) -> list[Event]:
        """Every event of the backward, in the order it happened."""
        nodes = [Event(step, "node", node_id, op) for step, node_id, op in self.node_steps]
        return sorted(nodes + self.events, key=lambda e: e.step)

    def node_pre(self, node_id: str, grad_outputs: tuple):
        """Called by an edit's Node pre-hook; returns the edited grad_outputs."""
        new, _ = replace_slots(grad_outputs, self.pre_edits[node_id])
        self.grad_outputs_before_edit[node_id] = grad_outputs
        self._edit_call(node_id, node_id, self.pre_edits[node_id], grad_outputs, new)
        return new

    def module_edit(self, module: str, slot_name: str, grads: tuple):
        """Called by a module's edit hook: the full backward hook (``grad_input`` edits) or the
        full backward pre-hook (``grad_output`` edits); returns the edited tuple, or None."""
        table = self.module_input_edits if slot_name == "grad_input" else self.module_output_edits
        edits = table.get(module)
        if not edits:
            return None
        new, _ = replace_slots(grads, edits)
        self._edit_call(module, None, edits, grads, new)
        return new

    def _edit_call(self, where: str, node: str | None, edits: list[Edit], before, after) -> None:
        step = next(self.steps)
        label = "; ".join(f"{e.slot} <- {e.source}" for e in edits)
        self.events.append(Event(step, "edit", node, f"{where}: {label}"))
        call = HookCall(step, "edit", label, where, returned=True, node=node)
        self.hook_calls.append((call, tuple(before), tuple(after)))

    def user_hook_called(self, call: HookCall, before: tuple, after: tuple) -> None:
        """Record a call of a user's hook (made by :func:`hookviz.record.user_hooks.wrapped_user_hooks`)."""
        self.events.append(
            Event(call.step, "user_hook", call.node, f"{call.kind} {call.name} @ {call.where}")
        )
        self.hook_calls.append((call, before, after))


class NodePostHook:
    """The Node post-hook hookviz puts on every Node: ``hook(grad_inputs, grad_outputs)``."""

    __slots__ = ("state", "node_id", "op")

    def __init__(self, state: RecordingState, node_id: str, op: str):
        self.state, self.node_id, self.op = state, node_id, op

    def __call__(self, grad_inputs, grad_outputs):
        recorder = self.state.active
        if recorder is None:
            return None
        return recorder.node_ran(self.node_id, self.op, grad_inputs, grad_outputs)


class HiddenNodeProbe:
    """A post-hook on a full backward hook's identity Node that a legacy module hook hangs on (the
    module returns the output of a submodule that has a full backward hook): records what it sees."""

    __slots__ = ("state", "call_index")

    def __init__(self, state: RecordingState, call_index: int):
        self.state, self.call_index = state, call_index

    def __call__(self, grad_inputs, grad_outputs):
        recorder = self.state.active
        if recorder is not None:
            recorder.hidden_seen[self.call_index] = (tuple(grad_inputs), tuple(grad_outputs))


class NodePreEditHook:
    """A Node pre-hook that applies ``grad_outputs`` edits: ``hook(grad_outputs)``."""

    def __init__(self, recorder: BackwardRecorder, node_id: str):
        self.recorder, self.node_id = recorder, node_id

    def __call__(self, grad_outputs):
        return self.recorder.node_pre(self.node_id, grad_outputs)


class ModuleEditHook:
    """A module's edit hook: as a full backward hook ``hook(module, grad_input, grad_output)`` it
    edits ``grad_input``; as a full backward pre-hook ``hook(module, grad_output)``, ``grad_output``.
    Either way the tuple to edit comes first."""

    def __init__(self, state: RecordingState, module: str, slot_name: str):
        self.state, self.module, self.slot_name = state, module, slot_name

    def __call__(self, module, grads, *rest):
        recorder = self.state.active
        return None if recorder is None else recorder.module_edit(self.module, self.slot_name, grads)


@contextlib.contextmanager
def full_backward_hooks(
    state: RecordingState, model: torch.nn.Module, sites: list[tuple[str, str]]
) -> Iterator[None]:
    """Register hookviz's module edit hooks for one forward; always removes them.

    ``sites`` are ``(module name, "grad_input" | "grad_output")``: a full backward hook
    (``register_full_backward_hook``) edits ``grad_input``, a full backward pre-hook
    (``register_full_backward_pre_hook``) edits ``grad_output``; these are the hooks
    :func:`hookviz.edits.codegen.edits_as_code` writes, so an edit and its exported code agree.
    Registering them marks a module for good (``_is_full_backward_hook``), after which PyTorch
    refuses ``register_backward_hook`` on it; the mark is put back as it was.
    """
    handles, marks = [], []
    try:
        for name, kind in sites:
            module = model.get_submodule(name)
            marks.append((module, module._is_full_backward_hook))
            hook = ModuleEditHook(state, name, kind)
            register = (
                module.register_full_backward_hook
                if kind == "grad_input"
                else module.register_full_backward_pre_hook
            )
            handles.append(register(hook))
        yield
    finally:
        for handle in handles:
            handle.remove()
        for module, mark in reversed(marks):
            module._is_full_backward_hook = mark
