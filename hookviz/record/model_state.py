"""The model's state before a recorded run, and putting it back after the backward that needs it.

hookviz observes, it does not train: after a run the model is as it was before it. Put back are, per
module, every entry of its ``__dict__`` (plain attributes, ``training``,
``_is_full_backward_hook``), of ``_parameters``, ``_buffers`` and ``_modules`` (names the forward
added are removed, names it swapped get their object back) and of every hook dict
(``_forward_hooks``, ``_backward_hooks``, ``_forward_pre_hooks``, ``_forward_hooks_with_kwargs``,
...: a hook the forward registered is removed), and so are the process-wide module hooks
(``torch.nn.modules.module``'s ``_global_*`` dicts, filled by ``register_module_forward_hook`` and
its siblings, and its ``_global_is_full_backward_hook``); per parameter, buffer and input leaf: its
value, its place (storage, shape, strides: a ``p.set_(t)`` or ``p.data = t`` is undone),
``requires_grad``, ``.grad`` (which tensor, and its values), its version counter and its tensor hook
dicts (``register_hook``, ``register_post_accumulate_grad_hook``); per input that autograd made (not
a leaf), its tensor hook dicts alone. Contents of a mutable attribute (a list the forward appends
to) are the user's: only which object each name holds is put back. A forward may change all of
these: BatchNorm updates its running statistics, a step counter does ``self.n += 1``, a buffer is
reassigned, a parameter is changed in place under ``torch.no_grad()``, a hook is registered on each
call, ``p.grad.zero_()`` runs, a ``loss_fn`` calls ``backward()`` itself.

The state is put back *after* the backward of the run, never between forward and backward: a Node
that saved a buffer (``lin(x) * self.n``) must compute with the value forward gave it, and a hook
the forward registered on a parameter must fire in that backward, exactly as a plain
``loss.backward()`` after a plain forward does.

Buffers are copied before forward (they are small, and BatchNorm's kernel updates its running
statistics without bumping the version counter, so only a copy tells). Parameters and gradients are
not copied up front (that would double the cost of a step on a small model): an in-place write to
one during the recorded forward (``p.mul_``, ``p.data.add_``, ``p[0] = 1``, ``p.grad.zero_()``) is
seen by a ``torch.overrides.TorchFunctionMode``, which is local to the recording thread, and the
tensor is copied just before it (:meth:`KeptState.before_write`); a ``.grad`` that autograd is about
to sum into (a backward inside forward or ``loss_fn``) is copied by a pre-hook on the parameter's
``AccumulateGrad`` Node (:meth:`KeptState.accumulation_watched`). ``Tensor.set_`` passes no
function mode; it is undone from an alias of each tensor's storage taken up front. Version counters
are set back with ``torch._C._autograd._unsafe_set_version_counter``, so a graph the user built before
the run still accepts the tensors it saved.
"""

from __future__ import annotations

import collections
import contextlib
import operator
import warnings
from collections.abc import Iterator

import torch
from torch.overrides import TorchFunctionMode

from hookviz.record import module_tree, torch_compat

# The tensor hook dicts: ``Tensor.register_hook`` and ``register_post_accumulate_grad_hook``.
TENSOR_HOOK_ATTRIBUTES = ("_backward_hooks", "_post_accumulate_grad_hooks")
# Every dict a module has from torch.nn.Module.__init__ whose entries a forward may add or swap
_MODULE_DICTS = tuple(
    name
    for name, value in vars(torch.nn.Module()).items()
    if isinstance(value, dict) and (name in ("_parameters", "_buffers", "_modules") or "_hooks" in name)
)
# The process-wide module hooks (``torch.nn.modules.module.register_module_forward_hook`` and its
# siblings keep them in these dicts of that module) and the flag that says whether its backward
# hooks are full ones.
_NN_MODULE = torch.nn.modules.module
_GLOBAL_HOOK_DICTS = tuple(
    name
    for name, value in vars(_NN_MODULE).items()
    if name.startswith("_global_") and isinstance(value, dict)
)
_GLOBAL_FULL_BACKWARD_FLAG = "_global_is_full_backward_hook"


def _version(tensor: torch.Tensor) -> int | None:
    return None if tensor.is_inference() else tensor._version  # no version counter there


