"""Lazy runs (the default): norms at once; every other detail waits, as None named in ``pending``,
for ``run.fill_details()``, the one call that runs the model again. Filled, they equal an eager
run's and a plain PyTorch forward's; when they could not be the run's own numbers, the fill
refuses and says why."""

from __future__ import annotations

import copy
import gc
import math
import pickle
import weakref

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import hookviz
from hookviz.data import stats_batch as stats
from hookviz.data.deferred import PENDING
from hookviz.data.diff import leaf_diffs
from hookviz.errors import (
    DetailsChanged,
    DetailsNotReproduced,
    DetailsPending,
    DetailsRefused,
    DetailsUnavailable,
    ForwardError,
    HookvizError,
)

TENSOR_DETAILS = (
    *("value", "mean", "min", "max", "nan_count", "inf_count"),
    *("zero_fraction", "histogram", "overview"),
)


def _model_and_data():
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(6, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Dropout(0.3), nn.Linear(8, 3)
    ).train()
    x, y = torch.randn(5, 6), torch.tensor([0, 1, 2, 1, 0])
    return model, x, (lambda out: F.cross_entropy(out, y))


def _records(run):
    """Every record of a run as plain dicts, by place."""
    found = {}
    for node_id, node in run.nodes.items():
        for name in ("grad_outputs", "grad_inputs", "grad_inputs_before_edit", "grad_outputs_before_edit"):
            for i, record in enumerate(getattr(node, name) or ()):
                found[node_id, name, i] = None if record is None else record.to_dict()
        found[node_id, "output"] = None if node.output is None else node.output.to_dict()
    for i, call in enumerate(run.calls):
        for name in ("grad_input", "grad_output", "legacy_grad_input", "legacy_grad_output", "output"):
            for j, record in enumerate(getattr(call, name) or ()):
                found[i, name, j] = None if record is None else record.to_dict()
        for name, value in call.inputs.items():
            found[i, "inputs", name] = value if isinstance(value, str) else value.to_dict()
    return found


def _tensor_records(run) -> list:
    """Every gradient record of a run's nodes and module calls (None left out)."""
    found = []
    for node in run.nodes.values():
        for name in ("grad_outputs", "grad_inputs", "grad_inputs_before_edit", "grad_outputs_before_edit"):
            found += [r for r in getattr(node, name) or () if r is not None]
    for call in run.calls:
        for name in ("grad_input", "grad_output", "legacy_grad_input", "legacy_grad_output"):
            found += [r for r in getattr(call, name) or () if r is not None]
    return found


def _pending_places(run) -> int:
    """How many records of the run (nodes, module calls, gradient records) still wait."""
    return (
        sum(bool(n.pending) for n in run.nodes.values())
        + sum(bool(c.pending) for c in run.calls)
        + sum(bool(r.pending) for r in _tensor_records(run))
    )


def _same(a, b) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    return a == b


class _ForwardCalls:
    """A real forward hook on every module of the user's model, counting its calls."""

    def __init__(self, model: nn.Module):
        self.count = 0
        self.handles = [m.register_forward_hook(self.hook) for m in model.modules()]

    def hook(self, module, args, output):
        self.count += 1

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()


# ---------------------------------------------------------------------------- reads never run the model


