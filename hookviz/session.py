"""Session: a model, its inputs, a loss and the user's edits, producing recorded runs.

A run is one forward + backward. The first run of a session, a run on another device, and
``run(forward=True)`` do a fresh forward; any other re-run keeps the retained forward graph and runs
only backward again with the current edits (one backward per round trip). Both give the same
gradients: a fresh forward restores the random-number state of the session's first forward.

Gradients are taken with ``torch.autograd.grad(loss, leaves, retain_graph=True)``, which returns them
instead of accumulating into ``.grad``, so the user's ``.grad`` values are never touched; the run
holds the gradients (``Run.leaf_grad``). With no edits they equal what ``loss.backward()`` puts in
``.grad``, bit for bit (tested).
"""

from __future__ import annotations

import copy
import inspect
from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch.utils import _pytree as pytree

from hookviz.assemble import RunAssembler
from hookviz.capture import (
    BackwardRecorder,
    CallState,
    ForwardRecorder,
    NodePostHook,
    NodePreEditHook,
    RecordingState,
    SavedTensorsRecorder,
    forget_tensors,
    full_backward_hooks,
    wrapped_user_hooks,
)
from hookviz.devices import device_of, resolve_device
from hookviz.edits import Edit
from hookviz.errors import (
    BackwardError,
    EditError,
    ForwardError,
    HookvizError,
    LossError,
    TargetError,
)
from hookviz.graph import Walk, _resolve, saved_tensor_names, walk_graph
from hookviz.run import (
    Event,
    HookCall,
    Run,
    SavedTensor,
    _unknown,
)
from hookviz.stats import (
    DEFAULT_FULL_TENSOR_LIMIT,
    DEFAULT_HISTOGRAM_BINS,
    StatsBatch,
    TensorRecord,
)


@dataclass
class _Forward:
    """A retained forward graph on one device, with what was learnt from it once."""

    device: str
    model: torch.nn.Module
    loss: torch.Tensor
    walk: Walk
    state: RecordingState
    recorder: ForwardRecorder
    leaves: dict[str, torch.Tensor]  # capture name -> tensor passed to autograd.grad
    node_call: dict[str, int | None]
    consumers: dict[tuple[str, int], list[tuple[str, int]]]
    saved: dict[str, list[SavedTensor]]
    hook_signature: tuple
    versions: list[tuple[torch.Tensor, int]]
    full_hook_modules: tuple[str, ...]
    forward_records: dict[str, TensorRecord] = field(default_factory=dict)
    call_inputs: list[dict] = field(default_factory=list)
    call_outputs: list[list] = field(default_factory=list)
    # Derived once per forward in __post_init__:
    leaf_ids: dict[int, str] = field(init=False)  # id(leaf tensor) -> node id
    input_consumers: dict[tuple[int, int], list[tuple[str, int]]] = field(init=False)
    summed_later: frozenset[tuple[str, int]] = field(init=False)

    def __post_init__(self) -> None:
        self.leaf_ids = {id(n.tensor): n.id for n in self.walk.nodes.values() if n.tensor is not None}
        # (call index, positional input) -> (consumer, slot) of the Nodes that call made which use it
        self.input_consumers = {
            (call.index, i): self.internal_consumers(call, edge)
            for call in self.recorder.calls for i, edge in enumerate(call.inputs)
            if edge is not None and edge.requires_grad
        }
        # A module input used by several of the module's own Nodes: its full-hook grad_input is the
        # sum of their grad_inputs, so those are kept whole through backward.
        self.summed_later = frozenset(
            pair for pairs in self.input_consumers.values() if len(pairs) > 1 for pair in pairs
        )

    def producer(self, tensor: torch.Tensor | None, fn, output_nr: int) -> tuple[str | None, int]:
        """The graph node (and output) that produced ``tensor`` when a hook saw it."""
        if fn is None:
            return self.leaf_ids.get(id(tensor)), 0
        fn, output_nr = _resolve(fn, output_nr)
        return self.walk.node_id(fn), output_nr

    def internal_consumers(self, call: CallState, edge) -> list[tuple[str, int]]:
        """(consumer, slot) of the Nodes made by ``call`` (or calls inside it) that use ``edge``."""
        producer, output_nr = self.producer(edge.tensor, edge.grad_fn, edge.output_nr)
        return [
            (consumer, slot) for consumer, slot in self.consumers.get((producer, output_nr), [])
            if self.node_call.get(consumer) is not None and call.index <= self.node_call[consumer] <= call.end
        ]


