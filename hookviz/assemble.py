"""Turning the live records of one forward + backward into a plain :class:`~hookviz.run.Run`.

The session's recorders hold live objects (autograd Nodes, gradients or their settled stand-ins,
hook calls); :class:`RunAssembler` summarises every tensor in one batch and builds the records,
the module views (full and legacy backward hook), the event order and the networkx graph.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING

import networkx as nx

from hookviz.capture import BackwardRecorder, CallState, user_module_hooks, user_tensor_hooks
from hookviz.graph import Walk, _resolve
from hookviz.run import LOSS_MODULE, Event, HookCall, ModuleCall, NodeRecord, Run
from hookviz.stats import Settled, StatsBatch

if TYPE_CHECKING:
    from hookviz.session import Session, _Forward


class RunAssembler:
    """Turns the live records of one backward (and its forward) into a plain :class:`Run`."""

    def __init__(self, session: Session, graph: _Forward, recorder: BackwardRecorder, leaf_grads, reused,
                 batch: StatsBatch):
        self.session, self.graph, self.recorder = session, graph, recorder
        self.leaf_grads, self.reused, self.batch = leaf_grads, reused, batch

    def _keys(self, grads) -> tuple:
        """Stats keys of grads: tensors are added to the batch; settled ones already have one."""
        return tuple(
            None if g is None else g.key if isinstance(g, Settled) else self.batch.add(g) for g in grads
        )

    def _records(self, keys) -> tuple:
        records = self.batch.records
        return tuple(None if k is None else records[k] for k in keys)

    def _arriving(self, node_id: str, output_nr: int):
        """The gradient that reached output ``output_nr`` of a node (a leaf's: its grad)."""
        if node_id is None:
            return None
        if node_id in self.leaf_grads:
            return self.leaf_grads[node_id]
        grads = self.recorder.grad_outputs.get(node_id)
        return grads[output_nr] if grads is not None and output_nr < len(grads) else None

    def _full_grad_input(self, call: CallState) -> tuple:
        """What a full backward hook's grad_input would be: per positional input, the gradient
        flowing into it from the Nodes this call made (summed when it is used several times)."""
        result = []
        for i in range(len(call.inputs)):
            consumers = self.graph.input_consumers.get((call.index, i))
            if consumers is None:  # not a tensor that requires grad
                result.append(None)
                continue
            total = None
            for consumer, slot in consumers:
                grads = self.recorder.grad_inputs.get(consumer)
                grad = grads[slot] if grads is not None else None
                if grad is not None:
                    # several consumers: tensors (kept whole for this sum); one: tensor or Settled
                    total = grad if total is None else total + grad
            result.append(total)
        return tuple(result)

    def build(self) -> Run:
        graph, recorder, walk = self.graph, self.recorder, self.graph.walk
        forward_calls = graph.recorder.calls
        in_keys = {n: self._keys(g) for n, g in recorder.grad_inputs.items()}
        received_keys = {n: self._keys(g) for n, g in recorder.received_grad_inputs.items()}
        out_grad_keys = {n: self._keys(g) for n, g in recorder.grad_outputs.items()}
        before_out_keys = {n: self._keys(g) for n, g in recorder.grad_outputs_before_edit.items()}
        leaf_keys = {n: None if g is None else self.batch.add(g) for n, g in self.leaf_grads.items()}
        # Only hooks that ran in this run: a backward-only re-run ran no forward hooks.
        hook_keys = [(call, self._keys(before), self._keys(after)) for call, before, after in recorder.hook_calls]
        full_input_keys = [self._keys(self._full_grad_input(call)) for call in forward_calls]
        full_output_keys = [
            self._keys([self._arriving(*self.graph.producer(e.tensor, e.grad_fn, e.output_nr)) for e in call.outputs])
            for call in forward_calls
        ]
        self.batch.compute()
        records = self.batch.records

        hook_calls = []
        for call, before, after in hook_keys:
            call.before, call.after = self._records(before), self._records(after)
            hook_calls.append(call)
        hook_calls.sort(key=lambda c: c.step)
        events = sorted(recorder.events, key=lambda e: e.step)
        _attach_post_hooks_to_nodes(events, hook_calls)

        order = _execution_order(recorder.order, walk)
        user_modules = user_module_hooks(self.session.model)
        user_tensors = user_tensor_hooks(self.session._tensor_hook_targets(graph))
        parameters = {name for name, _ in graph.model.named_parameters(remove_duplicate=False)}
        nodes: dict[str, NodeRecord] = {}
        for node in walk.nodes.values():
            call_index = graph.node_call.get(node.id)
            call = forward_calls[call_index] if call_index is not None else None
            record = NodeRecord(
                id=node.id, op=node.op, kind=node.kind,
                module=call.module if call is not None else _leaf_module(node.id, node.kind, parameters),
                module_call=call.call if call is not None else 0,
                order=order.get(node.id), output=graph.forward_records.get(node.id),
                saved=graph.saved.get(node.id, []),
            )
            if node.kind == "op":
                record.grad_outputs = self._records(out_grad_keys.get(node.id, ()))
                record.grad_inputs = self._records(in_keys.get(node.id, ()))
                if node.id in recorder.post_edits and node.id in received_keys:
                    record.grad_inputs_before_edit = self._records(received_keys[node.id])
                if node.id in before_out_keys:
                    record.grad_outputs_before_edit = self._records(before_out_keys[node.id])
                outputs = len(node.fn._input_metadata)
                record.sites = [f"grad_inputs[{slot}]" for slot, _, _ in node.inputs] + [
                    f"grad_outputs[{i}]" for i in range(outputs)
                ] + ["grad"]
            else:
                key = leaf_keys.get(node.id)
                record.grad_outputs = (records[key],) if key is not None else ()
                record.sites = ["grad"] if node.id in graph.leaves else []
                record.user_hooks = list(user_tensors.get(node.id, []))
            nodes[node.id] = record

        # The full backward hook of a module with grad_input edits fires once per call, last call first.
        module_edits: dict[str, list[HookCall]] = {}
        for hook_call in hook_calls:
            if hook_call.kind == "edit" and hook_call.node is None:
                module_edits.setdefault(hook_call.where, []).append(hook_call)
        calls = []
        for i, state in enumerate(forward_calls):
            output_node = None
            if state.outputs:
                fn, nr = _resolve(state.outputs[0].grad_fn, state.outputs[0].output_nr)
                output_node = walk.node_id(fn) if fn is not None else None
            legacy_in, legacy_out = (), ()
            if output_node is not None and output_node in nodes and nodes[output_node].kind == "op":
                first_legacy = next((h for h in hook_calls if h.kind == "legacy backward hook"
                                     and h.node == output_node), None)
                legacy_in = first_legacy.before if first_legacy else self._records(received_keys.get(output_node, ()))
                legacy_out = nodes[output_node].grad_outputs
            module_hooks = [h for h in user_modules.get(state.module, [])]
            grad_input, grad_input_before_edit = self._records(full_input_keys[i]), None
            if module_edits.get(state.module):
                grad_input_before_edit, grad_input = grad_input, module_edits[state.module].pop().after
            calls.append(ModuleCall(
                module=state.module, call=state.call, type=state.type,
                inputs=graph.call_inputs[i], output=graph.call_outputs[i],
                grad_input=grad_input, grad_input_before_edit=grad_input_before_edit,
                grad_output=self._records(full_output_keys[i]),
                legacy_grad_input=legacy_in, legacy_grad_output=legacy_out,
                output_node=output_node, user_hooks=module_hooks,
            ))
            if output_node in nodes and state.call == 0:
                nodes[output_node].user_hooks.extend(
                    h for h in module_hooks if h.kind == "legacy backward hook"
                )

        edited = {h.node for h in hook_calls if h.kind == "edit" and h.node}
        leaf_grads = {n: (None if g is None else g.detach()) for n, g in self.leaf_grads.items()}
        return Run(
            loss=graph.loss.detach().cpu().reshape(()),
            device=graph.device,
            graph=_networkx_graph(walk, nodes, edited),
            nodes=nodes, root=walk.root, leaf_grads=_ordered_leaves(leaf_grads, self.session, graph),
            calls=calls, events=events, hook_calls=hook_calls, log=list(recorder.log),
            edits=tuple(self.session.edits), forward_reused=self.reused,
            model_ref=weakref.ref(self.session.model),
        )


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


def _leaf_module(node_id: str, kind: str, parameters: set[str]) -> str:
    """The module a leaf belongs to: a parameter's owner; forward inputs belong to the root."""
    if kind == "op":
        return LOSS_MODULE
    return node_id.rpartition(".")[0] if node_id in parameters else ""


def _ordered_leaves(leaf_grads: dict, session: Session, graph: _Forward) -> dict:
    inputs = [n for n in session._input_names if n in leaf_grads]
    parameters = [n for n, _ in graph.model.named_parameters() if n in leaf_grads]
    rest = [n for n in leaf_grads if n not in inputs and n not in parameters]
    return {n: leaf_grads[n] for n in [*inputs, *parameters, *rest]}


def _norm_of(records) -> float | None:
    norms = [r.norm for r in records if r is not None and r.norm is not None]
    return (sum(n * n for n in norms) ** 0.5) if norms else None


def _networkx_graph(walk: Walk, nodes: dict[str, NodeRecord], edited: set[str]) -> nx.DiGraph:
    """Edges in forward direction (producer -> consumer), attributes for drawing."""
    g = nx.DiGraph()
    for node_id, record in nodes.items():
        records = [*record.grad_outputs, *record.grad_inputs]
        g.add_node(
            node_id, op=record.op, module=record.module, kind=record.kind, order=record.order,
            grad_norm=_norm_of(record.grad_outputs),
            has_nan=any(r is not None and not r.finite for r in records),
            edited=node_id in edited, user_hooks=len(record.user_hooks),
        )
    for node in walk.nodes.values():
        for slot, producer, _ in node.inputs:
            g.add_edge(producer, node.id, slot=slot)
    return g
