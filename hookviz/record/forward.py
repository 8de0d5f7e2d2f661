"""The retained forward: one recorded forward pass, kept so that backward can run on it again.

:func:`record_forward` runs the model under hookviz's recording hooks (module calls, forward values,
saved tensors, the user's hooks wrapped in place) and returns a :class:`RetainedForward`;
:meth:`RetainedForward.backward` runs one recorded backward on it with the session's edits and hands
the live records to :func:`hookviz.record.build.build_run`. It takes prepared inputs from the session
and never calls back into it.
"""

from __future__ import annotations

import inspect
import types
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from hookviz.data.run import Run, SavedTensor
from hookviz.data.stats_batch import StatsBatch, dtype_name
from hookviz.errors import BackwardError, ForwardError, HookvizError, LossError, UnsupportedError
from hookviz.record import distributed, module_tree, torch_compat
from hookviz.record.backward_recorder import (
    BackwardRecorder,
    HiddenNodeProbe,
    NodePostHook,
    NodePreEditHook,
    RecordingState,
    full_backward_hooks,
)
from hookviz.record.build import RunContext, build_run
from hookviz.record.forward_recorder import CallState, ForwardRecorder, forget_tensors
from hookviz.record.graph import Walk, resolve_hidden, saved_tensor_names, walk_graph
from hookviz.record.model_state import KeptState
from hookviz.record.module_views import CallPlan, plan_call
from hookviz.record.own_pass import own_backward
from hookviz.record.saved_tensors import SavedTensorsRecorder
from hookviz.record.torch_compat import pytree
from hookviz.record.user_hooks import (
    MODULE_HOOK_DICTS,
    TENSOR_HOOK_DICTS,
    run_post_accumulate_grad_hooks,
    wrapped_user_hooks,
)