def test_reading_repr_equality_copies_pickling_and_saving_a_lazy_run_never_run_the_model(tmp_path):
    model, x, loss_fn = _model_and_data()
    calls = _ForwardCalls(model)
    try:
        session = hookviz.Session(model, (x,), loss_fn=loss_fn, details="lazy")
        run = session.run()
        after_run = calls.count
        assert after_run == len(list(model.modules()))  # the hook is real: the run called it once each
        node = run.node("AddmmBackward0_0")
        grad = node.grad_outputs[0]
        # attributes: each pending field reads None and is named in pending
        assert node.pending == ("output",) and node.output is None
        assert grad.pending == TENSOR_DETAILS and all(getattr(grad, n) is None for n in TENSOR_DETAILS)
        assert grad.norm is not None and grad.finite  # known at once
        call = run.module_io("0")
        assert call.pending == ("inputs", "output", "output_replaced")
        # what module_io returns says "pending" where a value will be, and using it names the fix
        assert (call.inputs, call.output, call.output_replaced) == (PENDING, PENDING, PENDING)
        assert "pending: call run.fill_details()" in f"{call.inputs} {call}"
        with pytest.raises(DetailsPending, match=r"call run.fill_details\(\) first"):
            call.inputs["input"]
        with pytest.raises(DetailsPending, match="fill_details"):
            f"{call.output[0].mean:.3f}"
        assert "run.fill_details() records them" in repr(grad)
        assert "details pending: run.fill_details()" in repr(run)
        text = repr(node) + repr(call) + str(run.module_grads("0")) + grad.to_dict()["note"]
        assert text.count("pending") >= 4
        assert node == copy.copy(node) and grad == copy.deepcopy(grad) and run.calls == list(run.calls)
        assert run == copy.copy(run) and copy.deepcopy(run).loss == run.loss
        assert pickle.loads(pickle.dumps(node)) == node and pickle.loads(pickle.dumps(call)) == call
        assert run.details_pending and run.graph.number_of_nodes() == len(run.nodes)
        assert not leaf_diffs(run, run)["0.weight"].changed
        saved = hookviz.load(hookviz.save(run, tmp_path / "lazy"))
        assert calls.count == after_run  # none of the above ran the model
        # A file keeps what was recorded, pending included; it cannot record the rest.
        loaded = saved.node("AddmmBackward0_0").grad_outputs[0]
        assert loaded.pending == TENSOR_DETAILS and loaded.norm == grad.norm and loaded.value is None
        assert saved.details_pending
        with pytest.raises(DetailsUnavailable, match=r"before hookviz.save\(run, path\)"):
            saved.fill_details()
        run.fill_details()  # the call that does run it
        assert calls.count == 2 * after_run and not run.details_pending
        assert _pending_places(run) == 0
    finally:
        calls.remove()


def test_lazy_run_fills_every_detail_as_an_eager_run_records_it():
    model, x, loss_fn = _model_and_data()
    lazy_session = hookviz.Session(model, (x,), loss_fn=loss_fn, details="lazy")
    lazy_session.edit("4", "grad_output[0]", "grad * 3")
    lazy = lazy_session.run()
    assert _pending_places(lazy) > 0
    eager_session = hookviz.Session(model, (x,), loss_fn=loss_fn, details="eager")
    eager_session.edit("4", "grad_output[0]", "grad * 3")
    eager = eager_session.run()
    assert eager.details is None and not eager.details_pending and _pending_places(eager) == 0
    assert lazy.fill_details() is lazy
    assert _pending_places(lazy) == 0 and not lazy.details_pending
    lazy_records, eager_records = _records(lazy), _records(eager)
    assert lazy_records.keys() == eager_records.keys() and len(lazy_records) > 50
    for place in lazy_records:
        assert _same(lazy_records[place], eager_records[place]), place
    for name in lazy.leaf_grads:
        assert torch.equal(lazy.leaf_grad(name), eager.leaf_grad(name))


def test_filled_values_equal_a_plain_pytorch_forward_and_backward():
    """Every module's forward input and output, as a forward hook of PyTorch's sees them on a copy
    of the model, equals the filled run's bit for bit; so does each parameter's gradient."""
    model, x, loss_fn = _model_and_data()
    plain = copy.deepcopy(model)
    random_state = torch.get_rng_state()  # the run's forward starts from it (Dropout's mask)
    run = hookviz.Session(model, (x,), loss_fn=loss_fn, details="lazy").run().fill_details()
    seen = {}

    def keep(name):
        def hook(module, args, output) -> None:
            seen[name] = (args[0], output)

        return hook

    handles = [module.register_forward_hook(keep(name)) for name, module in plain.named_modules()]
    torch.set_rng_state(random_state)
    loss_fn(plain(x)).backward()
    for handle in handles:
        handle.remove()
    compared = 0
    for name, (argument, output) in seen.items():
        call = run.module_io(name)
        assert torch.equal(call.output[0].value, output.detach()), name
        assert torch.equal(next(iter(call.inputs.values())).value, argument.detach()), name
        compared += 1
    assert compared == len(list(plain.modules())) == 6
    assert torch.equal(run.node("AddmmBackward0_0").output.value, seen["0"][1].detach())
    for name, parameter in plain.named_parameters():
        assert torch.equal(run.leaf_grad(name), parameter.grad)
        assert torch.equal(run.node(name).grad_outputs[0].value, parameter.grad)
        compared += 1
    assert compared == 6 + 6