def _storage(tensor) -> int | None:
    """The address of ``tensor``'s storage (a view shares its base's), or None where it has none."""
    try:
        return tensor.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError, TypeError):  # a tensor subclass without storage
        return None


def writes(func, kwargs: dict | None) -> bool:
    """Whether a torch function may write into its first argument (``add_``, ``__setitem__``, the
    ``.data`` setter) or into ``out=``: PyTorch's convention is a trailing underscore for in-place
    ops (https://pytorch.org/docs/stable/tensors.html)."""
    if kwargs and kwargs.get("out") is not None:
        return True
    name = getattr(func, "__name__", "")
    return name in ("__setitem__", "__set__") or (name.endswith("_") and not name.endswith("__"))


class KeptState:
    """What a run may change in ``model`` (and in ``tensors``, the input leaves it is given),
    captured now; :meth:`put_back` restores it (see the module docstring for what that is).

    Parameters and gradients written in place are copied by :meth:`before_write`, called before
    each write while forward runs (by hookviz's function mode), and by the pre-hooks of
    :meth:`accumulation_watched`.
    """

    def __init__(self, model: torch.nn.Module, tensors=()):
        self.model = model
        modules = module_tree.modules(model)
        self.dicts = [entry for module in modules for entry in _kept_dicts(module)]
        for name in _GLOBAL_HOOK_DICTS:
            hooks = getattr(_NN_MODULE, name)
            self.dicts.append((hooks, dict(hooks) if hooks else None, True))
        self.full_backward_flag = getattr(_NN_MODULE, _GLOBAL_FULL_BACKWARD_FLAG, None)
        self.sets = [(m, set(m._non_persistent_buffers_set)) for m in modules]
        self.tensors = [_TensorState(p) for p in module_tree.parameters(model)]
        known = {id(state.tensor) for state in self.tensors}
        self.tensors += [_TensorState(t) for t in tensors if id(t) not in known and t.grad_fn is None]
        # An input made by autograd (not a leaf) keeps only its hooks: its value is the user's graph's.
        self.hooked = [(t, _hook_dicts(t)) for t in tensors if t.grad_fn is not None]
        self.buffers = [_TensorState(b, copy=True) for _, b in module_tree.named_buffers(model)]
        # id(tensor) -> (tensor, copy of its value before the run's first write to it)
        self.written: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self._by_storage: dict[int, tuple[torch.Tensor, torch.Tensor]] | None = None
        self.changed: bool | None = None  # known once put back
        self.after: _After | None = None  # what the run left, known once put back

    def before_write(self, func, args: tuple, kwargs: dict | None) -> None:
        """Copy each parameter, input leaf or ``.grad`` that ``func(*args, **kwargs)`` is about to
        write (first argument, ``out=``, or a list of them for ``torch._foreach_*_``), once per run.
        An attribute set (``.data = t``, ``.grad = g``) needs no copy: the objects were kept."""
        if getattr(func, "__name__", "") == "__set__":
            return
        if self._by_storage is None:
            self._by_storage = {}
            for state in self.tensors:
                # The storage as captured: a write after ``set_`` goes elsewhere, and needs no copy.
                for tensor, source in ((state.tensor, state.data), (state.grad, state.grad)):
                    address = None if tensor is None else _storage(source)
                    if address is not None:
                        self._by_storage.setdefault(address, (tensor, source))
        targets = [kwargs["out"]] if kwargs and kwargs.get("out") is not None else list(args[:1])
        if targets and isinstance(targets[0], (list, tuple)):
            targets = list(targets[0])
        for target in targets:
            if isinstance(target, torch.Tensor):
                found = self._by_storage.get(_storage(target))
                if found is not None:
                    self.copy_first(*found)

    def copy_first(self, tensor: torch.Tensor, source: torch.Tensor | None = None) -> None:
        """Keep a copy of ``tensor``'s value (read through ``source``, an alias of its storage as
        captured) unless one is kept already."""
        if id(tensor) not in self.written:
            with torch_compat.torch_function_disabled(), torch.no_grad():
                self.written[id(tensor)] = (tensor, (tensor if source is None else source).detach().clone())

    def watching(self) -> _WriteWatch:
        """A function mode that calls :meth:`before_write` (for a forward that has no recorder's)."""
        return _WriteWatch(self)

    @contextlib.contextmanager
    def accumulation_watched(self) -> Iterator[None]:
        """For the block, a ``.grad`` that autograd is about to sum into (``loss.backward()`` inside
        forward or ``loss_fn``, an LBFGS closure) is copied first: a pre-hook on the leaf's
        ``AccumulateGrad`` Node, which sums in place in C++ where no function mode sees it. Only
        leaves with a ``.grad`` get one (a missing ``.grad`` is replaced, not written into).
        Source: ``torch.autograd.graph.get_gradient_edge``, ``Node.register_prehook``."""
        nodes, handles = [], []
        try:
            for state in self.tensors:
                if state.grad is not None and state.tensor.requires_grad:
                    node = torch.autograd.graph.get_gradient_edge(state.tensor).node
                    nodes.append(node)  # held, so the forward's graph uses this very Node
                    handles.append(node.register_prehook(_CopyGradFirst(self, state.tensor)))
            yield
        finally:
            for handle in handles:
                handle.remove()

    def put_back(self) -> bool:
        """Restore everything captured; idempotent. Returns whether anything had changed. What the
        run left is kept (:meth:`reapply` gives it back for a later backward on the same graph)."""
        if self.changed is not None:
            return self.changed
        after = self.after = _After()
        for live, contents, ordered in self.dicts:
            if not _unchanged(live, contents):
                after.dicts.append((live, dict(live), ordered))
                _put(live, contents, ordered)
        for module, names in self.sets:
            if module._non_persistent_buffers_set != names:
                after.sets.append((module, module._non_persistent_buffers_set))
                module._non_persistent_buffers_set = set(names)
        if after.dicts or after.sets:
            module_tree.relist(self.model)
        flag = getattr(_NN_MODULE, _GLOBAL_FULL_BACKWARD_FLAG, None)
        if flag is not self.full_backward_flag:
            after.full_backward_flag = flag
            setattr(_NN_MODULE, _GLOBAL_FULL_BACKWARD_FLAG, self.full_backward_flag)
        for tensor, hooks in self.hooked:
            _put_back_hooks(tensor, hooks, after)
        restored: set[int] = set()
        with torch.inference_mode(False), torch.no_grad(), torch_compat.torch_function_disabled():
            for state in self.tensors + self.buffers:
                written = self.written.get(id(state.tensor))
                state.put_back_value(None if written is None else written[1], after)
                restored.add(id(state.tensor))
            for tensor, copy in self.written.values():
                if id(tensor) not in restored:  # a .grad
                    tensor.copy_(copy)
        unseen = [
            s.tensor
            for s in self.tensors
            if _version(s.tensor) != s.version and id(s.tensor) not in self.written and not s.moved
        ]
        tensors, versions = [], []
        for state in self.tensors + self.buffers:
            tensor = state.tensor
            if tensor.grad is not state.grad:
                tensor.grad = state.grad
            if tensor.requires_grad != state.requires_grad:
                tensor.requires_grad_(state.requires_grad)
            if state.version is not None and tensor._version != state.version:
                tensors.append(tensor)
                versions.append(state.version)
            state.put_back_hooks(after)
        if tensors:
            torch_compat.set_version_counters(tensors, versions)
        if unseen:  # written where hookviz's function mode could not see it (C++ code)
            warnings.warn(
                f"{len(unseen)} parameter(s) (the first of shape {list(unseen[0].shape)}) were changed in "
                "place during the run where hookviz could not copy them first, so they keep their new "
                "values; write them from Python code (p.mul_(...), p.data.copy_(...)) to let hookviz "
                "put them back",
                RuntimeWarning,
                stacklevel=2,
            )
        flag = after.full_backward_flag is not _MISSING
        self.changed = bool(after.dicts or after.sets or after.tensors or after.hooks or tensors or flag)
        return self.changed

    def reapply(self, forward: KeptState) -> None:
        """Give the model the state that ``forward``'s run left (values, places, version counters,
        which object each name holds, hooks the forward registered), for another backward on that
        run's graph: its Nodes may have saved those tensors, and those hooks must fire there too.
        This state's :meth:`put_back` undoes it."""
        after = forward.after
        for live, contents, ordered in after.dicts:
            _put(live, contents, ordered)
        for module, names in after.sets:
            module._non_persistent_buffers_set = set(names)
        if after.dicts or after.sets:
            module_tree.relist(self.model)
        if after.full_backward_flag is not _MISSING:
            setattr(_NN_MODULE, _GLOBAL_FULL_BACKWARD_FLAG, after.full_backward_flag)
        for tensor, attribute, contents in after.hooks:
            hooks = getattr(tensor, attribute, None)
            if hooks is None:
                setattr(tensor, attribute, collections.OrderedDict(contents))
            else:
                _put(hooks, contents, True)
        tensors, versions = [], []
        with torch.inference_mode(False), torch.no_grad(), torch_compat.torch_function_disabled():
            for tensor, data, value, version in after.tensors:
                if value is not None:
                    self.copy_first(tensor)
                if data is not None:
                    tensor.data = data
                if value is not None:
                    tensor.copy_(value)
                if version is not None:
                    tensors.append(tensor)
                    versions.append(version)
        if tensors:
            torch_compat.set_version_counters(tensors, versions)