@dataclass
class RetainedForward:
    """One forward pass hookviz recorded and keeps, so backward can run on it again and again.

    Made by :func:`record_forward`. Holds the loss, the walked autograd graph (its Nodes carry
    hookviz's post-hooks until :meth:`remove_hooks`), the module calls seen in forward, summaries of
    the forward values and, per module call, the plan for rebuilding what a full backward hook
    sees (:mod:`hookviz.record.module_views`).
    """

    device: str
    model: torch.nn.Module
    loss: torch.Tensor
    walk: Walk
    state: RecordingState
    recorder: ForwardRecorder
    leaves: dict[str, torch.Tensor]  # leaf name -> tensor passed to autograd.grad
    consumers: dict[tuple[str, int], tuple[tuple[str, int], ...]]
    hook_signature: tuple
    versions: list[tuple[torch.Tensor, int]]
    edit_sites: tuple[tuple[str, str], ...]
    loss_differentiates: bool = False  # loss_fn ran a backward through the output (create_graph)
    handles: list = field(default_factory=list)  # hookviz's Node post-hooks, removed by remove_hooks()
    call_inputs: list[dict] = field(default_factory=list)
    call_outputs: list[list] = field(default_factory=list)
    call_outputs_replaced: list[list | None] = field(default_factory=list)
    # The model's state before the forward, put back after the first backward (hookviz.record.model_state)
    kept: KeptState | None = None
    # Derived once per forward in __post_init__:
    leaf_ids: dict[int, str] = field(init=False)  # id(leaf tensor) -> node id
    plans: list[CallPlan] = field(init=False)  # per module call: how to rebuild its full hook view
    summed_later: frozenset[tuple[str, int]] = field(init=False)
    read_later: frozenset[tuple[str, int]] = field(init=False)
    # The model's names as this forward saw them (every re-run on it reads them):
    parameter_names: list[str] = field(init=False)  # first names, in model order
    module_aliases: dict[str, str] = field(init=False)  # other name -> first name (tied modules)
    parameter_aliases: dict[str, str] = field(init=False)  # other name -> first name (tied weights)
    # What every run's records share, made by the first run on this forward (hookviz.record.build):
    assembly_static: object = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.leaf_ids = {id(n.tensor): n.id for n in self.walk.nodes.values() if n.tensor is not None}
        sequence = {n.id: n.sequence_nr for n in self.walk.nodes.values() if n.kind == "op"}

        def producer_of(edge) -> tuple[str | None, int]:
            return self.producer(edge.tensor, edge.grad_fn, edge.output_nr)

        self.plans = [
            plan_call(call, producer_of, self.consumers, sequence, self.walk.looked_through)
            for call in self.recorder.calls
        ]
        # Gradients that a full-hook view adds up are kept whole through backward.
        self.summed_later = frozenset(use for plan in self.plans for use in plan.summed_uses())
        self.read_later = frozenset(out for plan in self.plans for out in plan.read_outputs())
        self.module_aliases = _aliases(module_tree.named_modules(self.model, remove_duplicate=False))
        every_parameter = module_tree.named_parameters(self.model, remove_duplicate=False)
        self.parameter_aliases = _aliases(every_parameter)
        self.parameter_names = [n for n, _ in every_parameter if n not in self.parameter_aliases]

    def producer(self, tensor: torch.Tensor | None, fn, output_nr: int) -> tuple[str | None, int]:
        """The graph node (and output) that produced ``tensor`` when a hook saw it."""
        if fn is None:
            return self.leaf_ids.get(id(tensor)), 0
        fn, output_nr = resolve_hidden(fn, output_nr)
        return self.walk.node_id(fn), output_nr

    def remove_hooks(self) -> None:
        """Remove hookviz's Node hooks from the retained graph (idempotent); put the model's state
        back if no backward has yet."""
        if self.kept is not None:
            self.kept.put_back()
        for handle in self.handles:
            handle.remove()
        self.handles.clear()

    def backward(
        self, recorder: BackwardRecorder, batch: StatsBatch, context: RunContext, reused: bool
    ) -> Run:
        """Run one recorded backward (``torch.autograd.grad(loss, leaves, retain_graph=True)``)
        with the recorder's edits, then the leaves' post-accumulate-grad hooks (as ``AccumulateGrad``
        runs them after a plain backward; not for a DDP / FSDP2 model, whose ``.grad`` the
        all-reduce writes), and assemble the :class:`~hookviz.data.run.Run`.

        Raises:
            EditError, ExpressionError: an edit failed at its site. BackwardError: backward raised.
        """
        op_nodes = {n.id for n in self.walk.nodes.values() if n.kind == "op"}
        recorder.begin_backward(op_nodes, batch.settle, self.summed_later, self.read_later)
        handles = [
            self.walk.nodes[node_id].fn.register_prehook(NodePreEditHook(recorder, node_id))
            for node_id in recorder.pre_edits
        ]
        names = list(self.leaves)
        # The first backward puts back what the forward before it changed. A later one runs with the
        # state that forward left (its Nodes may have saved those tensors), then puts back the user's.
        kept = self.kept
        if kept is None or kept.changed is not None:
            kept = KeptState(self.model, list(self.leaves.values()))
            if self.kept is not None:
                kept.reapply(self.kept)
        self.state.active = recorder
        try:
            with wrapped_user_hooks(self.state, self.model, self.leaves), own_backward([self.loss]):
                grads = torch.autograd.grad(
                    self.loss, [self.leaves[n] for n in names], retain_graph=True, allow_unused=True
                )
            leaf_grads = recorder.leaf_grads(dict(zip(names, grads)))
            if distributed.strategy(self.model) is None:
                with kept.watching():  # a hook that steps an optimizer writes the weights
                    leaf_grads = run_post_accumulate_grad_hooks(self.state, self.leaves, leaf_grads)
        except HookvizError:
            raise
        except RuntimeError as error:
            fix = _fix_for(error, self.loss_differentiates)
            raise BackwardError(f"backward raised: {error}{fix}") from error
        finally:
            self.state.active = None
            for handle in handles:
                handle.remove()
            if kept.put_back() and kept is self.kept:  # versions as the user's model has them again
                self.versions = [(t, t._version) for t, _ in self.versions]
        return build_run(self, recorder, leaf_grads, batch, context, reused)


