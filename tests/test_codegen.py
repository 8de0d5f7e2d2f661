"""``edits_as_code()`` reproduces every edit: its printed code, run in plain PyTorch on a twin of the
model, gives the leaf gradients the edited hookviz run gave, for every kind of hook site, on the zoo."""

from __future__ import annotations

import ast
import copy
import dataclasses
import re
from pathlib import Path

import pytest
import torch
from torch.utils import _pytree as pytree
from zoo import NAMES, build, twin_of

import hookviz
from hookviz.edits.codegen import edits_as_code
from hookviz.examples import Canonical, canonical_inputs
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
    compared = 0
    for leaf in edited.leaf_names:
        expected = parameters[leaf].grad if leaf in parameters else named[leaf].grad
        got = edited.leaf_grad(leaf)
        assert (got is None) == (expected is None), leaf
        compared += got is not None
        if got is not None:
            got = got.to_dense() if got.is_sparse else got
            expected = expected.to_dense() if expected.is_sparse else expected
            torch.testing.assert_close(got, expected, msg=lambda m, leaf=leaf: f"{name} {leaf}: {m}")
    # every parameter the plain backward reached was compared (the loop cannot come out empty)
    reached = [n for n, p in parameters.items() if p.grad is not None]
    assert compared >= len(reached) > 0, name


def _statements(code: str) -> tuple[list[str], set[str], set[str]]:
    """(top-level statements by kind and name, modules imported anywhere, names read anywhere) of code."""
    tree = ast.parse(code)
    top = []
    for statement in tree.body:
        name = getattr(statement, "name", None) or ast.unparse(statement).split("\n")[0]
        top.append(f"{type(statement).__name__} {name}")
    imported = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for alias in node.names
    }
    names = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    return top, imported, names


HOSTILE = "x\nimport os; os.system('echo hookviz-was-here'); breakpoint()"


def test_a_multi_line_expression_becomes_working_code_and_nothing_else(canonical):
    session, model, (x, y, z), target = canonical
    session.edit("SubBackward0_0", "grad_inputs[0]", "(grad\n * 3\n)")
    edited = session.run()
    code = session.edits_as_code()
    top, imported, names = _statements(code)
    assert top == [
        "Expr 'Gradient edits made in hookviz, as plain PyTorch hooks.'",
        "Import import math",
        "Import import torch",
        "FunctionDef _node",
        "FunctionDef _first_tensor",
        "FunctionDef edit_0",
        "FunctionDef _install_edit_0",
        "FunctionDef install_edits",
    ]
    assert imported == {"math", "torch"}
    namespace: dict = {}
    exec(compile(code, "edits", "exec"), namespace)
    # plain PyTorch: the same edit as a post-hook on the subtraction's Node
    twin_inputs = [t.detach().clone().requires_grad_() for t in (x, y, z)]
    handles = namespace["install_edits"](model)
    out = model(*twin_inputs)
    torch.nn.functional.mse_loss(out, target).backward()
    for handle in handles:
        handle.remove()
    plain = [t.detach().clone().requires_grad_() for t in (x, y, z)]
    out = 2 * plain[0] + 3 * plain[1] - 5 * plain[2]
    out.grad_fn.register_hook(lambda grad_inputs, grad_outputs: (grad_inputs[0] * 3, grad_inputs[1]))
    torch.nn.functional.mse_loss(out, target).backward()
    for name, generated, expected in zip("xyz", twin_inputs, plain):
        assert torch.equal(generated.grad, expected.grad), name
        assert torch.equal(edited.leaf_grad(name), expected.grad), name


def test_text_from_a_run_never_becomes_a_live_line(canonical):
    # A module named with a newline and code (legal for add_module), and an edit whose recorded
    # source holds a newline and code (a crafted file, or any other path to run.edits): the code
    # that comes out compiles to the same statements as for harmless names, and still runs.
    torch.manual_seed(0)
    model = torch.nn.Sequential()
    model.add_module(HOSTILE.replace(".", " "), torch.nn.Linear(3, 2))
    inputs = torch.randn(4, 3, requires_grad=True)
    session = hookviz.Session(model, (inputs,), loss_fn=lambda out: out.square().sum())
    module = next(name for name, _ in model.named_children())
    session.edit(module, "grad_input[0]", "(grad\n + 1)")
    session.edit("SumBackward0_0", "grad_inputs[0]", "grad * 2")
    run = session.run()
    crafted = dataclasses.replace(run.edits[1], source=HOSTILE)
    code = edits_as_code(run, [run.edits[0], crafted])
    top, imported, names = _statements(code)
    assert imported == {"math", "torch"}
    assert not names & {"os", "breakpoint", "x"}, names & {"os", "breakpoint", "x"}
    assert [t.split()[0] for t in top].count("Import") == 2 and all(
        t.startswith(("Expr 'Gradient edits", "Import", "FunctionDef")) for t in top
    ), top
    assert re.search(r'# e\d+: "x\\nimport os; os\.system\(', code)  # shown, quoted, its newline escaped
    namespace: dict = {}
    exec(compile(code, "edits", "exec"), namespace)
    twin = copy.deepcopy(model)
    twin_inputs = inputs.detach().clone().requires_grad_()
    handles = namespace["install_edits"](twin)
    loss = twin(twin_inputs).square().sum()
    namespace["install_loss_edits"](loss)
    loss.backward()
    for handle in handles:
        handle.remove()
    plain = copy.deepcopy(model)
    plain_inputs = inputs.detach().clone().requires_grad_()
    next(iter(plain.children())).register_full_backward_hook(
        lambda m, grad_input, grad_output: (grad_input[0] + 1,)
    )
    loss = plain(plain_inputs).square().sum()
    loss.grad_fn.register_hook(lambda grad_inputs, grad_outputs: (grad_inputs[0] * 2,))
    loss.backward()
    assert torch.equal(twin_inputs.grad, plain_inputs.grad)
    compared = 0
    for (name, generated), expected in zip(twin.named_parameters(), plain.parameters()):
        assert torch.equal(generated.grad, expected.grad), name
        compared += 1
    assert compared == 2


def test_a_loaded_runs_edits_become_the_expressions_they_recorded():
    # A file keeps an edit's text; its code is that expression re-printed from its parsed tree.
    run = hookviz.load(Path(__file__).parent / "data" / "main-v2-run.hookviz")
    code = edits_as_code(run)
    assert "grad_inputs[0] = grad + 888888" in code and "transform_" not in code
    namespace: dict = {}
    exec(compile(code, "edits", "exec"), namespace)
    x, y, z, target = canonical_inputs()
    edited = [t.detach().clone().requires_grad_() for t in (x, y, z)]
    model = Canonical()
    handles = namespace["install_edits"](model)
    torch.nn.functional.mse_loss(model(*edited), target).backward()
    for handle in handles:
        handle.remove()
    out = 2 * x + 3 * y - 5 * z
    out.grad_fn.register_hook(lambda grad_inputs, grad_outputs: (grad_inputs[0] + 888888, grad_inputs[1]))
    torch.nn.functional.mse_loss(out, target).backward()
    for name, generated, expected in zip("xyz", edited, (x, y, z)):
        assert torch.equal(generated.grad, expected.grad), name
        assert torch.equal(run.leaf_grad(name), expected.grad), name
