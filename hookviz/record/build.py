"""Turning the live records of one forward + backward into a plain :class:`~hookviz.data.run.Run`.

The recorders hold live objects (autograd Nodes, gradients or their settled stand-ins, hook
calls); :func:`build_run` summarises every tensor in one batch and builds the records, the module
views (full and legacy backward hook), the event order and the graph's edges.
"""

from __future__ import annotations

import functools
import weakref
from dataclasses import dataclass

import torch

from hookviz.analysis.gradient_stats import module_of
from hookviz.data.run import LOSS_MODULE, Event, HookCall, HookInfo, ModuleCall, NodeRecord, Run
from hookviz.data.stats_batch import Settled, StatsBatch
from hookviz.record.backward_recorder import BackwardRecorder
from hookviz.record.graph import Walk, resolve_hidden
from hookviz.record.module_views import full_hook_view, split_shared_inputs
from hookviz.record.torch_compat import forward_output_counts
from hookviz.record.user_hooks import user_module_hooks, user_tensor_hooks


@dataclass(frozen=True)
class RunContext:
    """What a run records about the session that made it (plain data).

    Attributes:
        user_model: the user's model (its hooks are listed; the run keeps a weak reference).
        edits: the edits active in this run. asked_grads, notes: see :class:`~hookviz.data.run.Run`.
        input_names: the forward inputs' names, in signature order (leaves are listed inputs first).
    """

    user_model: torch.nn.Module
    edits: tuple
    asked_grads: tuple[str, ...]
    notes: tuple[str, ...]
    input_names: tuple[str, ...]


def build_run(
    forward,
    recorder: BackwardRecorder,
    leaf_grads: dict,
    batch: StatsBatch,
    context: RunContext,
    reused: bool,
) -> Run:
    """The :class:`Run` of one backward on a :class:`~hookviz.record.forward.RetainedForward`, its
    records left to :class:`_PendingRecords` (made on first read).

    What may change after the run returns is read now: every gradient is added to the statistics
    batch with its version (one changed in place later is marked, not misread), the Node order and
    the user's hooks; what a full backward hook sees is rebuilt now only for a call that re-runs
    its module (:func:`split_shared_inputs` reads the model).

    Args:
        forward: the retained forward the backward ran on. recorder: what that backward recorded.
        leaf_grads: leaf name -> gradient (after leaf edits). batch: the statistics batch the
            recorder settled large gradients into. reused: only backward ran again.
    """
    static = forward.assembly_static
    if static is None:  # once per forward: what every run on it shares
        static = forward.assembly_static = _StaticParts(forward, context.user_model)

    def keys(grads) -> tuple:
        return _stats_keys(grads, batch)

    in_keys = {n: keys(g) for n, g in recorder.grad_inputs.items()}
    # Where no edit fired, a Node's grad_inputs are the very tuple it received.
    sent = recorder.grad_inputs
    received_keys = {
        n: in_keys[n] if g is sent.get(n) else keys(g) for n, g in recorder.received_grad_inputs.items()
    }
    # Only hooks that ran in this run: a backward-only re-run ran no forward hooks.
    # What hook calls saw is summarised in full even in a lazy run: the user may remove the
    # hook before reading it, and then a second run would no longer call it.
    hook_batch = batch
    if batch.source is not None:
        hook_batch = StatsBatch(batch.full_limit, batch.histogram_bins)
    forward_calls = forward.recorder.calls
    full_views = None
    if any(call.shared is not None for call in forward_calls):

        def split(i: int, grad_output: tuple, grad_input: tuple) -> tuple:
            call = forward_calls[i]
            if call.shared is None:
                return grad_input
            return split_shared_inputs(forward.model, call, grad_output, grad_input)

        full_views = _full_hook_views(forward.plans, recorder, leaf_grads, batch, split)
    pending = _PendingRecords(
        node_fields=static.node_fields,  # the static parts' plain fields: they also hold the walk
        call_fields=static.call_fields,
        edges=static.edges,
        pre_hooks_per_call=static.pre_hooks_per_call,
        order=static.execution_order(recorder.order),
        forward_values=(forward.call_inputs, forward.call_outputs, forward.call_outputs_replaced),
        plans=forward.plans,
        recorder=recorder,
        leaf_grads=leaf_grads,
        batch=batch,
        in_keys=in_keys,
        received_keys=received_keys,
        out_grad_keys={n: keys(g) for n, g in recorder.grad_outputs.items()},
        before_out_keys={n: keys(g) for n, g in recorder.grad_outputs_before_edit.items()},
        leaf_keys={n: None if g is None else batch.add(g) for n, g in leaf_grads.items()},
        hidden_keys={i: (keys(gi), keys(go)) for i, (gi, go) in recorder.hidden_seen.items()},
        hook_batch=hook_batch,
        hook_keys=[
            (call, _stats_keys(before, hook_batch), _stats_keys(after, hook_batch))
            for call, before, after in recorder.hook_calls
        ],
        full_views=full_views,
    )
    detached = {n: (None if g is None else g.detach()) for n, g in leaf_grads.items()}
    return Run.pending_record(
        pending,
        {
            "loss": forward.loss.detach().cpu().reshape(()),
            "device": forward.device,
            "root": forward.walk.root,
            "leaf_grads": _ordered_leaves(detached, context, forward),
            "log": [],  # hookviz keeps no copy of what hooks print (hookviz.record.user_hooks)
            "edits": tuple(context.edits),
            "forward_reused": reused,
            "model_ref": weakref.ref(context.user_model),
            "asked_grads": list(context.asked_grads),
            "notes": list(context.notes),
            "loss_differentiates": forward.loss_differentiates,
            "module_aliases": dict(forward.module_aliases),
            "parameter_aliases": dict(forward.parameter_aliases),
            "details": None,
            "local_leaf_grads": None,
            "input_names": list(context.input_names),
        },
    )