class _TensorState:
    """One parameter's, buffer's or input leaf's state: ``data`` (an alias of its storage, shape and
    strides), ``place`` (their summary), ``requires_grad``, ``grad`` (the object), ``version``,
    ``hooks`` (each tensor hook dict and a copy of its contents) and, for a buffer, ``value`` (a
    copy)."""

    __slots__ = ("tensor", "data", "place", "requires_grad", "grad", "version", "hooks", "value", "moved")

    def __init__(self, tensor: torch.Tensor, copy: bool = False):
        self.tensor, self.data, self.value = tensor, tensor.data, None
        if copy:
            with torch.inference_mode(False), torch.no_grad():
                self.value = tensor.detach().clone()
        self.place = _place(tensor)
        self.requires_grad, self.grad, self.version = tensor.requires_grad, tensor.grad, _version(tensor)
        self.hooks = _hook_dicts(tensor)
        self.moved = False

    def put_back_value(self, written: torch.Tensor | None, after: _After) -> None:
        """Put back the storage, shape and strides, then the value (from ``written``, the copy
        taken before the run's first write, or from a buffer's copy); note what the run left."""
        tensor = self.tensor
        self.moved = _place(tensor) != self.place
        left = tensor.data if self.moved else None
        changed = written is not None or (self.value is not None and not _same(tensor, self.value))
        if changed and not self.moved:
            left_value = tensor.detach().clone()
        else:
            left_value = None
        if self.moved or changed:
            after.tensors.append((tensor, left, left_value, _version(tensor)))
        if self.moved:
            tensor.data = self.data
        if written is not None:
            tensor.copy_(written)
        elif self.value is not None and (self.moved or changed) and not _same(tensor, self.value):
            tensor.copy_(self.value)

    def put_back_hooks(self, after: _After) -> None:
        """Give each tensor hook dict its contents back (a hook registered during the run goes)."""
        _put_back_hooks(self.tensor, self.hooks, after)


