"""The user's own hooks: found, and wrapped in place so a run records what each saw, returned and printed.

The user's hooks are called as PyTorch calls them: what they print still reaches ``sys.stdout``
(``run.log`` keeps a copy, :func:`printed_copied`), their warnings stay warnings.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

import torch

from hookviz.data.run import HookCall, HookInfo
from hookviz.record import module_tree
from hookviz.record.distributed import is_framework_hook
from hookviz.record.own_pass import is_own_hook

if TYPE_CHECKING:  # for annotations only
    from hookviz.record.backward_recorder import RecordingState

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
                if is_framework_hook(fn) or is_own_hook(fn):  # FSDP2's set-up, a watch's: not the user's
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
                if is_own_hook(fn):  # a watch's: not the user's
                    continue
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


class UserHookWrapper:
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
                    if isinstance(fn, UserHookWrapper) or is_framework_hook(fn) or is_own_hook(fn):
                        continue
                    hooks[key] = UserHookWrapper(state, fn, module_hook_kind(module, attribute), name, None)
                    swapped.append((hooks, key, fn))
        for name, tensor in tensors.items():
            hooks = getattr(tensor, "_backward_hooks", None)
            for key, fn in list((hooks or {}).items()):
                if is_own_hook(fn):  # a watch's: it ignores hookviz's own backward
                    continue
                hooks[key] = UserHookWrapper(state, fn, "tensor hook", name, name)
                swapped.append((hooks, key, fn))
        yield
    finally:
        for hooks, key, fn in swapped:
            if key in hooks:
                hooks[key] = fn