def _stats_keys(grads, batch: StatsBatch) -> tuple:
    """Stats keys of grads: tensors are added to the batch; settled ones already have one."""
    # (a list comprehension: tuple() of a generator costs twice as much on these short tuples)
    keys = [None if g is None else g.key if isinstance(g, Settled) else batch.add(g) for g in grads]
    return tuple(keys)


def _full_hook_views(
    plans: list, recorder: BackwardRecorder, leaf_grads: dict, batch: StatsBatch, split=None
) -> list[tuple[bool, tuple, tuple]]:
    """Per module call: (fires, grad_input, grad_output) of a full backward hook, as stats keys.
    ``split(call index, grad_output, grad_input) -> grad_input`` splits a shared input's."""

    def sent(use):
        grads = recorder.grad_inputs.get(use[0])
        return grads[use[1]] if grads is not None and use[1] < len(grads) else None

    def arriving(producer):
        """The gradient that reached output ``output_nr`` of a node (a leaf's: its grad)."""
        node_id, output_nr = producer
        if node_id is None:
            return None
        if node_id in leaf_grads:
            return leaf_grads[node_id]
        grads = recorder.grad_outputs.get(node_id)
        return grads[output_nr] if grads is not None and output_nr < len(grads) else None

    views = []
    for i, plan in enumerate(plans):
        fires, grad_input, grad_output = full_hook_view(plan, sent, arriving, recorder.order.__contains__)
        if fires and split is not None:
            grad_input = split(i, grad_output, grad_input)
        views.append((fires, _stats_keys(grad_input, batch), _stats_keys(grad_output, batch)))
    return views


