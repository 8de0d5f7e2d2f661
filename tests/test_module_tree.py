"""hookviz.record.module_tree lists exactly what PyTorch's own walks give, on every zoo model and on a model
with a module registered under three names, a tied weight, a None child and a None parameter."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from zoo import NAMES, build

import hookviz
from hookviz.record import module_tree


class Tangled(nn.Module):
    def __init__(self):
        super().__init__()
        shared = nn.Linear(3, 3)
        self.a, self.b, self.c = shared, nn.Sequential(shared, nn.ReLU(), nn.Identity()), shared
        self.d = nn.Linear(3, 3)
        self.d.weight = shared.weight  # tied
        self.register_buffer("steps", torch.zeros(2))
        self.register_parameter("unused", None)
        self.empty = None  # a None child


def _walks(model: nn.Module):
    for remove_duplicate in (True, False):
        yield (
            list(model.named_modules(remove_duplicate=remove_duplicate)),
            module_tree.named_modules(model, remove_duplicate),
        )
        yield (
            list(model.named_parameters(remove_duplicate=remove_duplicate)),
            module_tree.named_parameters(model, remove_duplicate),
        )
        yield (
            list(model.named_buffers(remove_duplicate=remove_duplicate)),
            module_tree.named_buffers(model, remove_duplicate),
        )
    yield list(enumerate(model.modules())), list(enumerate(module_tree.modules(model)))
    yield list(enumerate(model.parameters())), list(enumerate(module_tree.parameters(model)))


@pytest.mark.parametrize("name", ["tangled", *NAMES])
def test_same_names_objects_and_order_as_pytorch(name):
    model = Tangled() if name == "tangled" else build(name)[0]
    for theirs, ours in _walks(model):
        assert [(n, id(x)) for n, x in theirs] == [(n, id(x)) for n, x in ours]
    if name == "tangled":
        assert [n for n, _ in module_tree.named_modules(model, remove_duplicate=False)] == [
            "",
            "a",
            "b",
            "b.0",
            "b.1",
            "b.2",
            "c",
            "d",
        ]
        assert [n for n, _ in module_tree.named_parameters(model)] == ["a.weight", "a.bias", "d.bias"]


class GrowsOnItsFirstCall(nn.Module):
    """Registers a submodule inside its first forward (as lazily built models do)."""

    def __init__(self):
        super().__init__()
        self.first = nn.Linear(3, 3)

    def forward(self, x):
        if not hasattr(self, "second"):
            self.second = nn.Linear(3, 1)
        return self.second(self.first(x)).sum()


def test_inside_listed_once_a_listing_is_made_once_until_relist_and_outside_it_every_time():
    model = nn.Sequential(nn.Linear(3, 3))
    with module_tree.listed_once(model):
        first = module_tree.named_parameters(model)
        model.append(nn.Linear(3, 1))  # not seen until relist: the block promises no change
        assert module_tree.named_parameters(model) == first
        module_tree.relist(model)
        assert module_tree.named_parameters(model) == list(model.named_parameters())
        assert len(module_tree.named_parameters(model)) == 4
    model.append(nn.Tanh())
    assert module_tree.named_modules(model) == list(model.named_modules())


def test_a_module_that_the_forward_registers_is_a_named_leaf_in_that_same_run():
    # A run lists the model once before its forward and once after (module_tree.listed_once).
    torch.manual_seed(0)
    model, x = GrowsOnItsFirstCall(), torch.randn(2, 3)
    run = hookviz.Session(model, (x,)).run()
    assert {"second.weight", "second.bias"} <= set(run.leaf_names)
    model.zero_grad()
    model(x).backward()
    for name in ("second.weight", "first.weight"):
        assert torch.equal(run.leaf_grad(name), model.get_parameter(name).grad)


class HidesItsCache(nn.Module):
    """Keeps a cache module it does not want walked: its ``named_modules`` leaves it out (and so,
    through PyTorch's ``_named_members``, do ``named_parameters`` and ``named_buffers``)."""

    def __init__(self):
        super().__init__()
        self.body = nn.Linear(3, 2)
        self.cache = nn.Linear(3, 3)  # never called, never trained

    def named_modules(self, memo=None, prefix="", remove_duplicate=True):
        for name, module in super().named_modules(memo, prefix, remove_duplicate):
            if not name.endswith("cache"):
                yield name, module

    def forward(self, x):
        return self.body(x).sum()


def test_a_class_that_overrides_named_modules_is_honoured():
    model = HidesItsCache()
    assert [n for n, _ in module_tree.named_modules(model)] == ["", "body"]
    assert [n for n, _ in module_tree.named_parameters(model)] == ["body.weight", "body.bias"]
    assert [n for n, _ in module_tree.named_parameters(model)] == [n for n, _ in model.named_parameters()]
    run = hookviz.Session(model, (torch.randn(4, 3),)).run()
    assert "cache.weight" not in run.leaf_names and {"body.weight", "body.bias"} <= set(run.leaf_names)
    with hookviz.watch(model) as watch:
        model(torch.randn(4, 3)).backward()
    assert watch.parameter_names == ["body.weight", "body.bias"]