# ---------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    "change, named",
    [
        (lambda m, x: m[0].weight.add_(1.0), "parameter '0.weight' was changed in place"),
        (lambda m, x: m[1].running_mean.add_(1.0), "buffer '1.running_mean'"),
        (lambda m, x: setattr(m[4], "bias", nn.Parameter(m[4].bias + 1)), "parameter '4.bias' was replaced"),
        (lambda m, x: x.mul_(2.0), "input 'input' was changed in place"),
        (lambda m, x: m[0].weight.requires_grad_(False), "parameter '0.weight' changed requires_grad"),
        (lambda m, x: setattr(m[1], "running_var", m[1].running_var.double()), "buffer '1.running_var' was"),
        (lambda m, x: m[2].register_buffer("extra", torch.ones(1)), "buffer '2.extra' was added"),
    ],
    ids=[
        *("parameter in place", "buffer in place", "parameter replaced", "input in place"),
        *("requires_grad", "buffer replaced", "buffer added"),
    ],
)
def test_a_change_since_the_run_makes_fill_details_refuse_naming_it(change, named):
    model, x, loss_fn = _model_and_data()
    model.eval()  # BatchNorm's running statistics are then read, not updated
    run = hookviz.Session(model, (x,), loss_fn=loss_fn, details="lazy").run()
    with torch.no_grad():
        change(model, x)
    calls = _ForwardCalls(model)
    try:
        with pytest.raises(DetailsChanged, match=named.replace("(", r"\(")) as refused:
            run.fill_details()
    finally:
        calls.remove()
    assert calls.count == 0  # refused before anything ran
    assert "session.run(forward=True)" in str(refused.value)  # and what to do instead
    assert run.details_pending and _pending_places(run) > 0  # nothing half filled


def test_a_mode_switched_since_the_run_is_refused_also_for_a_run_on_the_retained_forward():
    model, x, loss_fn = _model_and_data()
    session = hookviz.Session(model, (x,), loss_fn=loss_fn, details="lazy")
    first = session.run()
    model.eval()
    with pytest.raises(DetailsChanged, match="switched to eval mode"):
        first.fill_details()
    # A backward-only re-run has the numbers of the forward it reuses (recorded in train mode).
    again = session.run()
    assert again.forward_reused
    with pytest.raises(DetailsChanged, match="switched to eval mode"):
        again.fill_details()
    model.train()  # back as it was: still refused, a change hookviz cannot undo by itself
    with pytest.raises(DetailsChanged):
        first.fill_details()
    fresh = session.run(forward=True)
    assert fresh.fill_details() is fresh and not fresh.details_pending


def test_hookvizs_own_forwards_are_no_change_a_run_is_refused_for():
    """BatchNorm in train mode bumps num_batches_tracked in each forward, hookviz's included (and
    puts it back). Runs and fills after a run leave it fillable, in any order."""
    model, x, loss_fn = _model_and_data()
    session = hookviz.Session(model, (x,), loss_fn=loss_fn, details="lazy")
    first = session.run()
    second = session.run(forward=True)
    third = session.run(forward=True)
    eager = hookviz.Session(model, (x,), loss_fn=loss_fn, details="eager").run()
    for run in (second, first, third):
        run.fill_details()
        assert _same(_records(run), _records(eager))
    assert model[1].num_batches_tracked.item() == 0


def test_a_hook_removed_since_the_run_makes_it_not_reproducible():
    model, x, loss_fn = _model_and_data()
    handle = model[4].weight.register_hook(lambda grad: grad * 2)
    run = hookviz.Session(model, (x,), loss_fn=loss_fn, details="lazy").run()
    handle.remove()
    with pytest.raises(DetailsNotReproduced, match="4.weight"):
        run.fill_details()
    assert _pending_places(run) > 0 and run.details_pending


@pytest.mark.parametrize("failure", [ValueError, KeyboardInterrupt])
def test_an_unexpected_error_while_filling_propagates_and_nothing_is_half_filled(failure):
    """A forward hook of the user's that raises the second time the model runs (or Ctrl+C then):
    the error reaches the caller as it would from Session.run, never as a refusal or a note; the
    records stay pending, and the model keeps its hooks, parameters and buffers."""
    model, x, loss_fn = _model_and_data()
    calls = []

    def hook(module, args, output):
        calls.append(1)
        if len(calls) > 1:
            raise failure("stop")

    handle = model[0].register_forward_hook(hook)
    try:
        run = hookviz.Session(model, (x,), loss_fn=loss_fn, details="lazy").run()
        state = copy.deepcopy(model.state_dict())
        expected = ForwardError if failure is ValueError else KeyboardInterrupt
        with pytest.raises(expected) as raised:
            run.fill_details()
        assert not isinstance(raised.value, DetailsRefused)
        if failure is ValueError:
            assert isinstance(raised.value.__cause__, ValueError) and "stop" in str(raised.value)
        assert list(model[0]._forward_hooks.values()) == [hook]
    finally:
        handle.remove()
    assert len(calls) == 2 and run.details_pending and _pending_places(run) > 0
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())