def _hook_dicts(tensor: torch.Tensor) -> list[tuple[str, dict | None, dict | None]]:
    """Each tensor hook dict of ``tensor``: (attribute, the dict or None, a copy of its contents)."""
    found = []
    for attribute in TENSOR_HOOK_ATTRIBUTES:
        hooks = getattr(tensor, attribute, None)
        found.append((attribute, hooks, None if hooks is None else dict(hooks)))
    return found


def _put_back_hooks(tensor: torch.Tensor, kept: list, after: _After) -> None:
    """Give each of ``tensor``'s hook dicts the contents ``kept`` (from :func:`_hook_dicts`) back;
    what the run left goes into ``after.hooks``."""
    for attribute, hooks, contents in kept:
        now = getattr(tensor, attribute, None)
        if now is hooks and (hooks is None or _unchanged(now, contents)):
            continue
        if now is None or (hooks is None and not now):
            if hooks is not None:
                setattr(tensor, attribute, hooks)
            continue
        after.hooks.append((tensor, attribute, dict(now)))
        if hooks is None:
            now.clear()  # emptied, not unset: setting None would clear the tensor's C++ hooks
        else:
            if now is not hooks:
                setattr(tensor, attribute, hooks)
            _put(hooks, contents, True)


class _After:
    """What a run left in the model, taken by :meth:`KeptState.put_back` as it restores the state
    before: ``dicts`` (live dict, its contents, ordered), ``sets`` (module, its non-persistent
    buffer names), ``tensors`` (tensor, alias of its storage when that moved or None, copy of its
    value when that changed in place or None, version), ``hooks`` (tensor, hook dict attribute,
    contents) and ``full_backward_flag`` (``torch.nn.modules.module._global_is_full_backward_hook``
    when the run changed it, else ``_MISSING``)."""

    def __init__(self):
        self.dicts: list = []
        self.sets: list = []
        self.tensors: list = []
        self.hooks: list = []
        self.full_backward_flag = _MISSING


