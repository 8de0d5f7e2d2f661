"""A model's submodules, parameters and buffers as lists, listed once per recorded run.

The listings are PyTorch's own (``Module.named_modules``, ``named_parameters``, ``named_buffers``,
called on the model, so a class that overrides one of them is honoured); what this module adds is
the reuse: inside a ``with listed_once(model):`` block (a whole recorded run) each listing is made
once and reused, where a fresh run asked for one 14 times and each walks the model (a recursive
generator per module: on a model of thousands of modules a noticeable cost, docs/perf.md). Code in
the block that runs the model's forward, which may register modules or reassign buffers, calls
:func:`relist` after it.
Source: ``torch.nn.Module.named_modules`` and ``Module._named_members`` (torch/nn/modules/module.py).
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
    return _listed(
        model,
        ("modules", remove_duplicate),
        lambda: list(model.named_modules(remove_duplicate=remove_duplicate)),
    )


def named_parameters(
    model: torch.nn.Module, remove_duplicate: bool = True
) -> list[tuple[str, torch.nn.Parameter]]:
    """``list(model.named_parameters(remove_duplicate=...))``: a parameter tied to several names
    is listed once, under its first, unless ``remove_duplicate=False``."""
    return _listed(
        model,
        ("parameters", remove_duplicate),
        lambda: list(model.named_parameters(remove_duplicate=remove_duplicate)),
    )


def named_buffers(model: torch.nn.Module, remove_duplicate: bool = True) -> list[tuple[str, torch.Tensor]]:
    """``list(model.named_buffers(remove_duplicate=...))``."""
    return _listed(
        model,
        ("buffers", remove_duplicate),
        lambda: list(model.named_buffers(remove_duplicate=remove_duplicate)),
    )


def modules(model: torch.nn.Module) -> list[torch.nn.Module]:
    """``list(model.modules())``: every module once."""
    return [module for _, module in named_modules(model)]


def parameters(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    """``list(model.parameters())``: every parameter once."""
    return [parameter for _, parameter in named_parameters(model)]
