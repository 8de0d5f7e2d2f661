"""The forward recorder: module calls and op outputs, seen while the model's forward runs.

A forward pre-hook and a forward hook on every module keep the stack of module calls, and a
``TorchFunctionMode`` (local to the recording thread: nothing process-wide is patched) sees the
``Tensor.register_hook`` calls of forward, copies a parameter before forward writes it in place and,
when forward values are recorded (full details), keeps each op's output for its statistics. Forward
hooks and function modes do not touch autograd, so gradients stay bit-identical.
"""

from __future__ import annotations

import itertools
from bisect import bisect_right
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

import torch
from torch.overrides import TorchFunctionMode

from hookviz.record import devices, module_tree, torch_compat
from hookviz.record.distributed import is_framework_hook
from hookviz.record.model_state import KeptState, writes
from hookviz.record.torch_compat import pytree
from hookviz.record.user_hooks import UserHookWrapper

if TYPE_CHECKING:  # for annotations only
    from hookviz.record.backward_recorder import RecordingState

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
    # One tensor passed as several positional arguments: the arguments, kwargs, the accelerators it
    # uses and the random state of those and the CPU at the call, kept so its full-hook grad_input
    # can be split per argument after backward.
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


def _entries_in(value) -> list[torch.Tensor | None]:
    """Every entry of a value as a forward hook gets it, in pytree order: the tensors, and None for
    anything else (``MultiheadAttention``'s ``(output, None)`` keeps its None)."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)) and all(isinstance(v, torch.Tensor) for v in value):
        return list(value)
    return [t if isinstance(t, torch.Tensor) else None for t in pytree.tree_leaves(value)]


def _edge_of(tensor: torch.Tensor) -> Edge:
    fn = tensor.grad_fn
    return Edge(
        tensor,
        fn,
        tensor.output_nr if fn is not None else 0,
        tensor._version,
        tensor.requires_grad,
        tensor.shape,  # a torch.Size, which is a tuple
        tensor.dtype,
        tensor.device,
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
                if found is None:
                    found = forgotten[id(edge)] = (edge, edge._replace(tensor=None))
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
        self.intermediate_hooks: list[tuple[object, int, UserHookWrapper]] = []

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
            wrapper = UserHookWrapper(self.state, hook, "tensor hook", self.current_module or "", None)
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
        with torch_compat.torch_function_disabled():  # our own tensor reads need not pass through the mode
            self._enter(module, args, kwargs)

    def _returned(self, module, args, kwargs, output):
        with torch_compat.torch_function_disabled():
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
        with torch_compat.torch_function_disabled():
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
            sequence_start=torch_compat.next_sequence_nr(),
            grad_enabled=torch.is_grad_enabled(),
        )
        state.inputs = [self._snapshot(t) if isinstance(t, torch.Tensor) else None for t in args]
        grad_ids = [id(t) for t in args if isinstance(t, torch.Tensor) and t.requires_grad]
        if len(grad_ids) != len(set(grad_ids)):
            tensors = [t for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
            used = devices.accelerators(itertools.chain(tensors, module.parameters(), module.buffers()))
            state.shared = (args, kwargs, used, devices.random_state(used))
        self.calls.append(state)
        self.starts.append(state.sequence_start)
        self.stack.append(state)

    def _exit(self, output, returns_seen: bool) -> None:
        state = self.stack.pop()
        state.sequence_end = torch_compat.next_sequence_nr()
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