def record_forward(
    model: torch.nn.Module,
    args: tuple,
    kwargs: dict,
    inputs: dict[str, torch.Tensor],
    loss_fn: Callable | None,
    recorder: BackwardRecorder,
    *,
    device: str,
    user_model: torch.nn.Module,
    asked_grads: list[str],
    full_tensor_limit: int,
    histogram_bins: int,
    values: bool = True,
) -> RetainedForward:
    """Run one forward under hookviz's recording hooks and keep its graph.

    Args:
        model: the module to run (the user's model, or hookviz's copy on another device).
        args, kwargs: prepared inputs (copies where the session made them); ``inputs``: the
            tensors among them by name.
        loss_fn: ``loss_fn(output) -> scalar tensor``, or None when the output is the loss.
        recorder: made with the session's edits; its module edits apply from forward on (a
            ``loss_fn`` that differentiates meets them), and it runs the first backward.
        device: where it runs. user_model: the user's model (its hooks are the user's).
        asked_grads: inputs made to require grad by ``input_grads=True`` (named in errors).
        full_tensor_limit, histogram_bins: see :class:`~hookviz.data.stats_batch.StatsBatch`.
        values: summarise forward values (what each op made, what module hooks saw). False for
            a lazy run, whose forward values are filled with its other details on first read.

    Raises:
        ForwardError, BackwardError, LossError, UnsupportedError: see their docstrings; the model's
        hooks, parameters, buffers and flags are as they were in every case. Without an error the
        model's state is put back after the first backward on the graph (see
        :mod:`hookviz.record.model_state`).
    """
    kept = KeptState(model, [t for t in inputs.values() if t.requires_grad])
    try:
        return _record_forward(
            model, args, kwargs, inputs, loss_fn, recorder, kept, device=device, user_model=user_model,
            asked_grads=asked_grads, full_tensor_limit=full_tensor_limit, histogram_bins=histogram_bins,
            values=values,
        )  # fmt: skip
    except BaseException:
        kept.put_back()
        raise


def _record_forward(
    model, args, kwargs, inputs, loss_fn, recorder, kept: KeptState, *, device, user_model, asked_grads,
    full_tensor_limit, histogram_bins, values,
) -> RetainedForward:  # fmt: skip
    """:func:`record_forward`, whose caller puts the model's state back if this raises."""
    leaf_names = {id(t): n for n, t in inputs.items() if t.grad_fn is None}
    for name, parameter in module_tree.named_parameters(model, remove_duplicate=False):
        leaf_names.setdefault(id(parameter), name)
    # Held until the walk: torch 2.4 makes a new Python Node object at each `.grad_fn` read while none
    # is alive, so the id of a dropped one matches nothing the walk meets.
    boundary_fns = {n: t.grad_fn for n, t in inputs.items() if t.grad_fn is not None}
    boundary_names = {(id(fn), inputs[n].output_nr): n for n, fn in boundary_fns.items()}
    named_leaves = {n: t for n, t in inputs.items() if t.requires_grad} | {
        n: p for n, p in module_tree.named_parameters(model) if p.requires_grad
    }
    edit_sites = tuple(
        sorted(
            {(name, "grad_input") for name in recorder.module_input_edits}
            | {(name, "grad_output") for name in recorder.module_output_edits}
        )
    )
    state = RecordingState()
    forward_recorder = ForwardRecorder(
        model, state, snapshot_limit=full_tensor_limit if values else 0, values=values, kept=kept
    )
    saved_recorder = SavedTensorsRecorder()
    state.active = recorder
    try:
        with (
            torch.enable_grad(),
            wrapped_user_hooks(state, model, named_leaves),
            full_backward_hooks(state, model, list(edit_sites)),
            _eager(model),
        ):
            forward_start = torch_compat.next_sequence_nr()
            with (
                forward_recorder,
                saved_recorder.hooks(),
                distributed.quiet_reducer(model),
                kept.accumulation_watched(),
            ):
                try:
                    output = _call_model(model, args, kwargs, forward_recorder, bool(edit_sites), asked_grads)
                finally:  # a forward may register modules or reassign buffers: list the model afresh
                    module_tree.relist(model)
                loss, differentiates = _loss_watching_backward(output, loss_fn)
    finally:
        state.active = None
    for name, parameter in module_tree.named_parameters(model, remove_duplicate=False):
        leaf_names.setdefault(id(parameter), name)  # one the forward registered (a lazily built model)
    leaf_names |= distributed.forward_parameter_names(model)  # FSDP2's all-gathered parameters
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
        for node in walk.nodes.values()
        if node.kind == "op"
    ]
    for call in forward_recorder.calls:
        if (
            call.legacy is not None
            and call.legacy.grad_fn is not None
            and resolve_hidden(call.legacy.grad_fn, 0)[0] is not call.legacy.grad_fn
        ):
            handles.append(call.legacy.grad_fn.register_hook(HiddenNodeProbe(state, call.index)))
    for grad_fn, output_nr, wrapper in forward_recorder.intermediate_hooks:
        wrapper.node = walk.node_id(resolve_hidden(grad_fn, output_nr)[0])
    if values:
        summary = _summarise_forward(walk, forward_recorder, StatsBatch(full_tensor_limit, histogram_bins))
    else:
        unknown = [None] * len(forward_recorder.calls)
        summary = ({}, unknown, unknown, unknown)
    forget_tensors(forward_recorder)
    # A saved input is named by its first name: GPT-2's input_ids may be its labels as well.
    input_names: dict[int, str] = {}
    for name, tensor in inputs.items():
        input_names.setdefault(id(tensor), name)
    operand_names = leaf_names | input_names
    # What forward taught about each Node goes on its one live record, the WalkedNode.
    for node in walk.nodes.values():
        if node.kind == "op":
            node.call = forward_recorder.call_of(node.sequence_nr)
            node.saved, node.constants = _saved(node.fn, saved_recorder, operand_names)
            node.output = summary[0].get(node.id)
        elif node.kind == "leaf":
            node.output = summary[0].get(node.id)
    return RetainedForward(
        device=device,
        model=model,
        loss=loss,
        walk=walk,
        state=state,
        recorder=forward_recorder,
        leaves=leaves,
        consumers=_consumers(walk),
        hook_signature=hook_signature(user_model, leaves),
        versions=[(t, t._version) for t in leaves.values()],
        edit_sites=edit_sites,
        loss_differentiates=differentiates,
        handles=handles,
        call_inputs=summary[1],
        call_outputs=summary[2],
        call_outputs_replaced=summary[3],
        kept=kept,
    )