def test_a_lazy_run_whose_run_is_gone_cannot_be_filled():
    model, x, loss_fn = _model_and_data()
    session = hookviz.Session(model, (x,), loss_fn=loss_fn, details="lazy")
    session.run()
    run = session.run()
    details = run.details
    del run
    session.run()
    with pytest.raises(DetailsUnavailable, match="gone"):
        details.fill()


# ---------------------------------------------------------------------------- state put back


class _HalvesItsWeight(nn.Module):
    """A forward that changes a parameter in place under no_grad (a hand-rolled decay), after the
    op that reads it (addition does not save its operands, so backward is unaffected)."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 3)
        self.offset = nn.Parameter(torch.tensor([1.0, 2.0, 3.0]))

    def forward(self, x):
        out = self.linear(x) + self.offset
        with torch.no_grad():
            self.offset.mul_(0.5)
        return out


def test_a_parameter_the_forward_changes_in_place_is_as_before_after_run_and_fill():
    torch.manual_seed(0)
    model, x = _HalvesItsWeight(), torch.randn(2, 4)
    before = model.offset.detach().clone()
    plain = copy.deepcopy(model)
    expected = plain(x)
    run = hookviz.Session(model, (x,), loss_fn=lambda out: out.pow(2).sum(), details="lazy").run()
    assert torch.equal(model.offset, before)
    run.fill_details()
    assert torch.equal(model.offset, before)
    assert torch.equal(run.module_io("").output[0].value, expected.detach())


def test_filling_puts_back_a_parameter_and_a_buffer_the_forward_changes_in_place():
    """The fill's own forward changes the model as every forward of it does; the fill puts it back
    after its backward, leaving the model as the run left it."""

    class Counting(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(4, 3)
            self.register_buffer("steps", torch.zeros(()))
            self.calls = nn.Parameter(torch.zeros(()), requires_grad=False)  # a counter, as a parameter

        def forward(self, x):
            out = self.linear(x) + self.steps
            with torch.no_grad():
                self.steps.add_(1)
                self.calls.add_(1)
            return out

    torch.manual_seed(0)
    model, x = Counting(), torch.randn(2, 4)
    plain = copy.deepcopy(model)
    run = hookviz.Session(model, (x,), loss_fn=lambda out: out.pow(2).sum(), details="lazy").run()
    left = {k: v.clone() for k, v in model.state_dict().items()}
    run.fill_details()
    assert all(torch.equal(left[k], v) for k, v in model.state_dict().items()) and len(left) == 4
    assert torch.equal(run.module_io("").output[0].value, plain(x).detach())
    assert run.fill_details() is run  # filled once; the model is still left as it was
    second = hookviz.Session(model, (x,), loss_fn=lambda out: out.pow(2).sum(), details="lazy").run()
    assert second.fill_details() is second


# ---------------------------------------------------------------------------- kept from before


def test_a_weight_gradient_and_its_transpose_are_reduced_once_and_keep_their_shapes(monkeypatch):
    torch.manual_seed(0)
    model, x = nn.Sequential(nn.Linear(80, 64), nn.Tanh()), torch.randn(16, 80)
    reduced = []
    norm, foreach_norm = torch.linalg.vector_norm, torch._foreach_norm

    def counting(reduce):
        def counted(tensors, *args, **kwargs):
            reduced.extend(t.numel() for t in (tensors if isinstance(tensors, list) else [tensors]))
            return reduce(tensors, *args, **kwargs)

        return counted

    monkeypatch.setattr(torch.linalg, "vector_norm", counting(norm))
    monkeypatch.setattr(torch, "_foreach_norm", counting(foreach_norm))
    run = hookviz.Session(model, (x,), loss_fn=lambda out: out.sum(), details="lazy").run()
    transposed, weight = run.node("AddmmBackward0_0").grad_inputs[2], run.node("TBackward0_0").grad_inputs[0]
    norms = (weight.norm, transposed.norm)  # read: every queued norm has been taken
    monkeypatch.undo()
    assert reduced.count(64 * 80) == 1  # AddmmBackward0's mat2 gradient; TBackward0 passes on its view
    assert norms[0] == norms[1]
    assert (transposed.shape, weight.shape) == ((80, 64), (64, 80))
    plain = copy.deepcopy(model)
    plain(x).sum().backward()
    assert math.isclose(weight.norm, plain[0].weight.grad.norm().item(), rel_tol=1e-6)
    run.fill_details()
    assert weight.norm == transposed.norm and weight.min == transposed.min  # filled, and equal
    assert not run.details_pending


def test_larger_gradients_wait_for_one_batched_norm_call_and_get_the_norms_taken_alone(monkeypatch):
    """A lazy run takes the norms of its larger gradients in one torch call per batch of at most
    HOLD_LARGE_BYTES, each bit for bit the norm the gradient gets alone (a batch of one)."""
    torch.manual_seed(0)
    model = nn.Sequential(*[m for _ in range(4) for m in (nn.Linear(96, 96), nn.Sigmoid())])
    x = torch.randn(64, 96)
    foreach_norm, batches = torch._foreach_norm, []

    def counted(tensors, *args, **kwargs):
        batches.append(sum(t.numel() >= stats.VIEWS_ABOVE for t in tensors))
        return foreach_norm(tensors, *args, **kwargs)

    monkeypatch.setattr(torch, "_foreach_norm", counted)
    runs = {}
    for waiting in (stats.HOLD_LARGE_BYTES, 0):
        monkeypatch.setattr(stats, "HOLD_LARGE_BYTES", waiting)
        batches.clear()
        session = hookviz.Session(model, (x,), loss_fn=lambda out: out.pow(2).sum(), details="lazy")
        runs[waiting] = session.run()
        runs[waiting].fill_deferred()
        runs[waiting] = (runs[waiting], [b for b in batches if b])
    monkeypatch.undo()
    (batched, batched_calls), (alone, alone_calls) = runs.values()
    # the 4 weight gradients and the gradients of the activations (64 x 96 elements) around each layer
    assert len(alone_calls) >= 7 and alone_calls == [1] * len(alone_calls)
    assert batched_calls == [len(alone_calls)]
    compared = 0
    for node_id, node in batched.nodes.items():
        for name in ("grad_inputs", "grad_outputs"):
            for record, other in zip(getattr(node, name), getattr(alone.node(node_id), name)):
                if record is not None and record.numel >= stats.VIEWS_ABOVE:
                    assert record.norm == other.norm, (node_id, name)
                    compared += 1
    assert compared >= 7


def test_small_gradients_are_held_to_the_run_end_and_take_the_norms_a_per_tensor_call_gives(monkeypatch):
    """A lazy run takes the norms of small CPU gradients at its end, in fewer torch calls the more it
    holds, each norm bit for bit the one a torch.linalg.vector_norm call per
    gradient gives (holding nothing); also when the memory bound stops the holding part way;
    float32 and float64 gradients alike."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16).double(), nn.Tanh(), nn.Linear(16, 16).double(), nn.Sigmoid())
    head = nn.Linear(16, 3)  # float32 from here on

    def loss_fn(out):
        return head(out.float()).pow(2).sum()

    x = torch.randn(6, 8, dtype=torch.float64)
    vector_norm, foreach_norm, calls = torch.linalg.vector_norm, torch._foreach_norm, []

    def counting(function, name):
        def counted(*args, **kwargs):
            calls.append(name)
            return function(*args, **kwargs)

        return counted

    monkeypatch.setattr(torch.linalg, "vector_norm", counting(vector_norm, "vector_norm"))
    monkeypatch.setattr(torch, "_foreach_norm", counting(foreach_norm, "foreach"))
    runs, counts, default = {}, {}, stats.HOLD_SMALL_UP_TO
    for bound in (default, 200, -1):
        monkeypatch.setattr(stats, "HOLD_SMALL_UP_TO", bound)
        # holding nothing: no larger gradient waits for a batch either
        monkeypatch.setattr(stats, "HOLD_LARGE_BYTES", 0 if bound < 0 else stats.HOLD_LARGE_BYTES)
        calls.clear()
        runs[bound] = hookviz.Session(model, (x,), loss_fn=loss_fn, details="lazy").run()
        runs[bound].fill_deferred()  # the batched norms are taken when the records are made
        counts[bound] = (calls.count("vector_norm"), calls.count("foreach"))
    monkeypatch.setattr(torch.linalg, "vector_norm", vector_norm)
    monkeypatch.setattr(torch, "_foreach_norm", foreach_norm)
    every, part, none = runs.values()
    assert counts[default][1] >= 1  # the held float32 gradients, in one call
    assert sum(counts[default]) <= sum(counts[200]) <= sum(counts[-1])  # fewer calls the more is held
    assert sum(counts[default]) < sum(counts[-1])

    def norms(run):
        return {
            (node_id, name, i): record.norm
            for node_id, node in run.nodes.items()
            for name in ("grad_inputs", "grad_outputs")
            for i, record in enumerate(getattr(node, name))
            if record is not None
        }

    assert norms(every) == norms(part) == norms(none)
    assert {r.dtype for n in every.nodes.values() for r in n.grad_outputs if r} == {"float32", "float64"}
    model.zero_grad()
    loss_fn(model(x)).backward()
    for name, parameter in model.named_parameters():
        expected = vector_norm(parameter.grad).item()
        assert every.node(name).grad_outputs[0].norm == expected