def _hook_signature(model: torch.nn.Module, tensors: dict[str, torch.Tensor]) -> tuple:
    """Which user hooks exist now (to notice hooks added or removed since a forward)."""
    modules = tuple(
        (name, attribute, tuple(getattr(m, attribute).keys()))
        for name, m in model.named_modules()
        for attribute in ("_forward_pre_hooks", "_forward_hooks", "_backward_pre_hooks", "_backward_hooks")
        if getattr(m, attribute)
    )
    tensor_hooks = tuple((n, tuple((t._backward_hooks or {}).keys())) for n, t in tensors.items())
    return modules, tensor_hooks


class Session:
    """A model + inputs + loss + edits; :meth:`run` records a forward + backward as a :class:`Run`.

    Args:
        model: any ``torch.nn.Module``. It is used in the mode (train/eval) it is in.
        args: positional inputs of ``model.forward`` (a tuple, or one tensor).
        kwargs: keyword inputs of ``model.forward``.
        loss_fn: ``loss_fn(output) -> Tensor`` with one element; None when the model's output is
            already a one-element tensor.
        input_grads: when True (default), floating-point input tensors that do not require grad
            are replaced, for the run only, by a detached copy that does, so their gradients are
            recorded (the user's tensors keep their flags).
        full_tensor_limit: tensors with at most this many elements are kept whole in the run;
            larger ones keep statistics and a histogram.
        histogram_bins: bins of those histograms (0: none).

    Raises:
        HookvizError: ``model`` is not a module.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        args=(),
        kwargs: dict | None = None,
        loss_fn: Callable | None = None,
        *,
        input_grads: bool = True,
        full_tensor_limit: int = DEFAULT_FULL_TENSOR_LIMIT,
        histogram_bins: int = DEFAULT_HISTOGRAM_BINS,
    ):
        if not isinstance(model, torch.nn.Module):
            raise HookvizError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        self.model = model
        self.args = args if isinstance(args, tuple) else tuple(args) if isinstance(args, list) else (args,)
        self.kwargs = dict(kwargs or {})
        self.loss_fn = loss_fn
        self.input_grads = input_grads
        self.full_tensor_limit = full_tensor_limit
        self.histogram_bins = histogram_bins
        self.edits: list[Edit] = []
        self.last_run: Run | None = None
        self.baseline: Run | None = None
        self.home_device = device_of(
            model, [t for t in pytree.tree_leaves((self.args, self.kwargs)) if isinstance(t, torch.Tensor)]
        )
        self._input_names = self._name_inputs()
        self._forward: _Forward | None = None
        self._rng_states: dict[str, torch.Tensor] = {}

    # ------------------------------------------------------------------ inputs

    def _name_inputs(self) -> dict[str, tuple]:
        """Pytree path of every input tensor, named after ``forward``'s parameters."""
        try:
            bound = inspect.signature(self.model.forward).bind(*self.args, **self.kwargs)
            named = dict(bound.arguments)
        except (TypeError, ValueError):
            named = {f"args[{i}]": a for i, a in enumerate(self.args)} | dict(self.kwargs)
        names = {}
        for argument, value in named.items():
            for path, leaf in pytree.tree_flatten_with_path(value)[0]:
                if isinstance(leaf, torch.Tensor):
                    names[argument + pytree.keystr(path)] = leaf
        return names

    def _prepare_inputs(self, device: str) -> tuple[tuple, dict, dict[str, torch.Tensor]]:
        """Inputs for one forward on ``device``, and the tensors among them by name."""
        moved: dict[int, torch.Tensor] = {}
        by_name: dict[str, torch.Tensor] = {}
        for name, tensor in self._input_names.items():
            prepared = tensor
            if str(tensor.device) != device:
                prepared = tensor.detach().to(device).requires_grad_(tensor.requires_grad)
            if self.input_grads and not prepared.requires_grad and prepared.is_floating_point():
                prepared = prepared.detach().requires_grad_(True)
            moved[id(tensor)] = prepared
            by_name[name] = prepared

        def swap(leaf):
            return moved.get(id(leaf), leaf) if isinstance(leaf, torch.Tensor) else leaf

        args, kwargs = pytree.tree_map(swap, (self.args, self.kwargs))
        return args, kwargs, by_name

    def _model_on(self, device: str) -> torch.nn.Module:
        """The user's model on its own device; a private copy on any other (the user's stays put)."""
        if device == self.home_device:
            return self.model
        return copy.deepcopy(self.model).to(device)

    # ------------------------------------------------------------------ running

    def run(self, device: str | torch.device | None = None, forward: bool = False) -> Run:
        """Record one forward + backward (or only backward, see the module docstring).

        Args:
            device: one of :func:`hookviz.devices`; None = where the model is. On another device
                hookviz runs a copy of the model and of the inputs there; the user's model and
                tensors stay where they are.
            forward: force a fresh forward even when the retained graph could be reused.

        Returns:
            the new :class:`Run`; also ``self.last_run`` (and ``self.baseline`` for the first).

        Raises:
            DeviceError: unknown or unavailable device.
            ForwardError: the model's forward raised (the message names the module).
            LossError: the output is not a one-element tensor that requires grad.
            EditError, ExpressionError: an edit failed at its site.
            BackwardError: backward raised.
        On any error the model, its hooks and ``.grad`` values, the session's edits and
        ``last_run`` are as they were.
        """
        device = self.home_device if device is None else resolve_device(device)
        fresh = forward or self._needs_forward(device)
        cuda = [torch.device(device).index or 0] if device.startswith("cuda") else []
        with torch.random.fork_rng(devices=cuda, device_type="cuda" if cuda else "cuda"):
            if fresh:
                self._release()
                recorder = BackwardRecorder()
                graph = self._do_forward(device, recorder)
            else:
                graph, recorder = self._forward, BackwardRecorder()
            try:
                run = self._do_backward(graph, recorder, reused=not fresh)
            except BackwardError:
                if fresh:
                    raise
                # The retained graph went stale (e.g. a parameter changed in place): start over.
                self._release()
                recorder = BackwardRecorder()
                graph = self._do_forward(device, recorder)
                run = self._do_backward(graph, recorder, reused=False)
        self._forward = graph
        self.last_run = run
        if self.baseline is None:
            self.baseline = run
        return run

    def _needs_forward(self, device: str) -> bool:
        graph = self._forward
        if graph is None or graph.device != device:
            return True
        if graph.full_hook_modules != self._full_hook_modules():
            return True
        if any(t._version != v for t, v in graph.versions):
            return True
        return _hook_signature(self.model, self._tensor_hook_targets(graph)) != graph.hook_signature

    def _full_hook_modules(self) -> tuple[str, ...]:
        return tuple(sorted({e.target for e in self.edits if e.slot.name == "grad_input"}))

    def _tensor_hook_targets(self, graph: _Forward) -> dict[str, torch.Tensor]:
        return graph.leaves

    def release(self) -> None:
        """Free the retained forward graph (the next run does a fresh forward)."""
        self._release()

    def _release(self) -> None:
        self._forward = None

    def _restore_rng(self, device: str) -> None:
        keys = ["cpu"] + ([device] if device.startswith("cuda") else [])
        for key in keys:
            if key not in self._rng_states:
                self._rng_states[key] = (
                    torch.get_rng_state() if key == "cpu" else torch.cuda.get_rng_state(key)
                )
            elif key == "cpu":
                torch.set_rng_state(self._rng_states[key])
            else:
                torch.cuda.set_rng_state(self._rng_states[key], key)

    def _do_forward(self, device: str, recorder: BackwardRecorder) -> _Forward:
        model = self._model_on(device)
        args, kwargs, inputs = self._prepare_inputs(device)
        leaf_names = {id(t): n for n, t in inputs.items() if t.grad_fn is None}
        for name, parameter in model.named_parameters(remove_duplicate=False):
            leaf_names.setdefault(id(parameter), name)
        boundary_names = {(id(t.grad_fn), t.output_nr): n for n, t in inputs.items() if t.grad_fn is not None}
        named_leaves = {n: t for n, t in inputs.items() if t.requires_grad} | {
            n: p for n, p in model.named_parameters() if p.requires_grad
        }
        state = RecordingState()
        full_modules = self._full_hook_modules()
        self._restore_rng(device)
        forward_recorder = ForwardRecorder(model)
        saved_recorder = SavedTensorsRecorder()
        state.active = recorder
        try:
            with torch.enable_grad(), wrapped_user_hooks(state, model, named_leaves), \
                    full_backward_hooks(state, model, list(full_modules)):
                probe = torch.zeros((), requires_grad=True) * 1
                forward_start = probe.grad_fn._sequence_nr() + 1
                with forward_recorder, saved_recorder.hooks():
                    output = self._call_model(model, args, kwargs, forward_recorder)
                    loss = self._loss(output)
        finally:
            state.active = None
        walk = walk_graph(loss.grad_fn, forward_start, leaf_names, boundary_names)
        leaves = {}
        for node in walk.nodes.values():
            if node.kind == "leaf":
                leaves[node.id] = node.tensor
            elif node.kind == "boundary" and node.id in inputs:
                leaves[node.id] = inputs[node.id]
        for node in walk.nodes.values():
            if node.kind == "op":
                node.fn.register_hook(NodePostHook(state, node.id, node.op))
        forward_records, call_inputs, call_outputs = self._summarise_forward(walk, forward_recorder)
        forget_tensors(forward_recorder)
        graph = _Forward(
            device=device, model=model, loss=loss, walk=walk, state=state, recorder=forward_recorder,
            leaves=leaves, node_call=self._node_calls(walk, forward_recorder),
            consumers=_consumers(walk), saved=_saved_tensors(walk, saved_recorder),
            hook_signature=_hook_signature(self.model, leaves),
            versions=[(t, t._version) for t in leaves.values()],
            full_hook_modules=full_modules, forward_records=forward_records,
            call_inputs=call_inputs, call_outputs=call_outputs,
        )
        return graph

    def _summarise_forward(self, walk: Walk, recorder: ForwardRecorder):
        """Statistics of every op's output and of what module hooks saw, right after forward
        (so the activations need not be held through backward)."""
        batch = StatsBatch(self.full_tensor_limit, self.histogram_bins)
        output_keys = {
            walk.id_of[fn_id]: batch.add(tensor, version)
            for fn_id, (tensor, version) in recorder.outputs.items() if fn_id in walk.id_of
        }
        input_keys = [_call_input_keys(batch, call) for call in recorder.calls]
        out_keys = [[batch.add(e.tensor, e.version) for e in call.outputs] for call in recorder.calls]
        records = batch.compute()
        return (
            {n: records[k] for n, k in output_keys.items()},
            [{name: records[k] if isinstance(k, int) else k for name, k in keys.items()} for keys in input_keys],
            [[records[k] for k in keys] for keys in out_keys],
        )

    def _call_model(self, model, args, kwargs, recorder: ForwardRecorder):
        try:
            return model(*args, **kwargs)
        except HookvizError:
            raise
        except Exception as error:
            where = recorder.current_module
            label = "the root module" if where == "" else f"module {where!r}"
            module = model.get_submodule(where) if where is not None else model
            if "BackwardHookFunction" in str(error) and "inplace" in str(error).lower():
                raise BackwardError(
                    f"{label} ({type(module).__name__}) modifies a tensor in place that a full backward "
                    f"hook wraps ({error}); full backward hooks cannot handle in-place ops such as "
                    "ReLU(inplace=True): set inplace=False on that module, or edit a node's "
                    "grad_inputs instead of a module's grad_input"
                ) from error
            raise ForwardError(
                f"forward of {label} ({type(module).__name__}) raised {type(error).__name__}: {error}",
                module=where,
            ) from error

    def _loss(self, output) -> torch.Tensor:
        if self.loss_fn is not None:
            try:
                loss = self.loss_fn(output)
            except Exception as error:
                raise LossError(f"loss_fn raised {type(error).__name__}: {error}") from error
            source = "loss_fn(output)"
        else:
            loss, source = output, "the model's output"
        if not isinstance(loss, torch.Tensor):
            raise LossError(
                f"{source} is a {type(loss).__name__}, not a tensor; pass loss_fn=... that returns "
                "a scalar tensor, e.g. loss_fn=lambda out: out.sum()"
            )
        if loss.numel() != 1:
            fix = "return a scalar, e.g. add .mean()" if self.loss_fn else (
                "pass loss_fn=... that reduces it to a scalar, e.g. loss_fn=lambda out: out.sum()"
            )
            raise LossError(f"{source} has shape {list(loss.shape)}, not a scalar; {fix}")
        if not loss.requires_grad or loss.grad_fn is None:
            raise LossError(
                f"{source} does not require grad, so there is no backward to record: no parameter or "
                "input requires grad, or forward ran under torch.no_grad(); set requires_grad=True "
                "on the parameters or inputs"
            )
        return loss

    def _node_calls(self, walk: Walk, recorder: ForwardRecorder) -> dict[str, int | None]:
        """The module call that made each op Node (seen ones directly; others by creation order)."""
        seen = sorted(
            (node.sequence_nr, recorder.made_by[id(node.fn)])
            for node in walk.nodes.values()
            if node.kind == "op" and id(node.fn) in recorder.made_by
        )
        sequence = [s for s, _ in seen]
        calls: dict[str, int | None] = {}
        for node in walk.nodes.values():
            if node.kind != "op":
                calls[node.id] = None
            elif id(node.fn) in recorder.made_by:
                calls[node.id] = recorder.made_by[id(node.fn)]
            else:
                # Nodes made inside a composite op come just before the op's output Node.
                at = bisect_left(sequence, node.sequence_nr)
                calls[node.id] = seen[at][1] if at < len(seen) else None
        return calls

    # ------------------------------------------------------------------ backward

    def _resolve_edits(self, graph: _Forward, recorder: BackwardRecorder) -> dict[str, list[Edit]]:
        """Sort the session's edits into the recorder's tables; returns the leaf edits."""
        leaf_edits: dict[str, list[Edit]] = {}
        for edit in self.edits:
            name, index = edit.slot.name, edit.slot.index
            if name == "grad_inputs":
                recorder.post_edits.setdefault(edit.target, []).append(edit)
            elif name == "grad_outputs":
                recorder.pre_edits.setdefault(edit.target, []).append(edit)
            elif name == "grad":
                node = graph.walk.nodes.get(edit.target)
                if node is not None and node.kind == "op":
                    recorder.pre_edits.setdefault(edit.target, []).append(edit.on_grad_outputs(edit.target, 0))
                else:
                    leaf_edits.setdefault(edit.target, []).append(edit)
            elif name == "grad_input":
                recorder.module_input_edits.setdefault(edit.target, []).append(edit)
            else:  # grad_output: the gradient arriving at the module's output = a Node pre-hook
                for call in graph.recorder.calls:
                    if call.module != edit.target:
                        continue
                    if index >= len(call.outputs):
                        raise TargetError(_slot_error(edit, f"module {edit.target!r} has {len(call.outputs)} output tensor(s)"))
                    fn, output_nr = _resolve(call.outputs[index].grad_fn, call.outputs[index].output_nr)
                    node_id = graph.walk.node_id(fn) if fn is not None else None
                    if node_id is None or graph.walk.nodes[node_id].kind != "op":
                        raise EditError(f"output {index} of module {edit.target!r} does not come from an op in the graph (it does not require grad, or is an input passed through), so it has no grad_output to edit")
                    recorder.pre_edits.setdefault(node_id, []).append(edit.on_grad_outputs(node_id, output_nr))
        return leaf_edits

    def _do_backward(self, graph: _Forward, recorder: BackwardRecorder, reused: bool) -> Run:
        leaf_edits = self._resolve_edits(graph, recorder)
        batch = StatsBatch(self.full_tensor_limit, self.histogram_bins)
        recorder.settle, recorder.keep = batch.settle, graph.summed_later
        handles = [
            graph.walk.nodes[node_id].fn.register_prehook(NodePreEditHook(recorder, node_id))
            for node_id in recorder.pre_edits
        ]
        names = list(graph.leaves)
        graph.state.active = recorder
        try:
            with wrapped_user_hooks(graph.state, graph.model, self._tensor_hook_targets(graph)):
                grads = torch.autograd.grad(
                    graph.loss, [graph.leaves[n] for n in names], retain_graph=True, allow_unused=True
                )
        except HookvizError:
            raise
        except RuntimeError as error:
            raise BackwardError(f"backward raised: {error}") from error
        finally:
            graph.state.active = None
            for handle in handles:
                handle.remove()
        leaf_grads = {}
        for name, grad in zip(names, grads):
            edits = leaf_edits.get(name, [])
            for edit in edits:
                before = grad
                grad = edit.apply(grad)
                step = next(recorder.steps)
                recorder.events.append(Event(step, "edit", name, f"{name}: grad <- {edit.source}"))
                recorder.hook_calls.append(
                    (HookCall(step, "edit", f"grad <- {edit.source}", name, returned=True, node=name), (before,), (grad,))
                )
            leaf_grads[name] = grad
        return RunAssembler(self, graph, recorder, leaf_grads, reused, batch).build()

    # ------------------------------------------------------------------ edits

    def edit(self, target: str, slot: str, transform) -> Edit:
        """Attach ``transform`` to a hook site; it takes effect on the next :meth:`run`.

        Args:
            target: a node id (``"SubBackward0_0"``), a leaf name (``"x"``, ``"fc1.weight"``) or a
                module's qualified name (``""`` = the root module).
            slot: ``"grad_inputs[i]"`` / ``"grad_outputs[i]"`` (node), ``"grad"`` (leaf or node),
                ``"grad_input[i]"`` / ``"grad_output[i]"`` (module).
            transform: an expression over ``grad`` in hookviz's safe language (see
                :mod:`hookviz.expr`), or a callable ``grad -> Tensor``.

        Returns:
            the :class:`~hookviz.edits.Edit` (also appended to ``self.edits``).

        Raises:
            TargetError: unknown target or slot. ExpressionError: malformed or forbidden
            expression. EditError: the expression gives the wrong shape/dtype for that site.
        A session with no run yet records one first, to know the graph.
        """
        new = Edit.make(target, slot, transform)
        if self.last_run is None:
            self.run()
        self._check_edit(new, self.last_run)
        self.edits.append(new)
        return new

    def _check_edit(self, edit: Edit, run: Run) -> None:
        slot = edit.slot
        if slot.on_module:
            names = run.modules
            if edit.target not in names:
                raise TargetError(_unknown("module", edit.target, names))
            call = run.module_io(edit.target)
            count = len(call.grad_input) if slot.name == "grad_input" else len(call.output)
            if slot.index >= count:
                raise TargetError(_slot_error(edit, f"module {edit.target!r} has {count} {slot.name} entries"))
            records = call.grad_input if slot.name == "grad_input" else call.grad_output
            if slot.name == "grad_input" and records[slot.index] is None:
                raise TargetError(_slot_error(edit, f"input {slot.index} of module {edit.target!r} gets no gradient (not a tensor that requires grad)"))
            if slot.name == "grad_input":
                module = self.model.get_submodule(edit.target)
                if module._is_full_backward_hook is False:
                    raise EditError(
                        f"module {edit.target!r} has a legacy register_backward_hook, and PyTorch does not "
                        "allow a full backward hook beside it, which a grad_input edit needs; edit the "
                        f"grad_inputs of node {call.output_node!r} instead (what the legacy hook edits)"
                    )
            record = records[slot.index] if slot.index < len(records) else None
        else:
            node = run.node(edit.target)
            if str(slot) not in node.sites:
                raise TargetError(_slot_error(
                    edit, f"{node.id} ({node.op}) has the sites {', '.join(node.sites) or 'none'}"
                ))
            if slot.name == "grad_inputs":
                record = node.grad_inputs[slot.index] if slot.index < len(node.grad_inputs) else None
            elif slot.name == "grad_outputs" or node.kind == "op":
                record = node.grad_outputs[slot.index] if slot.index < len(node.grad_outputs) else None
            else:
                record = node.grad_outputs[0] if node.grad_outputs else None
        # Try the transform on a copy of the site's gradient (or zeros of its shape) now, so a wrong
        # shape or dtype fails here, beside the edit, and not in the middle of the next backward.
        if record is not None and record.numel <= 1_000_000:
            sample = record.value.clone() if record.value is not None else torch.zeros(
                record.shape, dtype=getattr(torch, record.dtype)
            )
            edit.apply(sample)

    def remove_edit(self, edit: Edit | str) -> None:
        """Remove an edit (the object or its id). Raises TargetError when it is not active."""
        for i, existing in enumerate(self.edits):
            if existing is edit or existing.id == edit:
                del self.edits[i]
                return
        raise TargetError(_unknown("edit", getattr(edit, "id", edit), [e.id for e in self.edits]))

    def clear_edits(self) -> None:
        """Remove every edit; the next run reproduces the baseline gradients."""
        self.edits.clear()

    def sites(self, target: str) -> list[str]:
        """The editable slots at a node id, leaf name or module name (from the last run)."""
        run = self.last_run or self.run()
        if target in run.nodes:
            return list(run.nodes[target].sites)
        if target in run.modules:
            call = run.module_io(target)
            return [f"grad_input[{i}]" for i, r in enumerate(call.grad_input) if r is not None] + [
                f"grad_output[{i}]" for i in range(len(call.output))
            ]
        raise TargetError(_unknown("node or module", target, [*run.nodes, *run.modules]))

    def edits_as_code(self) -> str:
        """Plain PyTorch hook code that makes the same edits (see :mod:`hookviz.codegen`)."""
        from hookviz.codegen import edits_as_code

        return edits_as_code(self)

    def __repr__(self) -> str:
        return (
            f"Session(model={type(self.model).__name__}, device={self.home_device!r}, "
            f"edits={len(self.edits)}, runs={'none' if self.last_run is None else 'yes'})"
        )