def _fix_for(error: RuntimeError, loss_differentiates: bool) -> str:
    """The fix to add to a backward error hookviz knows a fix for."""
    if "backward through the graph a second time" in str(error) and loss_differentiates:
        return (
            "\nYour loss_fn (or forward) ran a backward through the model's output itself and freed "
            "the graph (loss.backward(), as an LBFGS closure does), so hookviz's own backward cannot "
            "run on it: return the loss from loss_fn without calling backward(); hookviz runs the "
            "backward (your .grad values are as they were)"
        )
    if "modified by an inplace operation" in str(error):
        return (
            "\nTo fix it, make the in-place op that changed a tensor saved for backward out of place "
            "(y = y * 2, not y.mul_(2); inplace=False): plain PyTorch's backward refuses it too"
        )
    return ""


def _aliases(named) -> dict[str, str]:
    """Every other name of a module or parameter registered under several -> its first name."""
    first: dict[int, str] = {}
    aliases = {}
    for name, thing in named:
        canonical = first.setdefault(id(thing), name)
        if canonical != name:
            aliases[name] = canonical
    return aliases


def hook_signature(model: torch.nn.Module, tensors: dict[str, torch.Tensor]) -> tuple:
    """Which user hooks exist now: a run on a retained forward needs the forward's (a change starts
    a fresh forward), and its records share the forward's list of them (:mod:`hookviz.record.build`)."""
    modules = tuple(
        (name, attribute, tuple(getattr(m, attribute).keys()))
        for name, m in module_tree.named_modules(model)
        for attribute in MODULE_HOOK_DICTS
        if getattr(m, attribute)
    )
    tensor_hooks = tuple(
        (n, *(tuple(getattr(t, attribute, None) or ()) for attribute in TENSOR_HOOK_DICTS))
        for n, t in tensors.items()
    )
    return modules, tensor_hooks


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