@dataclass
class _PendingRecords:
    """A run's records, made on first read of one of them (``Run.DEFERRED``): the statistics
    batch computed, then a NodeRecord per Node and a ModuleCall per module call. Holds plain data,
    stats keys and the run's own gradients, never the retained forward (its live graph may be
    freed first)."""

    node_fields: dict[str, dict]
    call_fields: list[dict]
    edges: list
    pre_hooks_per_call: dict[str, int]
    order: dict[str, int]
    forward_values: tuple[list, list, list]
    plans: list
    recorder: BackwardRecorder
    leaf_grads: dict
    batch: StatsBatch
    in_keys: dict
    received_keys: dict
    out_grad_keys: dict
    before_out_keys: dict
    leaf_keys: dict
    hidden_keys: dict
    hook_batch: StatsBatch
    hook_keys: list
    full_views: list | None

    def fill(self, run: Run) -> None:
        """Make the records and set them on ``run`` (once: the run forgets this source)."""
        recorder = self.recorder
        full_views = self.full_views
        if full_views is None:
            full_views = _full_hook_views(self.plans, recorder, self.leaf_grads, self.batch)
        hook_batch = self.hook_batch
        self.batch.compute()
        if hook_batch is not self.batch:
            hook_batch.compute()
        records, hook_records = self.batch.records, hook_batch.records
        in_keys, received_keys = self.in_keys, self.received_keys
        out_grad_keys, before_out_keys = self.out_grad_keys, self.before_out_keys

        hook_calls = []
        for call, before, after in self.hook_keys:
            call.before, call.after = _picked(hook_records, before), _picked(hook_records, after)
            hook_calls.append(call)
        hook_calls.sort(key=lambda c: c.step)
        events = recorder.all_events()
        _attach_post_hooks_to_nodes(events, hook_calls)

        order = self.order
        details = self.batch.source  # a lazy run's: forward values are filled on first read
        nodes: dict[str, NodeRecord] = {}
        post_edits, lazy = recorder.post_edits, details is not None
        for node_id, fields in self.node_fields.items():
            # The record gets its own dict of the template's fields, then its own containers.
            lazy_op = lazy and fields["kind"] in ("op", "leaf")  # a leaf's output: its value
            record = details.pending(NodeRecord, fields) if lazy_op else NodeRecord.from_fields(fields)
            own = record.__dict__
            own["order"] = order.get(node_id)
            own["saved"], own["constants"] = list(fields["saved"]), dict(fields["constants"])
            own["user_hooks"], own["sites"] = list(fields["user_hooks"]), list(fields["sites"])
            if fields["kind"] == "op":
                own["grad_outputs"] = _picked(records, out_grad_keys.get(node_id, ()))
                own["grad_inputs"] = _picked(records, in_keys.get(node_id, ()))
                if node_id in post_edits and node_id in received_keys:
                    own["grad_inputs_before_edit"] = _picked(records, received_keys[node_id])
                if node_id in before_out_keys:
                    own["grad_outputs_before_edit"] = _picked(records, before_out_keys[node_id])
                if lazy_op:
                    del own["output"]  # filled with the other details on first read
            else:
                key = self.leaf_keys.get(node_id)
                own["grad_outputs"] = (records[key],) if key is not None else ()
            nodes[node_id] = record

        # A module's edit hooks fire once per call, last call first.
        module_edits: dict[tuple[str, str], list[HookCall]] = {}
        for hook_call in hook_calls:
            if hook_call.kind == "edit" and hook_call.node is None:
                kind = "grad_input" if hook_call.name.startswith("grad_input") else "grad_output"
                module_edits.setdefault((hook_call.where, kind), []).append(hook_call)
        # A full backward hook sees grad_output after the module's full backward pre-hooks.
        user_pre_hooks: dict[str, list[HookCall]] = {}
        for hook_call in hook_calls:
            if hook_call.kind == "full backward pre-hook":
                user_pre_hooks.setdefault(hook_call.where, []).append(hook_call)
        first_legacy: dict[str, HookCall] = {}  # output Node -> the first legacy hook call on it
        for hook_call in hook_calls:
            if hook_call.kind == "legacy backward hook":
                first_legacy.setdefault(hook_call.node, hook_call)
        call_inputs, call_outputs, call_outputs_replaced = self.forward_values
        hidden_keys = self.hidden_keys
        calls = []
        for i, fields in enumerate(self.call_fields):
            module, output_node = fields["module"], fields["output_node"]
            record = details.pending(ModuleCall, fields) if lazy else ModuleCall.from_fields(fields)
            own = record.__dict__
            own["user_hooks"] = list(fields["user_hooks"])
            if not lazy:
                own["inputs"], own["output"] = call_inputs[i], call_outputs[i]
                own["output_replaced"] = call_outputs_replaced[i]
            if i in hidden_keys:  # the legacy hook hangs on a full hook's identity Node
                own["legacy_grad_input"] = _picked(records, hidden_keys[i][0])
                own["legacy_grad_output"] = _picked(records, hidden_keys[i][1])
            elif output_node is not None and nodes[output_node].kind == "op":
                legacy = first_legacy.get(output_node)
                own["legacy_grad_input"] = (
                    legacy.before if legacy else _picked(records, received_keys.get(output_node, ()))
                )
                own["legacy_grad_output"] = nodes[output_node].grad_outputs
            fires, input_keys, output_keys = full_views[i]
            grad_input, grad_output = _picked(records, input_keys), _picked(records, output_keys)
            if fires and user_pre_hooks.get(module):
                fired = user_pre_hooks[module]
                grad_output = fired[-1].after  # the last pre-hook of the last call still recorded
                del fired[-self.pre_hooks_per_call.get(module, 1) :]
            if module_edits.get((module, "grad_output")):
                own["grad_output_before_edit"] = grad_output
                grad_output = module_edits[(module, "grad_output")].pop().after
            if module_edits.get((module, "grad_input")):
                own["grad_input_before_edit"] = grad_input
                grad_input = module_edits[(module, "grad_input")].pop().after
            own["full_hook_fires"], own["grad_input"], own["grad_output"] = fires, grad_input, grad_output
            calls.append(record)
        run.settle(edges=list(self.edges), nodes=nodes, calls=calls, events=events, hook_calls=hook_calls)


