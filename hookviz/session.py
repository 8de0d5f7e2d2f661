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

import contextlib
import copy
import dataclasses
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch.utils import _pytree as pytree

from hookviz.assemble import RunAssembler
from hookviz.capture import (
    BackwardRecorder,
    CallState,
    ForwardRecorder,
    HiddenNodeProbe,
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
    UnsupportedError,
)
from hookviz.graph import Walk, resolve_hidden, saved_tensor_names, walk_graph
from hookviz.module_views import CallPlan, plan_call
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
    full_hook_modules: tuple[tuple[str, str], ...]
    handles: list = field(default_factory=list)  # hookviz's Node post-hooks, removed by release()
    forward_records: dict[str, TensorRecord] = field(default_factory=dict)
    call_inputs: list[dict] = field(default_factory=list)
    call_outputs: list[list] = field(default_factory=list)
    call_outputs_replaced: list[list | None] = field(default_factory=list)
    # Derived once per forward in __post_init__:
    leaf_ids: dict[int, str] = field(init=False)  # id(leaf tensor) -> node id
    plans: list[CallPlan] = field(init=False)  # per module call: how to rebuild its full hook view
    summed_later: frozenset[tuple[str, int]] = field(init=False)

    def __post_init__(self) -> None:
        self.leaf_ids = {id(n.tensor): n.id for n in self.walk.nodes.values() if n.tensor is not None}
        sequence = {n.id: n.sequence_nr for n in self.walk.nodes.values() if n.kind == "op"}

        def producer_of(edge) -> tuple[str | None, int]:
            return self.producer(edge.tensor, edge.grad_fn, edge.output_nr)

        self.plans = [plan_call(call, producer_of, self.consumers, sequence, self.walk.looked_through)
                      for call in self.recorder.calls]
        # Gradients that a full-hook view adds up are kept whole through backward.
        self.summed_later = frozenset(use for plan in self.plans for use in plan.summed_uses())

    def producer(self, tensor: torch.Tensor | None, fn, output_nr: int) -> tuple[str | None, int]:
        """The graph node (and output) that produced ``tensor`` when a hook saw it."""
        if fn is None:
            return self.leaf_ids.get(id(tensor)), 0
        fn, output_nr = resolve_hidden(fn, output_nr)
        return self.walk.node_id(fn), output_nr

    def remove_hooks(self) -> None:
        """Remove hookviz's Node hooks from the retained graph (idempotent)."""
        for handle in self.handles:
            handle.remove()
        self.handles.clear()


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
        input_grads: opt-in (default False). When True, floating-point input tensors that do not
            require grad get a copy that does, for the run only, so their gradients are recorded;
            the run marks them (``Run.asked_grads``), since the model itself never asks for them
            and PyTorch's hooks see None there. By default a run computes exactly what the model
            computes.
        Forward passes get copies of the input tensors that do not require grad, so an in-place
        op in the model never changes the user's data and a fresh forward reproduces the first
        (inputs that require grad are passed as they are: PyTorch refuses in-place ops on them).
        A ``torch.compile``d model is recorded through its original module (``_orig_mod``), run
        eagerly, with a note in ``Run.notes``.
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
        input_grads: bool = False,
        full_tensor_limit: int = DEFAULT_FULL_TENSOR_LIMIT,
        histogram_bins: int = DEFAULT_HISTOGRAM_BINS,
    ):
        if not isinstance(model, torch.nn.Module):
            raise HookvizError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        self.notes: list[str] = []
        if isinstance(getattr(model, "_orig_mod", None), torch.nn.Module):
            self.notes.append(
                f"the model is torch.compile'd: hookviz records its original module "
                f"({type(model._orig_mod).__name__}) run eagerly, since compiled code runs no "
                "per-op hooks; edits apply to these runs, not to the compiled model"
            )
            model = model._orig_mod
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
        self._input_names = name_inputs(self.model.forward, self.args, self.kwargs)
        self._forward: _Forward | None = None
        self._rng_states: dict[str, torch.Tensor] = {}

    # ------------------------------------------------------------------ inputs

    def _prepare_inputs(self, device: str) -> tuple[tuple, dict, dict[str, torch.Tensor]]:
        """Inputs for one forward on ``device``, and the tensors among them by name.

        Tensors that do not require grad are copied (an in-place op in the model must not change
        the user's data); with ``input_grads`` the floating-point ones among them require grad.
        """
        moved: dict[int, torch.Tensor] = {}
        by_name: dict[str, torch.Tensor] = {}
        for name, tensor in self._input_names.items():
            prepared = tensor
            if str(tensor.device) != device:
                prepared = tensor.detach().to(device).requires_grad_(tensor.requires_grad)
            if not prepared.requires_grad:
                if prepared is tensor:
                    with torch.inference_mode(False):  # a normal tensor, even from an inference one
                        prepared = tensor.clone()
                if self.input_grads and (prepared.is_floating_point() or prepared.is_complex()):
                    prepared.requires_grad_(True)
            moved[id(tensor)] = prepared
            by_name[name] = prepared

        def swap(leaf):
            return moved.get(id(leaf), leaf) if isinstance(leaf, torch.Tensor) else leaf

        args, kwargs = pytree.tree_map(swap, (self.args, self.kwargs))
        return args, kwargs, by_name

    @property
    def asked_grads(self) -> list[str]:
        """Inputs whose gradients exist only because ``input_grads=True`` asked for them."""
        if not self.input_grads:
            return []
        return [n for n, t in self._input_names.items()
                if not t.requires_grad and (t.is_floating_point() or t.is_complex())]

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
        # Inside the user's torch.inference_mode() no graph is recorded; hookviz's run needs one.
        with torch.random.fork_rng(devices=cuda, device_type="cuda"), torch.inference_mode(False):
            if fresh:
                self._release()
                recorder = self._module_edits_recorder()
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
                recorder = self._module_edits_recorder()
                graph = self._do_forward(device, recorder)
                run = self._do_backward(graph, recorder, reused=False)
        self._forward = graph
        self.last_run = run
        if self.baseline is None:
            self.baseline = run
        return run

    def _module_edits_recorder(self) -> BackwardRecorder:
        """A recorder that already knows the module edits: their hooks exist from forward on, so a
        ``loss_fn`` that differentiates (``create_graph=True``) meets them as plain PyTorch would."""
        recorder = BackwardRecorder()
        for edit in self.edits:
            if edit.slot.on_module:
                table = recorder.module_input_edits if edit.slot.name == "grad_input" else recorder.module_output_edits
                table.setdefault(edit.target, []).append(edit)
        return recorder

    def _needs_forward(self, device: str) -> bool:
        graph = self._forward
        if graph is None or graph.device != device:
            return True
        if graph.full_hook_modules != self._full_hook_modules():
            return True
        if any(t._version != v for t, v in graph.versions):
            return True
        return _hook_signature(self.model, self._tensor_hook_targets(graph)) != graph.hook_signature

    def _full_hook_modules(self) -> tuple[tuple[str, str], ...]:
        """(module, slot name) of the module edits, each made by a real full backward (pre-)hook."""
        return tuple(sorted({(e.target, e.slot.name) for e in self.edits if e.slot.on_module}))

    def _tensor_hook_targets(self, graph: _Forward) -> dict[str, torch.Tensor]:
        return graph.leaves

    def release(self) -> None:
        """Free the retained forward graph and remove every hook hookviz put on it (the next run
        does a fresh forward)."""
        self._release()

    def _release(self) -> None:
        if self._forward is not None:
            self._forward.remove_hooks()
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
        forward_recorder = ForwardRecorder(model, state, snapshot_limit=self.full_tensor_limit)
        saved_recorder = SavedTensorsRecorder()
        state.active = recorder
        try:
            with torch.enable_grad(), wrapped_user_hooks(state, model, named_leaves), \
                    full_backward_hooks(state, model, list(full_modules)), buffers_kept(model), \
                    _eager(model):
                forward_start = torch._C._autograd._get_sequence_nr()
                with forward_recorder, saved_recorder.hooks():
                    output = self._call_model(model, args, kwargs, forward_recorder)
                    loss = self._loss(output)
        finally:
            state.active = None
        walk = walk_graph(loss.grad_fn, forward_start, leaf_names, boundary_names)
        _refuse_unsupported(walk)
        leaves = {}
        for node in walk.nodes.values():
            if node.kind == "leaf":
                leaves[node.id] = node.tensor
            elif node.kind == "boundary" and node.id in inputs:
                leaves[node.id] = inputs[node.id]
        handles = [
            node.fn.register_hook(NodePostHook(state, node.id, node.op))
            for node in walk.nodes.values() if node.kind == "op"
        ]
        for call in forward_recorder.calls:
            if call.legacy is not None and call.legacy.grad_fn is not None \
                    and resolve_hidden(call.legacy.grad_fn, 0)[0] is not call.legacy.grad_fn:
                handles.append(call.legacy.grad_fn.register_hook(HiddenNodeProbe(state, call.index)))
        for grad_fn, output_nr, wrapper in forward_recorder.intermediate_hooks:
            wrapper.node = walk.node_id(resolve_hidden(grad_fn, output_nr)[0])
        summary = self._summarise_forward(walk, forward_recorder)
        forget_tensors(forward_recorder)
        return _Forward(
            device=device, model=model, loss=loss, walk=walk, state=state, recorder=forward_recorder,
            leaves=leaves, node_call=self._node_calls(walk, forward_recorder),
            consumers=_consumers(walk), saved=_saved_tensors(walk, saved_recorder),
            hook_signature=_hook_signature(self.model, leaves),
            versions=[(t, t._version) for t in leaves.values()],
            full_hook_modules=full_modules, handles=handles, forward_records=summary[0],
            call_inputs=summary[1], call_outputs=summary[2], call_outputs_replaced=summary[3],
        )

    def _summarise_forward(self, walk: Walk, recorder: ForwardRecorder):
        """Statistics of every op's output and of what module hooks saw, right after forward
        (so the activations need not be held through backward)."""
        batch = StatsBatch(self.full_tensor_limit, self.histogram_bins)
        output_keys = {
            walk.id_of[fn_id]: batch.add(tensor, version)
            for fn_id, (tensor, version) in recorder.outputs.items() if fn_id in walk.id_of
        }
        input_keys = [_call_input_keys(batch, call, recorder) for call in recorder.calls]
        returned_keys = [[batch.add(*recorder.seen(e.tensor, e.version)) for e in call.returned]
                         for call in recorder.calls]
        replaced_keys = [None if call.replaced is None else [batch.add(e.tensor, e.version) for e in call.replaced]
                         for call in recorder.calls]
        records = batch.compute()
        return (
            {n: records[k] for n, k in output_keys.items()},
            [{name: records[k] if isinstance(k, int) else k for name, k in keys.items()} for keys in input_keys],
            [[records[k] for k in keys] for keys in returned_keys],
            [None if keys is None else [records[k] for k in keys] for keys in replaced_keys],
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
            text = str(error)
            if "BackwardHookFunction" in text and "inplace" in text.lower():
                whose = ("hookviz's full backward hook for your module edit" if self._full_hook_modules()
                         else "a full backward hook of yours")
                raise BackwardError(
                    f"{label} ({type(module).__name__}) modifies in place a tensor that {whose} wraps "
                    f"({text}); PyTorch's full backward hooks cannot handle in-place ops such as "
                    "ReLU(inplace=True) or x += 1 on a hooked module's input or output: make that op "
                    "out of place (inplace=False, x = x + 1), or edit a node's grad_inputs / "
                    "grad_outputs instead of a module's grad_input / grad_output"
                ) from error
            if "leaf Variable that requires grad" in text and self.asked_grads:
                raise ForwardError(
                    f"{label} ({type(module).__name__}) changes an input in place, and PyTorch refuses "
                    "that on a leaf that requires grad; the input requires grad only because hookviz's "
                    f"input_grads=True asked for gradients of {', '.join(map(repr, self.asked_grads))}: "
                    f"leave input_grads=False (the default), which passes a copy ({text})",
                    module=where,
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
        """The innermost module call during which each op Node was made (by sequence number)."""
        return {
            node.id: recorder.call_of(node.sequence_nr) if node.kind == "op" else None
            for node in walk.nodes.values()
        }

    # ------------------------------------------------------------------ backward

    def _resolve_edits(self, graph: _Forward, recorder: BackwardRecorder) -> dict[str, list[Edit]]:
        """Sort the session's edits into the recorder's tables; returns the leaf edits."""
        leaf_edits: dict[str, list[Edit]] = {}
        recorder.post_edits, recorder.pre_edits = {}, {}
        recorder.module_input_edits, recorder.module_output_edits = {}, {}
        for edit in self.edits:
            name = edit.slot.name
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
            else:  # grad_output: a full backward pre-hook edits the gradient from outside the module
                recorder.module_output_edits.setdefault(edit.target, []).append(edit)
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
        new = dataclasses.replace(new, target=self.last_run.canonical_name(target))
        self._check_edit(new, self.last_run)
        self.edits.append(new)
        return new

    def _check_edit(self, edit: Edit, run: Run) -> None:
        """Refuse, now, an edit that could not apply at the next run (see :meth:`edit`)."""
        slot = edit.slot
        if slot.on_module:
            record = self._check_module_edit(edit, run)
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
        # fork_rng: a trial of randn_like(grad) must not move the user's random numbers.
        if record is not None and record.numel <= 1_000_000:
            sample = record.value.clone() if record.value is not None else torch.zeros(
                record.shape, dtype=getattr(torch, record.dtype)
            )
            with torch.random.fork_rng(devices=[]):
                edit.apply(sample)

    def _check_module_edit(self, edit: Edit, run: Run):
        slot, target = edit.slot, edit.target
        if target not in run.modules:
            raise TargetError(_unknown("module", target, run.modules))
        call = run.module_io(target)
        if not call.full_hook_fires:
            raise EditError(
                f"PyTorch would never call a full backward hook of module {target!r}, so a "
                f"{slot.name} edit there would do nothing: {run.explain(target)}"
            )
        records = call.grad_input if slot.name == "grad_input" else call.grad_output
        if slot.index >= len(records):
            raise TargetError(_slot_error(edit, f"module {target!r} has {len(records)} {slot.name} entries"))
        if records[slot.index] is None:
            what = "input" if slot.name == "grad_input" else "output"
            raise TargetError(_slot_error(
                edit, f"{what} {slot.index} of module {target!r} gets no gradient (not a tensor that "
                "requires grad)"
            ))
        module = self.model.get_submodule(target)
        if module._is_full_backward_hook is False:
            raise EditError(
                f"module {target!r} has a legacy register_backward_hook, and PyTorch does not allow a "
                f"full backward hook beside it, which a {slot.name} edit needs; edit the grad_inputs "
                f"of node {call.output_node!r} instead (what the legacy hook edits)"
            )
        if call.output_changed_later:
            raise EditError(
                f"an in-place op changes the output of module {target!r} after it returns, and PyTorch "
                f"refuses that on the output of a full backward hook, which a {slot.name} edit needs "
                "(\"Output 0 of BackwardHookFunction is a view and is being modified inplace\"); edit the "
                f"grad_outputs of node {call.output_node!r} instead"
            )
        if call.in_place:
            raise EditError(
                f"module {target!r} ({call.type}) modifies its input in place, and PyTorch refuses full "
                f"backward hooks on such a module, which a {slot.name} edit needs; edit the "
                f"grad_outputs of node {call.output_node!r} instead, or set inplace=False"
            )
        return records[slot.index]

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


def name_inputs(forward, args: tuple, kwargs: dict) -> dict[str, torch.Tensor]:
    """Every input tensor by name: ``forward``'s parameter name plus its pytree path inside that
    argument (``"x"``, ``"batch['ids']"``); ``args[i]`` where the signature does not bind."""
    try:
        named = dict(_signature(forward).bind(*args, **kwargs).arguments)
    except (TypeError, ValueError):
        named = {f"args[{i}]": a for i, a in enumerate(args)} | dict(kwargs)
    names = {}
    for argument, value in named.items():
        for path, leaf in pytree.tree_flatten_with_path(value)[0]:
            if isinstance(leaf, torch.Tensor):
                names[argument + pytree.keystr(path)] = leaf
    return names


@contextlib.contextmanager
def buffers_kept(model: torch.nn.Module):
    """Put every buffer a forward changed in place (BatchNorm's running statistics and
    ``num_batches_tracked``) back as it was, so hookviz's forwards leave no trace in the model.

    Written through ``.data``: Nodes that saved a buffer (BatchNorm saves its running statistics)
    must not see its version change, or a re-run's backward would refuse them.
    """
    before = [(b, b.detach().clone()) for b in model.buffers()]
    try:
        yield
    finally:
        # Every buffer, not only those whose _version moved: BatchNorm's kernel updates its
        # running statistics without bumping the version counter.
        for buffer, value in before:
            buffer.data.copy_(value)


def _eager(model: torch.nn.Module):
    """Run ``torch.compile``d submodules eagerly, so hookviz's per-op hooks see their ops."""
    compiled = any(isinstance(getattr(m, "_orig_mod", None), torch.nn.Module) for m in model.modules())
    return torch.compiler.set_stance("force_eager") if compiled else contextlib.nullcontext()


def _refuse_unsupported(walk: Walk) -> None:
    """Refuse graphs ``torch.autograd.grad`` cannot run, with the fix."""
    for node in walk.nodes.values():
        if node.op == "CheckpointFunctionBackward":
            raise UnsupportedError(
                "the model uses torch.utils.checkpoint.checkpoint(..., use_reentrant=True), which "
                "PyTorch does not support with torch.autograd.grad (hookviz's backward); pass "
                "use_reentrant=False to checkpoint (PyTorch's recommended default)"
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


def _call_input_keys(batch: StatsBatch, call: CallState, recorder: ForwardRecorder) -> dict:
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
                version = seen.get(id(leaf))
                keys[label] = batch.add(*recorder.seen(leaf, version)) if version is not None else batch.add(leaf)
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