def loss_of(output, loss_fn: Callable | None) -> torch.Tensor:
    """``loss_fn(output)`` (or the output itself), checked to be a one-element tensor with a graph.

    Raises:
        LossError: ``loss_fn`` raised, or the loss is not a tensor, not a scalar, or has no graph.
    """
    if loss_fn is not None:
        try:
            loss = loss_fn(output)
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
        fix = (
            "return a scalar, e.g. add .mean()"
            if loss_fn
            else ("pass loss_fn=... that reduces it to a scalar, e.g. loss_fn=lambda out: out.sum()")
        )
        raise LossError(f"{source} has shape {list(loss.shape)}, not a scalar; {fix}")
    if not loss.requires_grad or loss.grad_fn is None:
        raise LossError(
            f"{source} does not require grad, so there is no backward to record: no parameter or "
            "input requires grad, or forward ran under torch.no_grad(); set requires_grad=True "
            "on the parameters or inputs"
        )
    return loss


def _loss_watching_backward(output, loss_fn: Callable | None) -> tuple[torch.Tensor, bool]:
    """``loss_of(output, loss_fn)``, and whether ``loss_fn`` ran a backward through the output
    itself (a gradient penalty: ``torch.autograd.grad(..., create_graph=True)``), seen by a Node
    post-hook on each output tensor's ``grad_fn`` for the length of the call."""
    ran: list[bool] = []
    handles = [
        t.grad_fn.register_hook(lambda grad_inputs, grad_outputs: ran.append(True))
        for t in pytree.tree_leaves(output)
        if isinstance(t, torch.Tensor) and t.grad_fn is not None
    ]
    try:
        return loss_of(output, loss_fn), bool(ran)
    finally:
        for handle in handles:
            handle.remove()


def _call_model(model, args, kwargs, recorder: ForwardRecorder, edit_hooks: bool, asked_grads: list[str]):
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
            whose = (
                "hookviz's full backward hook for your module edit"
                if edit_hooks
                else "a full backward hook of yours"
            )
            raise BackwardError(
                f"{label} ({type(module).__name__}) modifies in place a tensor that {whose} wraps "
                f"({text}); PyTorch's full backward hooks cannot handle in-place ops such as "
                "ReLU(inplace=True) or x += 1 on a hooked module's input or output: make that op "
                "out of place (inplace=False, x = x + 1), or edit a node's grad_inputs / "
                "grad_outputs instead of a module's grad_input / grad_output"
            ) from error
        if "leaf Variable that requires grad" in text and asked_grads:
            raise ForwardError(
                f"{label} ({type(module).__name__}) changes an input in place, and PyTorch refuses "
                "that on a leaf that requires grad; the input requires grad only because hookviz's "
                f"input_grads=True asked for gradients of {', '.join(map(repr, asked_grads))}: "
                f"leave input_grads=False (the default), which passes a copy ({text})",
                module=where,
            ) from error
        raise ForwardError(
            f"forward of {label} ({type(module).__name__}) raised {type(error).__name__}: {error}",
            module=where,
        ) from error


def _holds_data(tensor: torch.Tensor) -> bool:
    """False for a tensor whose storage was freed after forward: FSDP2 frees the unsharded
    parameters it gathered for the forward, so a leaf's value is not there to read."""
    try:
        return tensor.numel() == 0 or tensor.untyped_storage().nbytes() > 0
    except (RuntimeError, NotImplementedError, TypeError):  # a subclass without storage: the batch reads it
        return True


def _summarise_forward(walk: Walk, recorder: ForwardRecorder, batch: StatsBatch):
    """Statistics of every op's output and of what module hooks saw, right after forward
    (so the activations need not be held through backward)."""
    output_keys = {
        walk.id_of[fn_id]: batch.add(tensor, version)
        for fn_id, (tensor, version) in recorder.outputs.items()
        if fn_id in walk.id_of
    }
    # A leaf's value (an input, a parameter) as forward used it: the learner knows x = [2, 3].
    for node in walk.nodes.values():
        if node.kind == "leaf" and isinstance(node.tensor, torch.Tensor) and _holds_data(node.tensor):
            output_keys[node.id] = batch.add(node.tensor, node.tensor._version)
    input_keys = [_call_input_keys(batch, call, recorder) for call in recorder.calls]
    returned_keys = [
        [None if e is None else batch.add(*recorder.seen(e.tensor, e.version)) for e in call.returned]
        for call in recorder.calls
    ]
    replaced_keys = [
        None
        if call.replaced is None
        else [None if e is None else batch.add(e.tensor, e.version) for e in call.replaced]
        for call in recorder.calls
    ]
    records = batch.compute()
    return (
        {n: records[k] for n, k in output_keys.items()},
        [{name: records[k] if isinstance(k, int) else k for name, k in keys.items()} for keys in input_keys],
        [[None if k is None else records[k] for k in keys] for keys in returned_keys],
        [
            None if keys is None else [None if k is None else records[k] for k in keys]
            for keys in replaced_keys
        ],
    )


