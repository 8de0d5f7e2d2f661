"""Conformance: every view hookviz records equals what PyTorch's own hooks see, on a model zoo.

For each model of :mod:`zoo`, hookviz records one run of the user's model, untouched; then, on deep
copies of the model, real PyTorch hooks are registered (one module at a time, since a full backward
hook and a legacy one cannot share a module) and a plain ``loss.backward()`` runs. Compared:
- leaf gradients: ``torch.equal`` to ``.grad`` after a plain backward;
- Node pre/post hooks (``Node.register_prehook`` / ``Node.register_hook``) on every op Node and
  tensor hooks (``Tensor.register_hook``) on every parameter: ``torch.equal``;
- per module call: what a forward hook sees, a full backward hook's ``grad_input`` / ``grad_output``
  (``torch.testing.assert_close``: PyTorch's own full hook inserts identity Nodes that may change
  the order in which autograd adds gradients) and a legacy ``register_backward_hook``'s view;
  whether each hook fires at all;
- the model (hooks, parameters, buffers, ``.grad``, flags) and the user's inputs, unchanged.
"""

from __future__ import annotations

import copy

import pytest
import torch
from conftest import assert_same_state, model_state
from torch.utils import _pytree as pytree
from zoo import NAMES, STATEFUL, build, twin_of

import hookviz
from hookviz.record.graph import walk_graph

SEED = 1234


def _clone_inputs(args, kwargs):
    def clone(value):
        if isinstance(value, torch.Tensor):
            return value.detach().clone().requires_grad_(value.requires_grad)
        return value

    return pytree.tree_map(clone, (args, kwargs))


def _tensors(value) -> list:
    return [t for t in pytree.tree_leaves(value) if isinstance(t, torch.Tensor)]


def _plain(model, args, kwargs, loss_fn, setup=None):
    """A deep copy of the model with ``setup(copy)`` hooks, one plain forward + backward."""
    twin = twin_of(model)
    twin_args, twin_kwargs = _clone_inputs(args, kwargs)
    handles = setup(twin) if setup is not None else []
    torch.manual_seed(SEED)
    output = twin(*twin_args, **twin_kwargs)
    loss = loss_fn(output) if loss_fn is not None else output
    start = torch._C._autograd._get_sequence_nr()
    loss.backward()
    for handle in handles:
        handle.remove()
    return twin, twin_args, twin_kwargs, loss, start


def _keep(seen: dict, key, value) -> None:
    """Remember what a hook saw the first time it fired (a hook that returns None changes nothing)."""
    seen.setdefault(key, value)


def _entry(value):
    return value.detach().clone() if isinstance(value, torch.Tensor) else None


def _dense(tensor):
    return tensor.to_dense() if tensor.is_sparse else tensor


def _value(record):
    assert record is not None and record.value is not None, record
    return record.value


def _assert_views_equal(recorded, real, what, exact=False):
    assert len(recorded) == len(real), f"{what}: hookviz has {len(recorded)} entries, PyTorch {len(real)}"
    for i, (mine, theirs) in enumerate(zip(recorded, real)):
        assert (mine is None) == (theirs is None), f"{what}[{i}]: hookviz {mine}, PyTorch {theirs}"
        if theirs is None:
            continue
        expected = _dense(theirs.detach()).cpu()
        if exact:
            assert torch.equal(_value(mine), expected), f"{what}[{i}] differs"
        else:
            torch.testing.assert_close(_value(mine), expected, msg=lambda m, w=what, i=i: f"{w}[{i}]: {m}")


def _record(name):
    model, args, kwargs, loss_fn = build(name)
    before_model, before_inputs = model_state(model), [t.detach().clone() for t in _tensors((args, kwargs))]
    session = hookviz.Session(model, args, kwargs, loss_fn=loss_fn, full_tensor_limit=10**9)
    torch.manual_seed(SEED)
    run = session.run().fill_details()  # a lazy run (the default), filled: every view has its values
    return model, args, kwargs, loss_fn, session, run, before_model, before_inputs


