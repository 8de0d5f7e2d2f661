"""The model's state before a recorded run, and putting it back after the backward that needs it.

hookviz observes, it does not train: after a run the model's parameters and buffers (their values,
their identity in each module, ``requires_grad``, ``.grad`` and version counters) and every module's
train/eval mode are as they were before it. A forward may change them: BatchNorm updates its
running statistics, a step counter does ``self.n += 1``, a buffer is reassigned (``self.n = self.n
+ 1``), a parameter is changed in place under ``torch.no_grad()``.

The state is put back *after* the backward of the run, never between forward and backward: a Node
that saved a buffer (``lin(x) * self.n``) must compute with the value forward gave it, exactly as
a plain ``loss.backward()`` after a plain forward does; written back before backward, through
``.data`` (which bypasses the version counter), autograd could not notice and would compute with
the old value.

Buffers are copied before forward (they are small, and BatchNorm's kernel updates its running
statistics without bumping the version counter, so only a copy tells). Parameters are not copied up
front (that would double the cost of a step on a small model): an in-place write to one during the
recorded forward (``p.mul_``, ``p.data.add_``, ``p[0] = 1``, ``p.data = t``) is seen by a
``torch.overrides.TorchFunctionMode``, which is local to the recording thread, and the parameter is
copied just before it (:meth:`KeptState.before_write`). Version counters are set back with
``torch._C._autograd._unsafe_set_version_counter``, so a graph the user built before the run still
accepts the tensors it saved.
"""

from __future__ import annotations

import warnings

import torch
from torch.overrides import TorchFunctionMode