def _eager(model: torch.nn.Module):
    """Run ``torch.compile``d submodules eagerly, so hookviz's per-op hooks see their ops."""
    modules = module_tree.modules(model)
    compiled = [m for m in modules if isinstance(getattr(m, "_orig_mod", None), torch.nn.Module)]
    return torch_compat.compiled_modules_run_eagerly(compiled)


def _refuse_unsupported(walk: Walk) -> None:
    """Refuse graphs ``torch.autograd.grad`` cannot run, with the fix."""
    for node in walk.nodes.values():
        if node.op == "CheckpointFunctionBackward":
            raise UnsupportedError(
                "the model uses torch.utils.checkpoint.checkpoint(..., use_reentrant=True), which "
                "PyTorch does not support with torch.autograd.grad (hookviz's backward); pass "
                "use_reentrant=False to checkpoint (PyTorch's recommended default)"
            )


def _consumers(walk: Walk) -> dict[tuple[str, int], tuple[tuple[str, int], ...]]:
    """(producer id, output_nr) -> ((consumer id, slot), ...): who sends gradient to each output
    (tuples, as the walk's: they live as long as the forward)."""
    found: dict[tuple[str, int], list[tuple[str, int]]] = {}
    for node in walk.nodes.values():
        for slot, producer, output_nr in node.inputs:
            found.setdefault((producer, output_nr), []).append((node.id, slot))
    return {output: tuple(uses) for output, uses in found.items()}


def _saved(fn, recorder: SavedTensorsRecorder, names: dict[int, str]) -> tuple[tuple[SavedTensor, ...], dict]:
    """What a Node saved for backward: the tensors and the Python numbers (by name without
    ``_saved_``). ``grad_fn._saved_<name>`` names each, and hookviz's pack hook (which reading the
    attribute unpacks) gives a tensor's shape, dtype, bytes and where the user's own pack hook
    stored it. A saved tensor that is one of ``names`` (``id`` -> name: the inputs and
    parameters), or a view of one, is named by it: PyTorch saves a leaf itself, not a copy
    (``SavedVariable``)."""
    entries, constants = [], {}
    for attribute in saved_tensor_names(fn):
        try:
            packs, tensors, number = recorder.attribute(fn, attribute)
        except RuntimeError:
            continue
        base = attribute.removeprefix("_saved_")
        if number is not None:
            constants[base] = number
        for i, (shape, dtype, nbytes, stored) in enumerate(packs):
            name = base + (f"[{i}]" if len(packs) > 1 else "")
            of = _leaf_behind(tensors[i], names) if tensors else ""
            entries.append(SavedTensor(name, shape, dtype_name(dtype), nbytes, stored, of))
    return tuple(entries), constants


def _leaf_behind(tensor: torch.Tensor, names: dict[int, str]) -> str:
    """The name in ``names`` of the input or parameter ``tensor`` is, or is a view of
    (``weight.t()``), else ""."""
    found = names.get(id(tensor))
    if found is None and tensor._base is not None:
        found = names.get(id(tensor._base))
    return found or ""


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
                keys[label] = (
                    batch.add(*recorder.seen(leaf, version)) if version is not None else batch.add(leaf)
                )
            else:
                keys[label] = repr(leaf)[:80]
    return keys


# Held weakly, and only for plain functions, whose signature holds nothing they do not: a forward
# can hold the model (a closure over it; accelerate sets ``module.forward`` to a partial over the
# module, whose signature may hold it too), and a cache that held it would keep the model alive.
_SIGNATURES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _signature(forward) -> inspect.Signature:
    """``inspect.signature`` of a bound ``forward``, cached per function (it is slow)."""
    function = getattr(forward, "__func__", forward)
    if not isinstance(function, types.FunctionType):
        return inspect.signature(forward)
    found = _SIGNATURES.get(function)
    if found is None:
        found = _SIGNATURES.setdefault(function, inspect.signature(forward))
    return found
