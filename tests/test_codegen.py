"""``edits_as_code()`` reproduces every edit: its printed code, run in plain PyTorch on a twin of the
model, gives the leaf gradients the edited hookviz run gave, for every kind of hook site, on the zoo."""

from __future__ import annotations

import pytest
import torch
from torch.utils import _pytree as pytree
from zoo import NAMES, build, twin_of

import hookviz
from hookviz.record.session import name_inputs

SEED = 1234


def _sites(run: hookviz.Run) -> list[tuple[str, str, str]]:
    """One site of each kind that got a gradient in ``run``, with an expression for it."""
    ran = sorted(
        (r for r in run.nodes.values() if r.kind == "op" and r.order is not None), key=lambda r: r.order
    )
    sites = []
    with_input = next((r for r in ran[1:] if any(g is not None for g in r.grad_inputs)), None)
    if with_input is not None:
        slot = next(i for i, g in enumerate(with_input.grad_inputs) if g is not None)
        sites.append((with_input.id, f"grad_inputs[{slot}]", "grad * 3"))
    middle = ran[len(ran) // 2] if len(ran) > 2 else None
    if middle is not None and middle.grad_outputs and middle.grad_outputs[0] is not None:
        sites.append((middle.id, "grad_outputs[0]", "grad + 1"))
    leaf = next((n for n in run.leaf_names if run.leaf_grad(n) is not None), None)
    if leaf is not None:
        sites.append((leaf, "grad", "grad * 0.5"))
    for call in run.calls:
        if call.module and call.full_hook_fires:
            inputs = [i for i, g in enumerate(call.grad_input) if g is not None]
            outputs = [i for i, g in enumerate(call.grad_output) if g is not None]
            if inputs and not any(s[1].startswith("grad_input[") for s in sites):
                sites.append((call.module, f"grad_input[{inputs[0]}]", "grad * 2"))
            if outputs and not any(s[1].startswith("grad_output[") for s in sites):
                sites.append((call.module, f"grad_output[{outputs[-1]}]", "grad * -1"))
    return sites


@pytest.mark.parametrize("name", [n for n in NAMES if n not in ("gpt2", "bert")] + ["gpt2"])
def test_exported_code_gives_the_edited_gradients(name):
    model, args, kwargs, loss_fn = build(name)
    session = hookviz.Session(model, args, kwargs, loss_fn=loss_fn)
    torch.manual_seed(SEED)
    base = session.run()
    applied, refused = [], []
    for target, slot, expression in _sites(base):
        try:
            session.edit(target, slot, expression)
            applied.append(slot.split("[")[0])
        except (hookviz.EditError, hookviz.TargetError) as error:  # refused at edit(), with a reason
            assert str(error)
            refused.append((target, slot))
    assert len(applied) >= 3, (applied, refused)
    edited = session.run()
    assert hookviz.diff(base, edited).changed_leaves

    namespace: dict = {}
    exec(session.edits_as_code(), namespace)
    twin = twin_of(model)
    twin_args, twin_kwargs = pytree.tree_map(
        lambda v: v.detach().clone().requires_grad_(v.requires_grad) if isinstance(v, torch.Tensor) else v,
        (args, kwargs),
    )
    named = name_inputs(twin.forward, twin_args, twin_kwargs)
    handles = namespace["install_edits"](twin, **named)
    torch.manual_seed(SEED)
    output = twin(*twin_args, **twin_kwargs)
    loss = loss_fn(output) if loss_fn is not None else output
    if "install_loss_edits" in namespace:
        namespace["install_loss_edits"](loss)
    loss.backward()
    for handle in handles:
        handle.remove()
    parameters = dict(twin.named_parameters())
    for leaf in edited.leaf_names:
        expected = parameters[leaf].grad if leaf in parameters else named[leaf].grad
        got = edited.leaf_grad(leaf)
        assert (got is None) == (expected is None), leaf
        if got is not None:
            got = got.to_dense() if got.is_sparse else got
            expected = expected.to_dense() if expected.is_sparse else expected
            torch.testing.assert_close(got, expected, msg=lambda m, leaf=leaf: f"{name} {leaf}: {m}")
