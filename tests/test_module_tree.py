"""hookviz.module_tree lists exactly what PyTorch's own walks give, on every zoo model and on a model
with a module registered under three names, a tied weight, a None child and a None parameter."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from zoo import NAMES, build

from hookviz import module_tree


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
