"""The user's own hooks: found, and wrapped in place so a run records what each saw and returned.

The user's hooks are called as PyTorch calls them, in the process as hookviz found it: what they
print goes where ``print`` sends it, ``breakpoint()`` and ``input()`` talk to the real terminal,
their warnings stay warnings. hookviz keeps no copy of their output (``run.log`` stays empty): a
copy would need ``sys.stdout`` swapped for the whole process while a hook runs.
"""

from __future__ import annotations

import contextlib
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


class UserHookWrapper:
    """Calls a user's hook exactly as PyTorch would, recording what it saw and returned."""

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
        result = self.original(*args, **kwargs)
        if self.kind == "post-accumulate-grad hook":  # it changes .grad in place or sets another
            after = self._grads(args)
        else:
            after = () if grads is None else (_as_tuple(result) if result is not None else tuple(grads))
        call = HookCall(
            next(recorder.steps),
            self.kind,
            self.name,
            self.where,
            returned=result is not None,
            node=self.node,
        )
        recorder.user_hook_called(call, before, tuple(after))
        return result

    def _grads(self, args):
        if self.kind == "tensor hook":
            return (args[0],)
        if self.kind == "post-accumulate-grad hook":
            return (args[0].grad,)
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


def run_post_accumulate_grad_hooks(
    state: RecordingState, leaves: dict[str, torch.Tensor], grads: dict[str, torch.Tensor | None]
) -> dict[str, torch.Tensor | None]:
    """Call each leaf's post-accumulate-grad hooks (``register_post_accumulate_grad_hook``) as
    ``AccumulateGrad`` calls them after a plain ``loss.backward()``: ``hook(tensor)``, in
    registration order, with ``tensor.grad`` holding this run's gradient (a copy: as after
    ``zero_grad()``, not summed into an older ``.grad``), recorded like the user's other hooks.

    Args:
        state: the recording state, whose active recorder records each call.
        leaves: leaf name -> tensor. grads: leaf name -> this run's gradient (or None: the hooks
            do not run, as autograd runs no ``AccumulateGrad`` for a leaf that got no gradient).

    Returns:
        ``grads`` with each hooked leaf's ``.grad`` as its hooks left it (what a plain ``.grad``
        holds). The caller puts the leaf's own ``.grad`` and any weight a hook wrote back
        (:mod:`hookviz.record.model_state`).

    Raises:
        RuntimeError: a hook returned something, as PyTorch raises ("Tensor post accumulate grad
        hooks should return None."). Whatever a hook raises propagates.

    Unlike a plain backward, the hooks run after the whole backward, not as each leaf's gradient is
    done. Source: https://pytorch.org/docs/stable/generated/torch.Tensor.register_post_accumulate_grad_hook.html
    """
    result = dict(grads)
    for name, tensor in leaves.items():
        hooks = getattr(tensor, "_post_accumulate_grad_hooks", None) or {}
        users = [fn for fn in list(hooks.values()) if not (is_framework_hook(fn) or is_own_hook(fn))]
        if not users or result.get(name) is None:
            continue
        with torch.no_grad():
            tensor.grad = result[name].detach().clone()
        for fn in users:
            if UserHookWrapper(state, fn, "post-accumulate-grad hook", name, name)(tensor) is not None:
                raise RuntimeError("Tensor post accumulate grad hooks should return None.")
        result[name] = tensor.grad
    return result
