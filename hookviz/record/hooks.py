"""Hooks in, hooks out: what hookviz registers to record a run, and how it always removes it.

Forward: a forward pre-hook and a forward hook on every module keep the stack of module calls, and a
``TorchFunctionMode`` (local to the recording thread: nothing process-wide is patched) sees the
``Tensor.register_hook`` calls of forward, copies a parameter before forward writes it in place and,
when forward values are recorded (full details), keeps each op's output for its statistics. Forward
hooks and function modes do not touch autograd, so gradients stay bit-identical.

The user's hooks are called as PyTorch calls them: what they print still reaches ``sys.stdout``
(``run.log`` keeps a copy, :func:`printed_copied`), their warnings stay warnings.

Backward: one Node post-hook per Node (``Node.register_hook``) records ``grad_outputs`` and
``grad_inputs`` and applies the run's ``grad_inputs`` edits; Node pre-hooks are added only where an
edit replaces ``grad_outputs``. PyTorch runs a Node's post-hooks in registration order, so the user's
own legacy module hooks (registered during forward) run first, as they would without hookviz.
Full backward hooks are registered only where an edit of a module's ``grad_input`` needs one, because
their identity Nodes change the order in which autograd sums gradients (see PRODUCT.md).

The hooks on graph Nodes live as long as hookviz's retained graph; they read the current run from a
shared :class:`RecordingState`, so a backward-only re-run records into a fresh recorder.
"""

from __future__ import annotations

import contextlib
import itertools
import sys
import threading
from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

import torch
from torch.overrides import TorchFunctionMode
from torch.utils import _pytree as pytree

from hookviz.data.run import Event, HookCall, HookInfo, LogEntry
from hookviz.data.tensors import device_name
from hookviz.edits.edit import Edit, replace_slots
from hookviz.record import module_tree, torch_compat
from hookviz.record.distributed import is_framework_hook
from hookviz.record.model_state import KeptState, writes

# ----------------------------------------------------------------------------------------------
# Forward
# ----------------------------------------------------------------------------------------------

_REGISTER_HOOK = torch.Tensor.register_hook  # what a function mode sees for tensor.register_hook(...)


@dataclass(slots=True)
class CallState:
    """One module call seen in forward (turned into a ModuleCall after the run).

    ``inputs`` holds an :class:`Edge` per positional argument that is a tensor (None for any other
    argument), as the forward pre-hook saw it. ``outputs`` holds an Edge per top-level entry of the
    output as PyTorch's full backward hook counts them (the output itself when it is a tensor, each
    entry of a tuple; None for entries that are not tensors) after the user's forward hooks ran;
    ``full_hook_fires`` is False when the output is neither a tensor nor a tuple, since PyTorch then
    never calls a full backward hook (``torch.nn.Module._call_impl``). ``returned`` is every entry
    of the output as forward returned it, before the user's forward hooks (pytree order, None for
    an entry that is not a tensor), and ``replaced`` the same after them when a hook returned a
    replacement, else None.
    ``legacy`` is the tensor a legacy ``register_backward_hook`` hangs on (``_call_impl``: the first
    tensor, descending into ``[0]`` or a dict's first tensor value).
    ``index`` is the position in call order; ``parent`` the index of the call it is nested in.
    Nodes whose ``_sequence_nr()`` lies in ``[sequence_start, sequence_end)`` were made during this
    call.
    ``args`` / ``kwargs`` are dropped once forward has been summarised.
    """

    index: int
    module: str
    call: int
    type: str
    forward: object
    args: tuple
    kwargs: dict
    parent: int | None = None
    sequence_start: int = 0
    sequence_end: int = 0
    grad_enabled: bool = True
    inputs: list[Edge | None] = field(default_factory=list)
    outputs: list[Edge | None] = field(default_factory=list)
    full_hook_fires: bool = True
    returned: list[Edge] = field(default_factory=list)
    replaced: list[Edge] | None = None
    legacy: Edge | None = None
    in_place: bool = False
    output_changed_later: bool = False
    # One tensor passed as several positional arguments: the arguments, kwargs and CPU random state
    # of the call, kept so its full-hook grad_input can be split per argument after backward.
    shared: tuple | None = None