class _StaticParts:
    """What every run on one retained forward shares, worked out by its first run: each record's
    fields that only the forward decides, the user's hooks (a run on a retained forward has the
    hooks its forward had: :meth:`hookviz.record.session.Session.run` starts a fresh forward when they
    change), the edges, and the execution order of the last Node order seen."""

    def __init__(self, graph, user_model: torch.nn.Module):
        walk, forward_calls = graph.walk, graph.recorder.calls
        user_modules = user_module_hooks(user_model)
        user_tensors = user_tensor_hooks(graph.leaves)
        parameters = {*graph.parameter_names, *graph.parameter_aliases}
        ran = {call.module for call in forward_calls}
        self.node_fields: dict[str, dict] = {}
        output_counts = forward_output_counts(walk.nodes.values())
        for node in walk.nodes.values():
            call = forward_calls[node.call] if node.call is not None else None
            module = call.module if call is not None else _leaf_module(node.id, node.kind, parameters, ran)
            fields = {
                "id": node.id,
                "op": node.op,
                "kind": node.kind,
                "module": module,
                "module_call": call.call if call is not None else 0,
                "order": None,
                "output": node.output,
                "grad_outputs": (),
                "grad_inputs": (),
                "grad_inputs_before_edit": None,
                "grad_outputs_before_edit": None,
                # Each run's record gets lists of its own; the template, kept as long as the
                # forward, holds tuples, which the garbage collector stops tracking.
                "saved": node.saved,
                "constants": node.constants,
                "user_hooks": (),
                "sites": ("grad",) if node.id in graph.leaves else (),
            }
            if node.kind == "op":
                fields["sites"] = _op_sites(tuple(slot for slot, _, _ in node.inputs), output_counts[node.id])
            else:
                fields["user_hooks"] = tuple(user_tensors.get(node.id, ()))
            self.node_fields[node.id] = fields
        self.pre_hooks_per_call = {
            name: sum(h.kind == "full backward pre-hook" for h in hooks)
            for name, hooks in user_modules.items()
        }
        self.call_fields: list[dict] = []
        for i, state in enumerate(forward_calls):
            output_node = None
            if state.legacy is not None and state.legacy.grad_fn is not None:
                fn, _ = resolve_hidden(state.legacy.grad_fn, state.legacy.output_nr)
                output_node = walk.node_id(fn)
            module_hooks = tuple(user_modules.get(state.module, ()))
            self.call_fields.append(
                {
                    "module": state.module,
                    "call": state.call,
                    "type": state.type,
                    "full_hook_fires": True,
                    "grad_input": (),
                    "grad_output": (),
                    "grad_input_before_edit": None,
                    "grad_output_before_edit": None,
                    "legacy_grad_input": (),
                    "legacy_grad_output": (),
                    "output_node": output_node,
                    "user_hooks": module_hooks,
                    "in_place": state.in_place,
                    "output_changed_later": state.output_changed_later,
                    "output_requires_grad": any(
                        e is not None and e.requires_grad for e in state.returned + (state.replaced or [])
                    ),
                    "grad_enabled": state.grad_enabled,
                    "output_kind_hookable": state.full_hook_fires,
                    "shared_inputs": graph.plans[i].shared_inputs,
                }
            )
            if output_node in self.node_fields and state.call == 0:
                self.node_fields[output_node]["user_hooks"] += tuple(
                    h for h in module_hooks if h.kind == "legacy backward hook"
                )
        for _, _, wrapper in graph.recorder.intermediate_hooks:
            if wrapper.node in self.node_fields:
                hook = HookInfo("tensor hook", wrapper.name, wrapper.where)
                self.node_fields[wrapper.node]["user_hooks"] += (hook,)
        self.edges = [
            (producer, node.id, slot) for node in walk.nodes.values() for slot, producer, _ in node.inputs
        ]
        self._walk = walk
        self._order_seen: tuple | None = None
        self._order: dict[str, int] = {}

    def execution_order(self, order: dict[str, int]) -> dict[str, int]:
        """:func:`_execution_order` of ``order``, worked out again only when it changed."""
        seen = tuple(order)
        if seen != self._order_seen:
            self._order_seen, self._order = seen, _execution_order(order, self._walk)
        return self._order