def _slot_error(edit: Edit, detail: str) -> str:
    return f"slot {str(edit.slot)!r} does not exist on {edit.target or '<root module>'!r}: {detail}"


def _consumers(walk: Walk) -> dict[tuple[str, int], list[tuple[str, int]]]:
    """(producer id, output_nr) -> [(consumer id, slot)]: who sends gradient to each output."""
    found: dict[tuple[str, int], list[tuple[str, int]]] = {}
    for node in walk.nodes.values():
        for slot, producer, output_nr in node.inputs:
            found.setdefault((producer, output_nr), []).append((node.id, slot))
    return found


def _saved_tensors(walk: Walk, recorder: SavedTensorsRecorder) -> dict[str, list[SavedTensor]]:
    """What each op Node saved for backward: ``grad_fn._saved_<name>`` names each saved tensor, and
    hookviz's pack hook (which reading the attribute unpacks) gives its shape, dtype, bytes and
    where the user's own pack hook stored it."""
    saved: dict[str, list[SavedTensor]] = {}
    for node in walk.nodes.values():
        if node.kind != "op":
            continue
        entries = []
        for attribute in saved_tensor_names(node.fn):
            try:
                packs = recorder.attribute(node.fn, attribute)
            except RuntimeError:
                continue
            base = attribute.removeprefix("_saved_")
            for i, (shape, dtype, nbytes, stored) in enumerate(packs):
                name = base + (f"[{i}]" if len(packs) > 1 else "")
                entries.append(SavedTensor(name, shape, str(dtype).removeprefix("torch."), nbytes, stored))
        saved[node.id] = entries
    return saved