class Edge(NamedTuple):
    """A tensor as a module hook saw it: where in the graph it came from, and its version then.

    ``tensor`` is kept for leaves only once forward has been summarised (see :func:`forget_tensors`);
    a leaf is found in the graph by its identity.
    """

    tensor: torch.Tensor | None
    grad_fn: object
    output_nr: int
    version: int
    requires_grad: bool
    shape: tuple[int, ...] = ()
    dtype: torch.dtype = torch.float32
    device: torch.device | None = None


def _tensors_in(value) -> list[torch.Tensor]:
    """The tensors in a value, in pytree order (a plain tensor, or a tuple of them, without the
    cost of a pytree walk: this runs once per module call)."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)) and all(isinstance(v, torch.Tensor) for v in value):
        return list(value)
    return [t for t in pytree.tree_leaves(value) if isinstance(t, torch.Tensor)]


def _entries_in(value) -> list[torch.Tensor | None]:
    """Every entry of a value as a forward hook gets it, in pytree order: the tensors, and None for
    anything else (``MultiheadAttention``'s ``(output, None)`` keeps its None)."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)) and all(isinstance(v, torch.Tensor) for v in value):
        return list(value)
    return [t if isinstance(t, torch.Tensor) else None for t in pytree.tree_leaves(value)]


def _edge_of(tensor: torch.Tensor) -> Edge:
    # Runs twice per module call: tuple.__new__ skips NamedTuple's Python-level __new__, and the
    # shape stays the torch.Size it is (a tuple).
    fn = tensor.grad_fn
    return tuple.__new__(
        Edge,
        (
            tensor,
            fn,
            tensor.output_nr if fn is not None else 0,
            tensor._version,
            tensor.requires_grad,
            tensor.shape,
            tensor.dtype,
            tensor.device,
        ),
    )


def _top_level_outputs(output) -> tuple[list[Edge | None], bool]:
    """The output entries a full backward hook counts, and whether it fires at all: a tensor, or the
    top-level entries of a tuple (nested tuples and dicts are not looked into). Source:
    ``torch.utils.hooks.BackwardHook._apply_on_tensors`` and ``Module._call_impl``."""
    if isinstance(output, torch.Tensor):
        return [_edge_of(output)], True
    if isinstance(output, tuple):
        return [_edge_of(t) if isinstance(t, torch.Tensor) else None for t in output], True
    return [], False


def legacy_hook_tensor(output) -> torch.Tensor | None:
    """The tensor whose ``grad_fn`` a legacy ``register_backward_hook`` is put on
    (``torch.nn.Module._call_impl``): descend into ``[0]``, or a dict's first tensor value."""
    value = output
    try:
        while not isinstance(value, torch.Tensor):
            if isinstance(value, dict):
                value = next(v for v in value.values() if isinstance(v, torch.Tensor))
            else:
                value = value[0]
    except (StopIteration, IndexError, KeyError, TypeError):
        return None
    return value


def forget_tensors(recorder: ForwardRecorder) -> None:
    """Drop the references to forward's activations, so backward runs with the memory it would
    have without hookviz (leaves, alive anyway, are kept)."""
    recorder.outputs.clear()
    recorder.snapshots.clear()

    # One Edge is often listed twice (outputs and returned): forgotten once. The original is held
    # with its copy so that its id is not reused while this runs.
    forgotten: dict[int, tuple[Edge, Edge]] = {}

    def forget(edges):
        kept = []
        for edge in edges:
            if edge is not None and edge.grad_fn is not None:
                found = forgotten.get(id(edge))
                if found is None:  # NamedTuple._replace costs several times this
                    found = forgotten[id(edge)] = (edge, tuple.__new__(Edge, (None, *edge[1:])))
                edge = found[1]
            kept.append(edge)
        return kept

    for call in recorder.calls:
        call.output_changed_later = any(
            e is not None and e.tensor._version != e.version for e in call.outputs
        )
        call.args, call.kwargs = (), {}
        call.inputs, call.outputs, call.returned = (
            forget(call.inputs),
            forget(call.outputs),
            forget(call.returned),
        )
        call.replaced = None if call.replaced is None else forget(call.replaced)
        call.legacy = None if call.legacy is None else forget([call.legacy])[0]


class ForwardRecorder(TorchFunctionMode):
    """Records module calls and the forward value of each op, while the model's forward runs.

    Use as a context manager around forward (it registers the module hooks on enter and removes
    them on exit, also on error). As a function mode, local to the thread that records, it also
    sees the ``Tensor.register_hook`` calls of forward (see :meth:`_register_hook`) and, with
    ``kept``, each in-place write (so a parameter changed in place is copied first, see
    :class:`~hookviz.record.model_state.KeptState`); nothing outside this thread is patched.
    After forward, ``calls`` holds every module call with the range of Node sequence numbers made
    during it (see :meth:`call_of`), and ``outputs[id(node)]`` the op's output tensor and its
    version at that time. Source of the bracketing: every Node takes
    the next ``torch._C._autograd._get_sequence_nr()`` when it is made (``Node._sequence_nr()``).
    """

    def __init__(
        self,
        model: torch.nn.Module,
        state: RecordingState | None = None,
        snapshot_limit: int = 0,
        values: bool = True,
        kept: KeptState | None = None,
    ):
        super().__init__()
        self.model, self.state, self.kept = model, state, kept
        # values=False (a lazy run): no op's output is kept; forward values and snapshots are left
        # to the full re-run that fills the run's details.
        self.values = values
        # Copies of small tensors as module hooks saw them, for those that forward later changes in
        # place: (id, version) -> copy. Larger ones get a note instead (copying them costs memory).
        self.snapshot_limit = snapshot_limit
        self.snapshots: dict[tuple[int, int], torch.Tensor] = {}
        # A module registered under several names is known by its first (``named_modules`` order).
        self.names: dict[int, str] = {}
        for name, module in module_tree.named_modules(model, remove_duplicate=False):
            self.names.setdefault(id(module), name)
        self.calls: list[CallState] = []
        self.starts: list[int] = []  # sequence_start of each call, ascending (calls start in order)
        self.stack: list[CallState] = []
        self.outputs: dict[int, tuple] = {}
        self.nodes_kept: list = []  # keeps Node objects alive so their ids stay unique
        self.call_counts: dict[str, int] = {}
        self.handles: list = []
        self.returns_seen: set[int] = set()  # id() of the modules with a _returned hook
        # Tensor hooks the model's forward registers on intermediates: (grad_fn, output_nr, wrapper)
        self.intermediate_hooks: list[tuple[object, int, _UserHookWrapper]] = []

    def __enter__(self):
        for module in module_tree.modules(self.model):
            self.handles.append(module.register_forward_pre_hook(self._pre, with_kwargs=True, prepend=True))
            if module._forward_hooks:
                # Prepended: sees the output as forward returned it, before the user's forward
                # hooks. A module without hooks of the user's needs no such hook: _post sees the
                # output as returned (a hook a forward registers goes after _post).
                self.handles.append(
                    module.register_forward_hook(self._returned, with_kwargs=True, prepend=True)
                )
                self.returns_seen.add(id(module))
            self.handles.append(module.register_forward_hook(self._post, with_kwargs=True))
        try:
            return super().__enter__()
        except BaseException:
            self.remove_hooks()
            raise

    def __exit__(self, *exc):
        try:
            return super().__exit__(*exc)
        finally:
            self.remove_hooks()

    def remove_hooks(self) -> None:
        """Remove the module hooks (idempotent)."""
        for handle in self.handles:
            handle.remove()
        self.handles.clear()

    def _register_hook(self, tensor: torch.Tensor, hook):
        """``Tensor.register_hook`` called by the model's forward (seen by this function mode, so
        only in the recording thread): a hook put on an intermediate tensor is wrapped like the
        user's other hooks, so the run shows what it saw and returned (FSDP2's pre-backward
        all-gather is not the user's and is left alone)."""
        if tensor.grad_fn is not None and self.state is not None and not is_framework_hook(hook):
            wrapper = _UserHookWrapper(self.state, hook, "tensor hook", self.current_module or "", None)
            self.intermediate_hooks.append((tensor.grad_fn, tensor.output_nr, wrapper))
            hook = wrapper
        return torch.Tensor.register_hook(tensor, hook)

    @property
    def current_module(self) -> str | None:
        """The innermost module running now (the one an exception escaped from), or None."""
        return self.stack[-1].module if self.stack else None

    def call_of(self, sequence_nr: int) -> int | None:
        """Index of the innermost module call during which the Node numbered ``sequence_nr`` was
        made, or None (made outside every module call, e.g. by ``loss_fn``)."""
        at = bisect_right(self.starts, sequence_nr) - 1
        index = at if at >= 0 else None
        while index is not None:
            call = self.calls[index]
            if call.sequence_start <= sequence_nr < call.sequence_end:
                return index
            index = call.parent
        return None

    def _pre(self, module, args, kwargs):
        with torch._C.DisableTorchFunction():  # our own tensor reads need not pass through the mode
            self._enter(module, args, kwargs)

    def _returned(self, module, args, kwargs, output):
        with torch._C.DisableTorchFunction():
            self.stack[-1].returned = [None if t is None else self._snapshot(t) for t in _entries_in(output)]

    def _snapshot(self, tensor: torch.Tensor, edge: Edge | None = None) -> Edge:
        if self.snapshot_limit and tensor.numel() <= self.snapshot_limit and not tensor.is_sparse:
            self.snapshots[(id(tensor), tensor._version)] = tensor.detach().clone()
        return edge or _edge_of(tensor)

    def seen(self, tensor: torch.Tensor, version: int) -> tuple[torch.Tensor, int | None]:
        """``tensor`` as a hook saw it at ``version``: itself, or its copy when changed since."""
        if tensor._version != version and (id(tensor), version) in self.snapshots:
            return self.snapshots[(id(tensor), version)], None
        return tensor, version

    def _post(self, module, args, kwargs, output):
        with torch._C.DisableTorchFunction():
            self._exit(output, id(module) in self.returns_seen)

    def _enter(self, module, args, kwargs) -> None:
        name = self.names.get(id(module), type(module).__name__)
        count = self.call_counts.get(name, 0)
        self.call_counts[name] = count + 1
        state = CallState(
            len(self.calls),
            name,
            count,
            type(module).__name__,
            module.forward,
            args,
            kwargs,
            parent=self.stack[-1].index if self.stack else None,
            sequence_start=torch._C._autograd._get_sequence_nr(),
            grad_enabled=torch.is_grad_enabled(),
        )
        state.inputs = [self._snapshot(t) if isinstance(t, torch.Tensor) else None for t in args]
        grad_ids = [id(t) for t in args if isinstance(t, torch.Tensor) and t.requires_grad]
        if len(grad_ids) != len(set(grad_ids)):
            state.shared = (args, kwargs, torch.get_rng_state())
        self.calls.append(state)
        self.starts.append(state.sequence_start)
        self.stack.append(state)

    def _exit(self, output, returns_seen: bool) -> None:
        state = self.stack.pop()
        state.sequence_end = torch._C._autograd._get_sequence_nr()
        state.outputs, state.full_hook_fires = _top_level_outputs(output)
        # One Edge per tensor of this output, whichever views list it (it is the same tensor, at
        # the same version, seen at the same moment).
        edges = {id(e.tensor): e for e in state.outputs if e is not None}
        final = _entries_in(output)
        if not returns_seen:  # no forward hook of the user's ran: the output is as forward returned it
            state.returned = [None if t is None else self._snapshot(t, edges.get(id(t))) for t in final]
        elif [e and id(e.tensor) for e in state.returned] != [t is not None and id(t) for t in final]:
            state.replaced = [None if t is None else edges.get(id(t)) or _edge_of(t) for t in final]
        legacy = legacy_hook_tensor(output)
        state.legacy = None if legacy is None else edges.get(id(legacy)) or _edge_of(legacy)
        state.in_place = any(
            e is not None and e.tensor is t and t._version != e.version for t in final for e in state.inputs
        )
        # Ops the mode does not see (a custom autograd.Function's apply) still have a forward value.
        if self.values:
            for tensor in final:
                if tensor is not None:
                    self._note(tensor)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is _REGISTER_HOOK:
            return self._register_hook(*args, **(kwargs or {}))
        if self.kept is not None and writes(func, kwargs):
            self.kept.before_write(func, args, kwargs)
        out = func(*args, **(kwargs or {}))
        if not self.values:
            return out
        if isinstance(out, torch.Tensor):
            self._note(out)
        elif isinstance(out, (tuple, list)):
            for item in out:
                if isinstance(item, torch.Tensor):
                    self._note(item)
        return out

    def _note(self, tensor: torch.Tensor) -> None:
        fn = tensor.grad_fn
        if fn is None or tensor.output_nr != 0 or id(fn) in self.outputs:
            return
        self.nodes_kept.append(fn)
        self.outputs[id(fn)] = (tensor, tensor._version)


class _Packed:
    """What hookviz's pack hook stores: what the user's pack hook made, and the saved tensor's
    ``(shape, dtype, nbytes, stored_on)`` (stored_on: where the user's hook put it)."""

    __slots__ = ("inner", "described")

    def __init__(self, inner, described: tuple):
        self.inner, self.described = inner, described


def _described(tensor: torch.Tensor, stored_on=None) -> tuple:
    """``(shape, dtype, nbytes, stored_on)`` of a saved tensor; ``stored_on`` defaults to its device."""
    where = tensor.device if stored_on is None else stored_on
    return tuple(tensor.shape), tensor.dtype, tensor.numel() * tensor.element_size(), device_name(where)


class SavedTensorsRecorder:
    """``torch.autograd.graph.saved_tensors_hooks`` that note every tensor saved for backward.

    The hooks chain to the user's own (say ``save_on_cpu``) active when the run starts, so those
    still decide where saved tensors live. Reading ``grad_fn._saved_<name>`` later calls the unpack
    hook, which tells which tensors that attribute holds (:meth:`attribute`).

    With no saved-tensor hooks of the user's, hookviz sets none either (:attr:`needed` is False;
    :meth:`hooks` is a no-op): reading ``grad_fn._saved_<name>`` then hands over the saved tensor
    itself, which describes it as well, and PyTorch keeps its own check of a saved tensor's version
    when backward unpacks it (a tensor changed in place after it was saved makes backward raise),
    a check that PyTorch makes only when no saved-tensor hooks are set. Setting hooks anyway costs a
    Python call per saved tensor in forward and again in backward (docs/perf.md). With the user's hooks,
    PyTorch checks nothing, and neither does hookviz.
    Source: https://pytorch.org/docs/stable/autograd.html#torch.autograd.graph.saved_tensors_hooks
    and ``SavedVariable::unpack`` (torch/csrc/autograd/saved_variable.cpp).

    Raises:
        UnsupportedError: the user's hooks are set and torch is too old to hand them over
            (:func:`hookviz.record.torch_compat.saved_tensors_default_hooks`).
    """

    def __init__(self):
        outer = torch_compat.saved_tensors_default_hooks()
        self.outer_pack, self.outer_unpack = outer if outer is not None else (None, None)
        self.needed = outer is not None  # the user's hooks decide where saved tensors live
        self.unpacked: list[_Packed] | None = None  # collects while attribute() reads one

    def pack(self, tensor: torch.Tensor) -> _Packed:
        inner = self.outer_pack(tensor)
        stored = next((t.device for t in _tensors_in(inner)), "elsewhere")
        return _Packed(inner, _described(tensor, stored))

    def unpack(self, packed: _Packed) -> torch.Tensor:
        if self.unpacked is not None:
            self.unpacked.append(packed)
        return self.outer_unpack(packed.inner)

    def hooks(self):
        """The context manager to wrap forward in (a no-op when :attr:`needed` is False)."""
        if not self.needed:
            return contextlib.nullcontext()
        return torch.autograd.graph.saved_tensors_hooks(self.pack, self.unpack)

    def attribute(self, fn, name: str) -> tuple[list[tuple], list[torch.Tensor], bool | int | float | None]:
        """``(shape, dtype, nbytes, stored_on)`` of each tensor behind ``fn.<name>``, the tensors
        themselves as unpacking hands them over (empty when that count differs), and the Python
        number it holds, if it is one.

        A number is a saved scalar argument (``_saved_alpha``, ``_saved_exponent``) or a wrapped
        Python number: PyTorch saves the ``2`` of ``2 * x`` as a one-element CPU tensor without
        calling pack hooks. Such tensors are described from the tensor itself.
        """
        if self.needed:  # the user's pack hooks ran: what they stored is described by ours
            self.unpacked = []
            try:
                value = getattr(fn, name)
            finally:
                packed, self.unpacked = self.unpacked, None
            found = [p.described for p in packed]
            if found:
                tensors = _tensors_in(value)
                return found, tensors if len(tensors) == len(found) else [], None
        else:
            value = getattr(fn, name)
        if isinstance(value, bool):
            return [], [], value
        if isinstance(value, int):  # PyTorch hands a saved int64 over as uint64: -1 arrives as 2**64 - 1
            return [], [], value - 2**64 if value >= 2**63 else value
        if isinstance(value, float):
            return [], [], value
        values = value if isinstance(value, (tuple, list)) else (value,)
        tensors = [t for t in values if isinstance(t, torch.Tensor)]
        wrapped = (
            isinstance(value, torch.Tensor)
            and value.dim() == 0
            and value.device.type == "cpu"  # .item() on an accelerator would wait for it
            and not value.requires_grad
            and not value.is_complex()
        )
        return [_described(t) for t in tensors], tensors, value.item() if wrapped else None


# ----------------------------------------------------------------------------------------------
# Backward
# ----------------------------------------------------------------------------------------------


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
        self.log: list[LogEntry] = []

    def begin_backward(
        self, op_nodes, settle, keep: frozenset, keep_outputs: frozenset = frozenset()
    ) -> None:
        """Sort the Node and leaf edits, now that the graph is known, before backward runs.

        Args:
            op_nodes: ids of the op Nodes (``grad`` on one of them edits its ``grad_outputs[0]``,
                as a tensor hook on its output would; on a leaf, the leaf's gradient).
            settle: see :meth:`hookviz.data.tensors.StatsBatch.settle`. keep: (node, slot) pairs whose
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

    def user_hook_called(self, call: HookCall, before: tuple, after: tuple, printed: str) -> None:
        """Record a call of a user's hook (made by :func:`wrap_user_hook`)."""
        self.events.append(
            Event(call.step, "user_hook", call.node, f"{call.kind} {call.name} @ {call.where}")
        )
        self.hook_calls.append((call, before, after))
        if printed:
            self.log.append(LogEntry(call.name, call.where, printed))


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


# ----------------------------------------------------------------------------------------------
# The user's own hooks
# ----------------------------------------------------------------------------------------------

TENSOR_HOOK_DICTS = {
    "_backward_hooks": "tensor hook",
    "_post_accumulate_grad_hooks": "post-accumulate-grad hook",
}
MODULE_HOOK_DICTS = {
    "_forward_pre_hooks": "forward pre-hook",
    "_forward_hooks": "forward hook",
    "_backward_pre_hooks": "full backward pre-hook",
    "_backward_hooks": "backward hook",
}


def _hook_name(fn) -> str:
    target = getattr(fn, "func", fn)  # functools.partial
    return getattr(target, "__qualname__", None) or type(target).__name__


def module_hook_kind(module: torch.nn.Module, attribute: str) -> str:
    """``"legacy backward hook"`` or ``"full backward hook"`` for ``_backward_hooks``, etc."""
    kind = MODULE_HOOK_DICTS[attribute]
    if attribute == "_backward_hooks":
        return "full backward hook" if module._is_full_backward_hook else "legacy backward hook"
    return kind


def user_module_hooks(model: torch.nn.Module) -> dict[str, list[HookInfo]]:
    """Every hook registered on the model's modules, by module name."""
    found: dict[str, list[HookInfo]] = {}
    for name, module in module_tree.named_modules(model):
        for attribute in MODULE_HOOK_DICTS:
            for fn in getattr(module, attribute).values():
                if is_framework_hook(fn):  # FSDP2's all-gather / reduce-scatter set-up, not the user's
                    continue
                found.setdefault(name, []).append(
                    HookInfo(module_hook_kind(module, attribute), _hook_name(fn), name)
                )
    return found


def user_tensor_hooks(tensors: dict[str, torch.Tensor]) -> dict[str, list[HookInfo]]:
    """Tensor hooks (``register_hook``, ``register_post_accumulate_grad_hook``) by leaf name."""
    found: dict[str, list[HookInfo]] = {}
    for name, tensor in tensors.items():
        for attribute, kind in TENSOR_HOOK_DICTS.items():
            for fn in (getattr(tensor, attribute, None) or {}).values():
                found.setdefault(name, []).append(HookInfo(kind, _hook_name(fn), name))
    return found


def _snapshot(grads) -> tuple:
    return tuple(g.detach().clone() if isinstance(g, torch.Tensor) else None for g in grads)


def _as_tuple(value) -> tuple:
    return value if isinstance(value, tuple) else (value,)


class _Tee:
    """Stands for ``sys.stdout`` / ``sys.stderr`` while a user's hook runs: every write goes through
    to the stream it stands for, as without hookviz; those of the hook's own thread are also
    appended to ``copy`` (or, with ``copy=None``, not written at all: hookviz's own re-run of a
    forward, which plain PyTorch never runs)."""

    def __init__(self, target, copy: list[str] | None):
        self.target, self.copy, self.thread = target, copy, threading.get_ident()

    def write(self, text: str) -> int:
        if threading.get_ident() != self.thread:
            return self.target.write(text)
        if self.copy is None:
            return len(text)
        self.copy.append(text)
        return self.target.write(text)

    def flush(self) -> None:
        self.target.flush()

    def __getattr__(self, name: str):  # encoding, isatty, fileno, buffer ... of the stream stood for
        return getattr(self.target, name)


@contextlib.contextmanager
def printed_copied(copy: list[str] | None) -> Iterator[None]:
    """For the block, what this thread prints (``print``, warnings, ``breakpoint()``'s prompt)
    still reaches ``sys.stdout`` / ``sys.stderr`` and is also appended to ``copy``; with
    ``copy=None`` this thread's output is dropped. Other threads' output is untouched."""
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _Tee(out, copy), _Tee(err, copy)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = out, err


class _UserHookWrapper:
    """Calls a user's hook exactly as PyTorch would, recording what it saw, returned and printed."""

    def __init__(self, state: RecordingState, original, kind: str, where: str, node: str | None):
        self.state, self.original, self.kind, self.where, self.node = state, original, kind, where, node
        self.name = _hook_name(original)
        self.__wrapped__ = original

    def __call__(self, *args, **kwargs):
        recorder = self.state.active
        if recorder is None:
            return self.original(*args, **kwargs)
        grads = self._grads(args)
        before = _snapshot(grads) if grads is not None else ()
        printed: list[str] = []
        with printed_copied(printed):
            result = self.original(*args, **kwargs)
        after = () if grads is None else (_as_tuple(result) if result is not None else tuple(grads))
        call = HookCall(
            next(recorder.steps),
            self.kind,
            self.name,
            self.where,
            returned=result is not None,
            node=self.node,
        )
        recorder.user_hook_called(call, before, tuple(after), "".join(printed))
        return result

    def _grads(self, args):
        if self.kind == "tensor hook":
            return (args[0],)
        if self.kind in ("legacy backward hook", "full backward hook"):
            return _as_tuple(args[1])
        if self.kind == "full backward pre-hook":
            return _as_tuple(args[1])
        return None  # forward hooks: module_io records what they see


@contextlib.contextmanager
def wrapped_user_hooks(
    state: RecordingState, model: torch.nn.Module, tensors: dict[str, torch.Tensor]
) -> Iterator[None]:
    """Temporarily replace each user hook in its dict by a recording wrapper; always restores.

    The dicts keep their keys, so RemovableHandles the user holds stay valid, and PyTorch calls
    the wrappers in the same order and with the same arguments as the originals.
    """
    swapped: list[tuple[dict, object, object]] = []
    try:
        for name, module in module_tree.named_modules(model):
            for attribute in MODULE_HOOK_DICTS:
                hooks = getattr(module, attribute)
                for key, fn in list(hooks.items()):
                    if isinstance(fn, _UserHookWrapper) or is_framework_hook(fn):  # FSDP2's own
                        continue
                    hooks[key] = _UserHookWrapper(state, fn, module_hook_kind(module, attribute), name, None)
                    swapped.append((hooks, key, fn))
        for name, tensor in tensors.items():
            hooks = getattr(tensor, "_backward_hooks", None)
            for key, fn in list((hooks or {}).items()):
                hooks[key] = _UserHookWrapper(state, fn, "tensor hook", name, name)
                swapped.append((hooks, key, fn))
        yield
    finally:
        for hooks, key, fn in swapped:
            if key in hooks:
                hooks[key] = fn


_MODULE_HOOK_STATE = (
    "_forward_pre_hooks",
    "_forward_pre_hooks_with_kwargs",
    "_forward_hooks",
    "_forward_hooks_with_kwargs",
    "_forward_hooks_always_called",
    "_backward_pre_hooks",
    "_backward_hooks",
    "_is_full_backward_hook",
)


def module_hook_state(model: torch.nn.Module) -> dict:
    """The hooks on every module now (copies of the dicts that are not empty), for
    :func:`module_hooks_as` to put back later."""
    state = {}
    for module in module_tree.modules(model):
        saved = {}
        for attribute in _MODULE_HOOK_STATE:
            value = getattr(module, attribute, None)
            if value or (attribute == "_is_full_backward_hook" and value is not None):
                saved[attribute] = copy_of(value)
        if saved:
            state[module] = saved
    return state


def copy_of(value):
    return type(value)(value) if isinstance(value, dict) else value


@contextlib.contextmanager
def module_hooks_as(model: torch.nn.Module, state: dict) -> Iterator[None]:
    """Give every module the hooks of ``state`` (from :func:`module_hook_state`) for the body, then
    its own again: a lazy run's details are recorded with the hooks the run had, even if the user
    removed or added some since."""
    kept = []
    try:
        for module in module_tree.modules(model):
            saved = state.get(module, {})
            current = {a: getattr(module, a, None) for a in _MODULE_HOOK_STATE}
            kept.append((module, current))
            for attribute, value in current.items():
                if attribute == "_is_full_backward_hook":
                    object.__setattr__(module, attribute, saved.get(attribute))
                elif value is not None:
                    object.__setattr__(module, attribute, copy_of(saved.get(attribute, type(value)())))
        yield
    finally:
        for module, current in kept:
            for attribute, value in current.items():
                if value is not None or attribute == "_is_full_backward_hook":
                    object.__setattr__(module, attribute, value)


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