@pytest.mark.parametrize("name", NAMES)
def test_leaf_node_and_tensor_hooks_equal_pytorch(name):
    model, args, kwargs, loss_fn, session, run, before_model, before_inputs = _record(name)
    twin, twin_args, twin_kwargs, loss, _ = _plain(model, args, kwargs, loss_fn)
    assert torch.equal(run.loss, loss.detach().cpu().reshape(()))
    parameters = dict(twin.named_parameters())
    compared = 0
    for leaf in run.leaf_names:
        grad = run.leaf_grad(leaf)
        if leaf in parameters:
            expected = parameters[leaf].grad
        else:
            position = list(session._input_names).index(leaf)  # the user's input: its twin by position
            expected = _tensors((twin_args, twin_kwargs))[position].grad
        assert (grad is None) == (expected is None), leaf
        if grad is not None:
            assert torch.equal(_dense(grad), _dense(expected)), leaf
            compared += 1
    # Every gradient a plain backward gave, and only those, is a leaf gradient of the run.
    expected_grads = [p for p in parameters.values() if p.grad is not None]
    expected_grads += [t for t in _tensors((twin_args, twin_kwargs)) if t.grad is not None]
    assert compared == len(expected_grads) > 0
    for parameter_name, parameter in parameters.items():
        if parameter.grad is not None:
            assert parameter_name in run.leaf_names

    # Node pre/post hooks and tensor hooks on a twin, against the run's Node records.
    seen_pre, seen_post, seen_tensor = {}, {}, {}

    def setup(twin_model):
        handles = []
        for parameter_name, parameter in twin_model.named_parameters():
            if parameter.requires_grad:
                handles.append(
                    parameter.register_hook(
                        lambda grad, n=parameter_name: _keep(seen_tensor, n, grad.clone())
                    )
                )
        return handles

    twin, twin_args, twin_kwargs, _, _ = _plain(model, args, kwargs, loss_fn, setup)
    for parameter_name, grad in seen_tensor.items():
        assert torch.equal(_dense(grad), _dense(run.leaf_grad(parameter_name))), parameter_name

    # The Node ids of a twin's graph, named by hookviz's walk, and real Node hooks on every op.
    twin = twin_of(model)
    twin_args, twin_kwargs = _clone_inputs(args, kwargs)
    torch.manual_seed(SEED)
    start = torch._C._autograd._get_sequence_nr()
    output = twin(*twin_args, **twin_kwargs)
    loss = loss_fn(output) if loss_fn is not None else output
    names = {id(p): n for n, p in twin.named_parameters(remove_duplicate=False)}
    walk = walk_graph(loss.grad_fn, start, names, {})
    for node in walk.nodes.values():
        if node.kind != "op":
            continue
        node.fn.register_prehook(lambda grad_outputs, i=node.id: _keep(seen_pre, i, grad_outputs))
        node.fn.register_hook(lambda grad_inputs, grad_outputs, i=node.id: _keep(seen_post, i, grad_inputs))
    loss.backward()
    ops = {n for n, r in run.nodes.items() if r.kind == "op"}
    assert ops == {n.id for n in walk.nodes.values() if n.kind == "op"}
    for node_id in ops:
        record = run.node(node_id)
        assert (record.order is None) == (node_id not in seen_post), node_id
        if node_id in seen_post:
            _assert_views_equal(record.grad_outputs, seen_pre[node_id], f"{node_id} grad_outputs", exact=True)
            _assert_views_equal(record.grad_inputs, seen_post[node_id], f"{node_id} grad_inputs", exact=True)

    assert_same_state(before_model, model_state(model))
    for before, after in zip(before_inputs, _tensors((args, kwargs))):
        assert torch.equal(before, after)