@pytest.mark.parametrize("details", ["lazy", "eager"])
def test_a_gradient_a_hook_changes_in_place_after_hookviz_saw_it_is_marked_not_misreported(details):
    """PyTorch's hooks must not modify their argument; one that does (``grad.mul_(2)``) changes a
    gradient a Node hook already saw. The record of it says so, in a lazy and an eager run alike;
    it never shows the changed values as the ones the Node sent."""

    class Doubling(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(3, 4), nn.Linear(4, 2)

        def forward(self, x):
            h = torch.tanh(self.a(x))
            h.register_hook(self.double_in_place)
            return self.b(h)

        @staticmethod
        def double_in_place(grad):
            grad.mul_(2)  # and returns None

    torch.manual_seed(0)
    model, x = Doubling(), torch.randn(5, 3)
    run = hookviz.Session(model, (x,), loss_fn=lambda out: out.sum(), details=details).run()
    sent = run.node("AddmmBackward0_1").grad_inputs[1]  # b's gradient w.r.t. h, before the hook
    assert sent.norm is None and sent.value is None and not sent.pending
    assert "modified in place after it was recorded" in sent.note
    received = run.node("TanhBackward0_0").grad_outputs[0]  # after the hook doubled it
    plain = torch.ones(5, 2) @ model.b.weight * 2
    assert received.norm == pytest.approx(torch.linalg.vector_norm(plain).item(), rel=1e-6)


def test_a_replaced_lazy_run_is_freed_at_once_not_left_to_the_cyclic_collector():
    model, x, loss_fn = _model_and_data()
    session = hookviz.Session(model, (x,), loss_fn=loss_fn, details="lazy")
    session.run()  # the baseline stays
    run = session.run()
    node = next(n for n in run.nodes.values() if n.kind == "op")
    records = [weakref.ref(node), weakref.ref(node.grad_outputs[0]), weakref.ref(run.details)]
    assert node.pending and node.grad_outputs[0].pending
    gc.disable()
    try:
        del run, node
        session.run()  # replaces last_run: nothing holds the old run's records any more
        assert [r() for r in records] == [None, None, None]
    finally:
        gc.enable()


def test_a_backward_only_rerun_and_a_dropped_session_still_fill_their_details():
    model, x, loss_fn = _model_and_data()
    session = hookviz.Session(model, (x,), loss_fn=loss_fn, details="lazy")
    session.run()
    rerun = session.run()
    assert rerun.forward_reused
    expected = hookviz.Session(model, (x,), loss_fn=loss_fn, details="eager").run()
    del session  # the run keeps what made it, not the session's retained graph
    assert _same(_records(rerun.fill_details()), _records(expected))


def test_details_are_recorded_with_the_hooks_the_run_had():
    model, x, loss_fn = _model_and_data()
    model.eval()
    handle = model[2].register_forward_hook(lambda module, args, output: output * 2)
    try:
        run = hookviz.Session(model, (x,), loss_fn=loss_fn, details="lazy").run()
    finally:
        handle.remove()
    assert not model[2]._forward_hooks  # removed before the details were recorded
    call = run.fill_details().module_io("2")
    assert call.output_replaced is not None
    assert torch.equal(call.output_replaced[0].value, call.output[0].value * 2)
    assert not model[2]._forward_hooks  # and still removed afterwards


def test_diff_and_diagnose_record_the_details_they_need_and_say_when_they_cannot():
    model, x, loss_fn = _model_and_data()
    session = hookviz.Session(model, (x,), loss_fn=loss_fn, details="lazy")
    before = session.run()
    session.edit("4", "grad_output[0]", "-grad")  # same norms everywhere, other values
    after = session.run()
    assert before.details_pending and after.details_pending
    changed = hookviz.diff(before, after).changed_nodes
    assert not before.details_pending and not after.details_pending
    eager = hookviz.Session(model, (x,), loss_fn=loss_fn, details="eager")
    eager_before = eager.run()
    eager.edit("4", "grad_output[0]", "-grad")
    assert changed == hookviz.diff(eager_before, eager.run()).changed_nodes and changed
    late = session.run(forward=True)
    assert late.details_pending
    with torch.no_grad():
        model[0].bias.add_(1.0)
    with pytest.raises(DetailsChanged, match="parameter '0.bias'"):
        hookviz.diagnose(late)
    # diff compares what the late run holds (its norms), and says why
    partial = hookviz.diff(before, late)
    assert list(partial.unfilled) == ["after"] and "parameter '0.bias'" in partial.unfilled["after"]
    assert partial.changed_leaves == list(late.leaf_grads) and late.details_pending  # leaves: exact
    assert partial.changed_nodes == []  # "-grad" keeps every norm: only values could tell
    assert issubclass(DetailsChanged, HookvizError)


def test_the_widgets_request_for_details_shows_a_refusal_beside_it_and_stops_asking(monkeypatch):
    import hookviz.record.details as record_details

    model, x, loss_fn = _model_and_data()
    monkeypatch.setattr(record_details, "IN_FULL_NODES", 0)  # a large run: details wait for the page
    widget = hookviz.show(model, (x,), loss_fn=loss_fn)
    assert widget.details_pending and widget.run.details_pending
    model.eval()  # between the first paint and the page's request
    reply = widget.handle_message({"type": "details"})
    assert reply == {"type": "reply", "request": "details", "ok": False, "error": None}
    assert "switched to eval mode" in widget.errors["details"]
    assert widget.errors["details"] == widget.diagnosis["error"]
    assert not widget.details_pending and widget.run.details_pending  # nothing was guessed
    widget.select(widget.run.root)  # the inspector shows what is pending
    assert widget.inspector["pending"] == ["output"] and widget.inspector["output"] is None
    assert widget.inspector["grad_outputs"][0]["note"].startswith("details not recorded yet")
    assert widget.rerun(forward=True) and widget.details_pending  # a new run, recorded after the change
    assert widget.fill_details() and not widget.run.details_pending
    # the baseline (the first run) stays as it was recorded, and the widget says why
    assert widget.errors["details"].startswith("the baseline run's values (shown as before)")
    assert widget.session.baseline.details_pending
    assert widget.inspector["output"]["value"] is not None


# ---------------------------------------------------------------------------- only this run's numbers


def _refused_case(change: str):
    """A small model, a run of it, and ``change`` applied after the run: each makes a second
    recording compute other numbers in a way the model's marks do not show."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
    x, weights, scale = torch.randn(5, 3), torch.randn(2), [1.0]

    def loss_fn(out):
        return (out * weights).sum() * scale[0]

    session = hookviz.Session(model, (x,), loss_fn=loss_fn, details="lazy")
    run = session.run()
    undo = {
        "a number loss_fn reads": lambda: scale.__setitem__(0, -1.0),
        "a tensor loss_fn captured, changed in place": lambda: weights.neg_(),
        "a tensor hook added after the run": lambda: model[0].weight.register_hook(lambda g: -g).remove,
        "a parameter changed through .data": lambda: model[2].weight.data.neg_(),
    }[change]()
    return session, run, undo


@pytest.mark.parametrize(
    "change, named",
    [
        ("a number loss_fn reads", "the loss"),
        ("a tensor loss_fn captured, changed in place", "the loss"),
        ("a tensor hook added after the run", "the gradient of leaf '0.weight'"),
        ("a parameter changed through .data", "the loss"),
    ],
)
def test_fill_details_refuses_numbers_that_are_not_the_runs_own(change, named):
    """The second recording must give this run's loss and leaf gradients bit for bit; a negated
    gradient keeps every norm, so only the values can tell (the case that filled 21 records
    with negated numbers before)."""
    session, run, _ = _refused_case(change)
    loss, leaves = run.loss.clone(), {k: v.clone() for k, v in run.leaf_grads.items()}
    with pytest.raises(DetailsNotReproduced, match=named) as refused:
        run.fill_details()
    assert "s.run()" in str(refused.value) or "session.run(forward=True)" in str(refused.value)
    assert 'details="eager"' in str(refused.value)
    # Refused, the run is as it was: still pending, its own numbers, and usable.
    assert run.details_pending and _pending_places(run) > 0
    assert torch.equal(run.loss, loss) and all(torch.equal(run.leaf_grads[k], v) for k, v in leaves.items())
    assert len(leaves) == 4
    assert run.module_io("0").pending and run.node("AddmmBackward0_0").grad_outputs[0].norm is not None
    fresh = session.run(forward=True).fill_details()  # the fix the message names
    assert not fresh.details_pending


def test_a_run_refused_once_fills_when_what_changed_is_put_back():
    session, run, undo = _refused_case("a tensor hook added after the run")
    with pytest.raises(DetailsNotReproduced):
        run.fill_details()
    undo()
    run.fill_details()
    assert not run.details_pending and _pending_places(run) == 0
    assert torch.equal(run.module_io("0").inputs["input"].value, session.args[0])


def test_a_deep_copy_fills_itself_and_leaves_the_original_pending():
    model, x, loss_fn = _model_and_data()
    run = hookviz.Session(model, (x,), loss_fn=loss_fn, details="lazy").run()
    twin = copy.deepcopy(run)
    twin.fill_details()
    assert not twin.details_pending and _pending_places(twin) == 0
    assert twin.module_io("0").inputs["input"].value is not None
    assert run.details_pending and run.module_io("0").inputs is PENDING  # the original untouched
    run.fill_details()
    assert run == twin  # filled apart, the same numbers
    filled_copy = copy.deepcopy(run)
    assert not filled_copy.details_pending and filled_copy == run


def test_equality_on_runs_and_records_is_by_value_and_never_raises():
    model, x, loss_fn = _model_and_data()
    first = hookviz.Session(model, (x,), loss_fn=loss_fn, details="eager").run()
    second = hookviz.Session(model, (x,), loss_fn=loss_fn, details="eager").run()
    other = hookviz.Session(model, (x * 2,), loss_fn=loss_fn, details="eager").run()
    assert first == second and first != other  # two sessions, the same numbers; other inputs
    node = first.node("AddmmBackward0_0")
    assert node == copy.deepcopy(node) and node == second.node("AddmmBackward0_0")
    assert node != other.node("AddmmBackward0_0")
    assert first.module_io("0") == copy.deepcopy(first.module_io("0"))
    assert first.module_grads("0") == second.module_grads("0") != other.module_grads("0")
    changes = hookviz.diff(first, other)
    assert changes == copy.deepcopy(changes) and changes != hookviz.diff(first, second)
    assert hookviz.diff(first, second) == hookviz.diff(second, first)
    assert first.hook_calls == second.hook_calls and first != "a run" and node != None  # noqa: E711
    lazy = hookviz.Session(model, (x,), loss_fn=loss_fn, details="lazy").run()
    assert lazy != first  # pending is part of what a record holds
    with pytest.raises(TypeError, match="unhashable"):
        hash(node)


def test_a_run_pickles_and_an_unpickled_pending_run_names_the_fix(tmp_path):
    model, x, loss_fn = _model_and_data()
    filled = hookviz.Session(model, (x,), loss_fn=loss_fn).run()
    assert not filled.details_pending
    assert pickle.loads(pickle.dumps(filled)) == filled
    lazy = hookviz.Session(model, (x,), loss_fn=loss_fn, details="lazy").run()
    back = pickle.loads(pickle.dumps(lazy))
    assert back == lazy and back.details_pending and back.module_io("0").inputs is PENDING
    with pytest.raises(DetailsUnavailable, match=r"before hookviz.save\(run, path\) or pickle"):
        back.fill_details()
    assert lazy.details_pending  # pickling it ran nothing and filled nothing
    assert hookviz.load(hookviz.save(lazy, tmp_path / "lazy")).module_io("0").inputs is PENDING
