"""A model's submodules, parameters and buffers as lists, for code that runs on every recorded run.

``torch.nn.Module.named_modules`` is a recursive generator, one generator per module, so on a model
of thousands of modules a walk is a noticeable cost (``named_parameters`` walks again), and a fresh
run used to walk the model a dozen times (docs/perf.md). These functions give the same pairs in the same order
(``named_modules``' pre-order over ``Module._modules``, each module's ``_parameters`` /
``_buffers`` in insertion order, ``None`` entries skipped, duplicates by identity dropped unless
``remove_duplicate=False``), built in one loop, several times faster. A listing without
duplicates is the one with them, each object kept under its first name: one walk serves both.
Like PyTorch's, they read ``_modules`` directly; a module class that overrides ``named_modules``
itself is not consulted.
Source: ``torch.nn.Module.named_modules`` and ``Module._named_members`` (torch/nn/modules/module.py).

Inside a ``with listed_once(model):`` block (a whole recorded run) each listing is made once and
reused: a fresh run asked for one 14 times. Code in the block that runs the model's forward,
which may register modules or reassign buffers, calls :func:`relist` after it.
"""

from __future__ import annotations

import contextlib

import torch

# id(model) -> {(listing, remove_duplicate): pairs}, for each model inside a listed_once block
_listings: dict[int, dict[tuple, list]] = {}


@contextlib.contextmanager
def listed_once(model: torch.nn.Module):
    """Within this block the listings of ``model`` are made once each (see the module docstring);
    nested blocks on one model share the outermost's."""
    outermost = id(model) not in _listings
    if outermost:
        _listings[id(model)] = {}
    try:
        yield
    finally:
        if outermost:
            del _listings[id(model)]


def relist(model: torch.nn.Module) -> None:
    """Forget the listings of ``model`` made in the open :func:`listed_once` block (after code that
    may have changed its modules, parameters or buffers: its forward)."""
    listings = _listings.get(id(model))
    if listings is not None:
        listings.clear()


def _listed(model: torch.nn.Module, key: tuple, make) -> list:
    listings = _listings.get(id(model))
    if listings is None:
        return make()
    found = listings.get(key)
    if found is None:
        found = listings[key] = make()
    return list(found)  # a copy: a caller may change its list


def named_modules(model: torch.nn.Module, remove_duplicate: bool = True) -> list[tuple[str, torch.nn.Module]]:
    """``list(model.named_modules(remove_duplicate=...))``: (qualified name, module), pre-order.

    With ``remove_duplicate`` (the default) a module reachable under several names is listed
    once, under its first name, and its children are not walked again.
    """
    if remove_duplicate:
        return _listed(model, ("modules", True), lambda: _first_of_each(named_modules(model, False)))
    return _listed(model, ("modules", False), lambda: _walk(model))


def _first_of_each(pairs: list[tuple[str, object]]) -> list[tuple[str, object]]:
    """``pairs`` with each object (by identity) kept only under its first name. The listing with
    duplicates removed is this of the one without: a module met again is met after its first
    visit, which listed its whole subtree and its members; so one walk serves both listings."""
    seen: set[int] = set()
    found = []
    for name, thing in pairs:
        if id(thing) not in seen:
            seen.add(id(thing))
            found.append((name, thing))
    return found


def _walk(model: torch.nn.Module) -> list[tuple[str, torch.nn.Module]]:
    found: list[tuple[str, torch.nn.Module]] = []
    stack = [("", model)]
    while stack:
        name, module = stack.pop()
        found.append((name, module))
        children = module._modules
        if children:
            prefix = name + "." if name else ""
            stack.extend(
                (prefix + key, child) for key, child in reversed(children.items()) if child is not None
            )
    return found


def named_parameters(
    model: torch.nn.Module, remove_duplicate: bool = True
) -> list[tuple[str, torch.nn.Parameter]]:
    """``list(model.named_parameters(remove_duplicate=...))``: a parameter tied to several names
    is listed once, under its first, unless ``remove_duplicate=False``."""
    return _named_members(model, "_parameters", remove_duplicate)


def named_buffers(model: torch.nn.Module, remove_duplicate: bool = True) -> list[tuple[str, torch.Tensor]]:
    """``list(model.named_buffers(remove_duplicate=...))``."""
    return _named_members(model, "_buffers", remove_duplicate)


def modules(model: torch.nn.Module) -> list[torch.nn.Module]:
    """``list(model.modules())``: every module once."""
    return [module for _, module in named_modules(model)]


def parameters(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    """``list(model.parameters())``: every parameter once."""
    return [parameter for _, parameter in named_parameters(model)]


def _named_members(model: torch.nn.Module, attribute: str, remove_duplicate: bool) -> list:
    if remove_duplicate:
        return _listed(
            model, (attribute, True), lambda: _first_of_each(_named_members(model, attribute, False))
        )
    return _listed(model, (attribute, False), lambda: _members(model, attribute))


def _members(model: torch.nn.Module, attribute: str) -> list:
    found = []
    for prefix, module in named_modules(model, False):
        members = getattr(module, attribute)
        if not members:
            continue
        dot = prefix + "." if prefix else ""
        found += [(dot + key, value) for key, value in members.items() if value is not None]
    return found