@pytest.mark.parametrize("name", NAMES)
def test_module_views_equal_pytorch_hooks(name):
    model, args, kwargs, loss_fn, session, run, before_model, before_inputs = _record(name)
    for module_name in run.modules:
        calls = [c for c in run.calls if c.module == module_name]
        module = model.get_submodule(module_name)

        # Forward hook: the output as forward returned it (prepended: before the user's hooks).
        returned = []

        def forward_setup(twin, module_name=module_name, returned=returned):
            def hook(m, a, out):  # every entry the hook gets: a tensor, or None for anything else
                returned.append([_entry(t) for t in pytree.tree_leaves(out)])

            return [twin.get_submodule(module_name).register_forward_hook(hook, prepend=True)]

        _plain(model, args, kwargs, loss_fn, forward_setup)
        # Non-reentrant checkpointing runs the forward again in backward; the run shows forward's calls.
        assert len(returned) == len(calls) or "checkpoint" in name and len(returned) > len(calls)
        for call, real in zip(calls, returned):
            _assert_views_equal(
                call.output, real, f"{module_name!r} call {call.call} forward output", exact=True
            )

        # Full backward hook: fired per call (last call first), with grad_input / grad_output.
        fired = []

        def full_setup(twin, module_name=module_name, fired=fired):
            def hook(m, seen_input, seen_output):
                fired.append((seen_input, seen_output))

            # prepend: see what the user's own full hooks there see, before any of them edits
            return [twin.get_submodule(module_name).register_full_backward_hook(hook, prepend=True)]

        if module._is_full_backward_hook is False:  # the user's legacy hook: PyTorch refuses a full one
            with pytest.raises(RuntimeError, match="Cannot use both"):
                full_setup(twin_of(model))
        elif any(c.in_place or c.output_changed_later for c in calls):
            with pytest.raises(RuntimeError, match="inplace|in-place"):
                _plain(model, args, kwargs, loss_fn, full_setup)
            with pytest.raises(hookviz.EditError, match="in-place|in place"):
                session.edit(module_name, "grad_output[0]", "grad")
        else:
            _plain(model, args, kwargs, loss_fn, full_setup)
            fired.reverse()
            got = [c for c in calls if c.full_hook_fires]
            assert len(got) == len(fired), (
                f"{module_name!r}: PyTorch's full hook fired {len(fired)} time(s), hookviz says {len(got)}"
            )
            for call, (grad_input, grad_output) in zip(got, fired):
                what = f"{module_name!r} call {call.call}"
                _assert_views_equal(call.grad_input, grad_input, f"{what} grad_input")
                _assert_views_equal(call.grad_output, grad_output, f"{what} grad_output")

        # Legacy backward hook: hangs on the grad_fn of the output's first tensor.
        legacy = []

        def legacy_setup(twin, module_name=module_name, legacy=legacy):
            def hook(m, seen_input, seen_output):
                legacy.append((seen_input, seen_output))

            return [twin.get_submodule(module_name).register_backward_hook(hook)]

        if module._is_full_backward_hook:
            continue  # the user's full hook: PyTorch refuses a legacy one beside it
        if all(c.output_node is None for c in calls) and not all(c.output_kind_hookable for c in calls):
            # PyTorch's own _call_impl cannot find a tensor in a dataclass output to hang it on
            with pytest.raises(TypeError, match="not subscriptable"):
                _plain(model, args, kwargs, loss_fn, legacy_setup)
            assert not run.module_grads(module_name, legacy=True).fires
            continue
        with _no_warning_check():
            _plain(model, args, kwargs, loss_fn, legacy_setup)
        legacy.reverse()
        got = [run.module_grads(module_name, legacy=True, call=c.call) for c in calls]
        got = [g for g in got if g.fires]
        assert len(got) == len(legacy), (
            f"{module_name!r}: legacy hook fired {len(legacy)}, hookviz {len(got)}"
        )
        for view, (grad_input, grad_output) in zip(got, legacy):
            _assert_views_equal(view.grad_input, grad_input, f"{module_name!r} legacy grad_input", exact=True)
            _assert_views_equal(
                view.grad_output, grad_output, f"{module_name!r} legacy grad_output", exact=True
            )

    assert_same_state(before_model, model_state(model))
    for before, after in zip(before_inputs, _tensors((args, kwargs))):
        assert torch.equal(before, after)


def _identity(model) -> list:
    """Which tensor object each parameter and buffer name holds, its version counter and flags."""
    return [
        (name, id(t), t._version, t.requires_grad, id(t.grad) if t.grad is not None else None)
        for name, t in [*model.named_parameters(), *model.named_buffers()]
    ]


@pytest.mark.parametrize("name", STATEFUL)
def test_stateful_model_gradients_equal_a_plain_backward_and_its_state_is_put_back(name):
    """A forward that changes the model's own state (a step counter, an EMA, BatchNorm's running
    statistics, a reassigned buffer, parameters written under no_grad): hookviz's gradients are
    those of a plain forward + backward from the same state, also in a backward-only re-run on
    the retained graph, and after each run the model's state is exactly what it was."""
    model, args, kwargs, loss_fn = build(name)
    twin, (twin_args, twin_kwargs) = copy.deepcopy(model), _clone_inputs(args, kwargs)
    before, identity = model_state(model), _identity(model)
    session = hookviz.Session(model, args, kwargs, loss_fn=loss_fn)
    runs = [session.run(), session.run()]  # the second on the retained graph, with the state it left
    assert runs[1].forward_reused
    assert_same_state(before, model_state(model))
    assert _identity(model) == identity

    loss = loss_fn(twin(*twin_args, **twin_kwargs))
    loss.backward()
    # The plain step did change the twin's state: the comparison above can fail.
    mine, theirs = [*model.parameters(), *model.buffers()], [*twin.parameters(), *twin.buffers()]
    assert any(not torch.equal(a, b) for a, b in zip(mine, theirs))
    compared = 0
    for run in runs:
        assert torch.equal(run.loss, loss.detach().reshape(()))
        for parameter_name, parameter in twin.named_parameters():
            assert torch.equal(run.leaf_grad(parameter_name), parameter.grad), parameter_name
            compared += 1
        for position, tensor in enumerate(_tensors((twin_args, twin_kwargs))):
            assert torch.equal(run.leaf_grad(list(session._input_names)[position]), tensor.grad)
            compared += 1
    assert compared == 2 * (len(list(twin.parameters())) + 1)


class _no_warning_check:
    """PyTorch warns on every legacy hook; the warning is not what is under test here."""

    def __enter__(self):
        import warnings

        self._catch = warnings.catch_warnings()
        self._catch.__enter__()
        warnings.simplefilter("ignore")

    def __exit__(self, *exc):
        return self._catch.__exit__(*exc)