def _call_input_keys(batch: StatsBatch, call: CallState) -> dict:
    """What a forward pre-hook of ``call`` saw, by ``forward``'s parameter names: stats keys for
    tensors (checked against the version the hook saw), a short repr for anything else."""
    try:
        named = dict(_signature(call.forward).bind(*call.args, **call.kwargs).arguments)
    except (TypeError, ValueError):
        named = {f"args[{i}]": a for i, a in enumerate(call.args)} | dict(call.kwargs)
    seen = {id(e.tensor): e.version for e in call.inputs if e is not None}
    keys: dict = {}
    for name, value in named.items():
        flat = [((), value)] if isinstance(value, torch.Tensor) else pytree.tree_flatten_with_path(value)[0]
        for path, leaf in flat:
            label = name + pytree.keystr(path)
            if isinstance(leaf, torch.Tensor):
                keys[label] = batch.add(leaf, seen.get(id(leaf)))
            else:
                keys[label] = repr(leaf)[:80]
    return keys


_SIGNATURES: dict = {}


def _signature(forward) -> inspect.Signature:
    """``inspect.signature`` of a bound ``forward``, cached per function (it is slow)."""
    function = getattr(forward, "__func__", forward)
    found = _SIGNATURES.get(function)
    if found is None:
        found = _SIGNATURES.setdefault(function, inspect.signature(forward))
    return found
