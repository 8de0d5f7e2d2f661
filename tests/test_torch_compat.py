"""The version shims for private torch APIs, checked against what plain PyTorch does on this torch.

Each test runs the branch this torch takes; ``.ci/compat`` runs the suite on the oldest and the
newest supported torch, so both branches of every shim are run there.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn
from zoo import TanhMLP

import hookviz
from hookviz.record import torch_compat
from hookviz.record.graph import walk_graph


def _identity(tensor):
    return tensor


def test_saved_tensor_hooks_are_seen_while_set_and_only_then():
    assert not torch_compat.saved_tensors_hooks_set()
    with torch.autograd.graph.saved_tensors_hooks(_identity, _identity):
        assert torch_compat.saved_tensors_hooks_set()
    with torch.autograd.graph.save_on_cpu():
        assert torch_compat.saved_tensors_hooks_set()
    assert not torch_compat.saved_tensors_hooks_set()
    # the probe left no graph behind that would keep tensors: a plain backward still checks versions
    x = torch.randn(3, requires_grad=True)
    y = x.sigmoid()
    y.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


@pytest.mark.skipif(not torch_compat.SAVED_TENSORS_HOOKS_READABLE, reason="torch < 2.8 cannot hand them over")
def test_the_innermost_saved_tensor_hooks_are_handed_over():
    assert torch_compat.saved_tensors_default_hooks() is None

    def pack(tensor):
        return tensor

    def unpack(tensor):
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(_identity, _identity):
        with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
            assert torch_compat.saved_tensors_default_hooks() == (pack, unpack)
        assert torch_compat.saved_tensors_default_hooks() == (_identity, _identity)


@pytest.mark.skipif(torch_compat.SAVED_TENSORS_HOOKS_READABLE, reason="this torch hands them over")
def test_saved_tensor_hooks_that_cannot_be_handed_over_are_refused_with_the_version_needed():
    assert torch_compat.saved_tensors_default_hooks() is None
    with torch.autograd.graph.saved_tensors_hooks(_identity, _identity):
        with pytest.raises(hookviz.UnsupportedError, match=r"needs torch >= 2\.8: torch 2\.\d"):
            torch_compat.saved_tensors_default_hooks()


class Splits(nn.Module):
    """Ops with several outputs, every output used: chunk, unbind, and max(dim)'s values."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 6)

    def forward(self, x):
        a, b = self.fc(x).chunk(2, dim=1)
        first, second = (a * b).unbind(0)
        return torch.max(first + second, dim=0).values


def _walked(model, x):
    forward_start = torch._C._autograd._get_sequence_nr()
    loss = model(x).sum()
    return loss, walk_graph(loss.grad_fn, forward_start, {}, {})


def _grad_output_counts(loss, walk) -> dict[str, int]:
    """How many grad_outputs each op Node's pre-hook receives in a plain backward."""
    seen, handles = {}, []
    for node in walk.nodes.values():
        if node.kind == "op":

            def hook(grad_outputs, node_id=node.id):
                seen[node_id] = len(grad_outputs)

            handles.append(node.fn.register_prehook(hook))
    try:
        loss.backward()
    finally:
        for handle in handles:
            handle.remove()
    return seen


def test_forward_output_counts_equal_the_grad_outputs_pytorch_hands_a_pre_hook():
    torch.manual_seed(0)
    loss, walk = _walked(Splits(), torch.randn(2, 4))
    counts = torch_compat.forward_output_counts(walk.nodes.values())
    expected = _grad_output_counts(loss, walk)
    assert counts == expected
    assert len(expected) == 8 and sorted(expected.values()).count(2) == 2  # chunk and unbind


@pytest.mark.skipif(
    not hasattr(torch.zeros(1, requires_grad=True).exp().grad_fn, "_input_metadata"),
    reason="torch 2.4 counts only the outputs that reach the graph",
)
def test_forward_output_counts_include_outputs_nothing_used():
    x = torch.randn(3, 2, requires_grad=True)
    forward_start = torch._C._autograd._get_sequence_nr()
    loss = ((x * 2).unbind(0)[1] * 3).sum()  # two of unbind's three outputs are never used
    walk = walk_graph(loss.grad_fn, forward_start, {}, {})
    counts = torch_compat.forward_output_counts(walk.nodes.values())
    assert counts == _grad_output_counts(loss, walk)
    assert counts["UnbindBackward0_0"] == 3


def test_compiled_modules_run_eagerly_inside_and_compiled_again_after():
    torch.manual_seed(0)
    model = TanhMLP()
    compiled = torch.compile(model, backend="eager")
    x = torch.randn(4, 3)
    compiled(x)  # a warm dynamo cache
    forward = compiled.forward
    calls = []
    handle = model.fc1.register_forward_hook(lambda module, args, output: calls.append(output))
    try:
        with pytest.raises(ValueError, match="raised inside"):
            with torch_compat.compiled_modules_run_eagerly([compiled]):
                out = compiled(x)
                raise ValueError("raised inside")
    finally:
        handle.remove()
    assert len(calls) == 1 and torch.equal(out, model(x))  # the submodule's hook saw its own call
    assert compiled.forward == forward  # put back, though the body raised


def test_version_counters_are_set_back_as_an_unchanged_tensor_has_them():
    a, b = torch.zeros(3), torch.ones(2)
    versions = [a._version, b._version]
    a.add_(1)
    b.mul_(2).mul_(3)
    assert [a._version, b._version] == [versions[0] + 1, versions[1] + 2]
    torch_compat.set_version_counters([a, b], versions)
    assert [a._version, b._version] == versions
