"""The hook state of a model's modules: read now, and put back for a later re-run."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from hookviz.record import module_tree

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