@functools.cache
def _op_sites(slots: tuple[int, ...], outputs: int) -> tuple[str, ...]:
    """The editable slots of an op Node whose ``grad_inputs`` reach the graph at ``slots`` (few
    patterns recur over a whole graph, so each is spelled once)."""
    return (
        *(f"grad_inputs[{slot}]" for slot in slots),
        *(f"grad_outputs[{i}]" for i in range(outputs)),
        "grad",
    )


def _picked(records: list, keys) -> tuple:
    """The records at ``keys`` of a computed batch (None stays None)."""
    return tuple([None if k is None else records[k] for k in keys])


def _attach_post_hooks_to_nodes(events: list[Event], hook_calls: list[HookCall]) -> None:
    """A legacy module hook is a post-hook of the module's last Node; PyTorch runs it just before
    hookviz's own post-hook there, so it belongs to the next Node event."""
    next_node = {}
    upcoming = None
    for event in reversed(events):
        if event.kind == "node":
            upcoming = event.node
        next_node[event.step] = upcoming
    for call in hook_calls:
        if call.kind == "legacy backward hook" and call.node is None:
            call.node = next_node.get(call.step)
    by_step = {c.step: c for c in hook_calls}
    for event in events:
        if event.kind == "user_hook" and event.node is None and event.step in by_step:
            event.node = by_step[event.step].node


def _execution_order(order: dict[str, int], walk: Walk) -> dict[str, int]:
    """Positions in backward order. Leaves (AccumulateGrad Nodes, which ``autograd.grad`` does not
    execute) are placed right after their last consumer, where the engine would run them."""
    last_consumer: dict[str, int] = {}
    for node in walk.nodes.values():
        for _, producer, _ in node.inputs:
            if walk.nodes[producer].kind != "op" and node.id in order:
                last_consumer[producer] = max(last_consumer.get(producer, -1), order[node.id])
    keyed = [(position, 0, node_id) for node_id, position in order.items()]
    keyed += [(position, 1, node_id) for node_id, position in last_consumer.items()]
    return {node_id: i for i, (_, _, node_id) in enumerate(sorted(keyed))}


def _leaf_module(node_id: str, kind: str, parameters: set[str], ran: set[str]) -> str:
    """The module a leaf belongs to: a parameter's layer (:func:`hookviz.analysis.gradient_stats.
    module_of`, the one rule, with the modules that ran); forward inputs belong to the root. A Node
    made outside every module call belongs to the loss function."""
    if kind == "op":
        return LOSS_MODULE
    if node_id not in parameters:
        return ""
    return module_of(node_id, ran)


def _ordered_leaves(leaf_grads: dict, context: RunContext, graph) -> dict:
    inputs = [n for n in context.input_names if n in leaf_grads]
    parameters = [n for n in graph.parameter_names if n in leaf_grads]
    listed = {*inputs, *parameters}  # a set: a model has thousands of parameters
    rest = [n for n in leaf_grads if n not in listed]
    return {n: leaf_grads[n] for n in [*inputs, *parameters, *rest]}