from hookviz.record import module_tree, torch_compat


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
    """What a run may change in ``model``, captured now; :meth:`put_back` restores it.

    Captured per module: the ``_parameters`` and ``_buffers`` entries (which tensor object each name
    holds), and ``training``; per parameter: ``requires_grad``, ``.grad`` and the version counter;
    per buffer: the same and a copy of its value. Parameters written in place are copied by
    :meth:`before_write`, called before each write while forward runs (by hookviz's function mode).
    """

    def __init__(self, model: torch.nn.Module):
        self.modules = [
            (m, dict(m._parameters), dict(m._buffers), set(m._non_persistent_buffers_set), m.training)
            for m in module_tree.modules(model)
        ]
        self.parameters = [(p, p.requires_grad, p.grad, _version(p)) for p in module_tree.parameters(model)]
        self.buffers = []
        for _, buffer in module_tree.named_buffers(model):
            with torch.inference_mode(False), torch.no_grad():
                value = buffer.detach().clone()
            self.buffers.append((buffer, value, buffer.requires_grad, buffer.grad, _version(buffer)))
        self.written: dict[int, tuple[torch.nn.Parameter, torch.Tensor | None, torch.Tensor | None]] = {}
        self._by_storage: dict[int, torch.nn.Parameter] | None = None
        self.changed: bool | None = None  # known once put back
        self.after: _After | None = None  # what the run left, known once put back

    def before_write(self, func, args: tuple, kwargs: dict | None) -> None:
        """Copy each parameter that ``func(*args, **kwargs)`` is about to write (first argument,
        ``out=``, or a list of them for ``torch._foreach_*_``), once per run."""
        if self._by_storage is None:
            self._by_storage = {}
            for parameter, *_ in self.parameters:
                address = _storage(parameter)
                if address is not None:
                    self._by_storage.setdefault(address, parameter)
        targets = [kwargs["out"]] if kwargs and kwargs.get("out") is not None else list(args[:1])
        if targets and isinstance(targets[0], (list, tuple)):
            targets = list(targets[0])
        for target in targets:
            if not isinstance(target, torch.Tensor):
                continue
            parameter = self._by_storage.get(_storage(target))
            if parameter is None or id(parameter) in self.written:
                continue
            with torch._C.DisableTorchFunction(), torch.no_grad():
                # ``.data = t`` swaps the storage: the old one is kept by an alias, not copied.
                value = parameter.data if getattr(func, "__name__", "") == "__set__" else None
                copy = parameter.detach().clone() if value is None else None
            self.written[id(parameter)] = (parameter, value, copy)

    def watching(self) -> _WriteWatch:
        """A function mode that calls :meth:`before_write` (for a forward that has no recorder's)."""
        return _WriteWatch(self)

    def put_back(self) -> bool:
        """Restore everything captured; idempotent. Returns whether anything had changed. What the
        run left is kept (:meth:`reapply` gives it back for a later backward on the same graph)."""
        if self.changed is not None:
            return self.changed
        self.after = _After()
        for module, parameters, buffers, non_persistent, training in self.modules:
            for dictionary, before in ((module._parameters, parameters), (module._buffers, buffers)):
                for name, tensor in before.items():
                    if dictionary.get(name) is not tensor:
                        self.after.entries.append((dictionary, name, dictionary.get(name)))
                        dictionary[name] = tensor
            if module._non_persistent_buffers_set != non_persistent:
                module._non_persistent_buffers_set = non_persistent
            if module.training != training:
                self.after.modes.append((module, module.training))
                module.training = training
        with torch.inference_mode(False), torch.no_grad():
            for parameter, data, copy in self.written.values():
                self.after.tensors.append((parameter, *_now(parameter, keep=data is not None)))
                if data is not None:
                    parameter.data = data
                else:
                    parameter.copy_(copy)
            for buffer, value, *_ in self.buffers:
                if not _same(buffer, value):
                    self.after.tensors.append((buffer, *_now(buffer)))
                    if buffer.shape == value.shape and buffer.dtype == value.dtype:
                        buffer.copy_(value)
                    else:
                        buffer.data = value
        unseen = [p for p, _, _, v in self.parameters if _version(p) != v and id(p) not in self.written]
        tensors, versions = [], []
        for tensor, requires_grad, grad, version in self.parameters + [
            (b, r, g, v) for b, _, r, g, v in self.buffers
        ]:
            if tensor.grad is not grad:
                tensor.grad = grad
            if tensor.requires_grad != requires_grad:
                tensor.requires_grad_(requires_grad)
            if version is not None and tensor._version != version:
                tensors.append(tensor)
                versions.append(version)
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
        self.changed = bool(self.after.entries or self.after.modes or self.after.tensors or tensors)
        return self.changed

    def reapply(self, forward: KeptState) -> None:
        """Give the model the state that ``forward``'s run left (values, version counters, which
        tensor each name holds, modes), for another backward on that run's graph: its Nodes may
        have saved those tensors. This state's :meth:`put_back` undoes it."""
        after = forward.after
        for dictionary, name, tensor in after.entries:
            if tensor is not None:
                dictionary[name] = tensor
        for module, training in after.modes:
            module.training = training
        tensors, versions = [], []
        with torch.inference_mode(False), torch.no_grad():
            for tensor, value, data, version in after.tensors:
                if isinstance(tensor, torch.nn.Parameter) and id(tensor) not in self.written:
                    copy, storage, _ = _now(tensor, keep=data is not None)
                    self.written[id(tensor)] = (tensor, storage, copy)
                if data is not None:
                    tensor.data = data
                else:
                    tensor.copy_(value)
                if version is not None:
                    tensors.append(tensor)
                    versions.append(version)
        if tensors:
            torch_compat.set_version_counters(tensors, versions)


class _After:
    """What a run left in the model, taken by :meth:`KeptState.put_back` as it restores the state
    before: ``entries`` (module dict, name, tensor), ``modes`` (module, training) and ``tensors``
    (tensor, copy of its value or None, its storage (``.data``) when that was swapped or None,
    version)."""

    def __init__(self):
        self.entries: list = []
        self.modes: list = []
        self.tensors: list = []


def _now(tensor: torch.Tensor, keep: bool = False) -> tuple:
    """``(copy of the value, None, version)``, or with ``keep`` ``(None, the storage itself, version)``."""
    if keep:
        return None, tensor.data, _version(tensor)
    return tensor.detach().clone(), None, _version(tensor)


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