class _CopyGradFirst:
    """Pre-hook on a leaf's ``AccumulateGrad`` Node: ``hook(grad_outputs)`` copies the leaf's
    ``.grad`` before autograd sums into it; returns None (the gradient is unchanged)."""

    __slots__ = ("kept", "tensor")

    def __init__(self, kept: KeptState, tensor: torch.Tensor):
        self.kept, self.tensor = kept, tensor

    def __call__(self, grad_outputs):
        grad = self.tensor.grad
        if grad is not None:
            self.kept.copy_first(grad)


_MISSING = object()


def _kept_dicts(module: torch.nn.Module) -> list[tuple[dict, dict | None, bool]]:
    """The dicts of ``module`` a run may change, each with a copy of its contents now (None when
    empty) and whether its order matters (hooks run in it): its ``__dict__``, ``_parameters``,
    ``_buffers``, ``_modules`` and every hook dict ``torch.nn.Module`` has (``_forward_hooks``,
    ``_backward_hooks``, ``_forward_hooks_with_kwargs``, ``_state_dict_hooks``, ...)."""
    attributes = module.__dict__
    found = [(attributes, dict(attributes), False)]
    for name in _MODULE_DICTS:
        value = attributes.get(name)
        if value is not None:
            found.append((value, dict(value) if value else None, True))
    return found


def _unchanged(live: dict, contents: dict | None) -> bool:
    """Whether ``live`` holds exactly the objects of ``contents``, by identity, in its order."""
    if contents is None:
        return not live
    return live.keys() == contents.keys() and all(map(operator.is_, live.values(), contents.values()))


def _put(live: dict, contents: dict | None, ordered: bool) -> None:
    """Make ``live`` hold ``contents`` again, keeping the dict object (handles point at it)."""
    if contents is None:
        live.clear()
        return
    for name in [n for n in live if n not in contents]:
        del live[name]
    for name, value in contents.items():
        if live.get(name, _MISSING) is not value:
            live[name] = value
    if ordered and list(live) != list(contents):  # a name removed and added again
        live.clear()
        live.update(contents)


def _place(tensor: torch.Tensor) -> tuple:
    """Where ``tensor``'s elements are: address of its first element, shape, strides, dtype, device
    (a storage swapped by ``set_`` or ``.data = t`` has another address)."""
    try:
        return tensor.data_ptr(), tensor.shape, tensor.stride(), tensor.dtype, tensor.device
    except (RuntimeError, NotImplementedError, TypeError):  # a tensor subclass without storage
        return None, tensor.shape, None, tensor.dtype, tensor.device


def _same(buffer: torch.Tensor, value: torch.Tensor) -> bool:
    """Whether ``buffer`` still holds ``value`` (shape, dtype and every element)."""
    if buffer.shape != value.shape or buffer.dtype != value.dtype or buffer.device != value.device:
        return False
    try:
        return torch.equal(buffer, value)
    except (RuntimeError, NotImplementedError):  # a layout torch.equal does not take: assume changed
        return False


class _WriteWatch(TorchFunctionMode):
    """Calls :meth:`KeptState.before_write` before each torch function that writes in place."""

    def __init__(self, kept: KeptState):
        super().__init__()
        self.kept = kept

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if writes(func, kwargs):
            self.kept.before_write(func, args, kwargs)
        return func(*args, **(kwargs or {}))
