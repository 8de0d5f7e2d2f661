"""Lazy runs (the default): norms at once, every other detail filled on first read, equal to an
eager run's, or marked unavailable with the reason, never guessed."""

from __future__ import annotations

import copy
import gc
import math
import weakref

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import hookviz
from hookviz.errors import HookvizError
from hookviz.examples import sigmoid_mlp
from hookviz.stats import engine as stats


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


def _same(a, b) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    return a == b


def test_lazy_run_fills_every_detail_as_an_eager_run_records_it():
    model, x, loss_fn = _model_and_data()
    lazy_session = hookviz.Session(model, (x,), loss_fn=loss_fn)
    lazy_session.edit("4", "grad_output[0]", "grad * 3")
    lazy = lazy_session.run()
    node = next(n for n in lazy.nodes.values() if n.kind == "op")
    # At once: shape and norm; nothing else was computed yet.
    assert node.grad_outputs[0].pending and "norm" in node.grad_outputs[0].__dict__
    assert "min" not in node.grad_outputs[0].__dict__ and lazy.calls[0].pending
    eager_session = hookviz.Session(model, (x,), loss_fn=loss_fn, details="eager")
    eager_session.edit("4", "grad_output[0]", "grad * 3")
    eager = eager_session.run()
    assert eager.details is None and not eager.calls[0].pending
    lazy_records, eager_records = _records(lazy), _records(eager)
    assert lazy_records.keys() == eager_records.keys()
    for place in lazy_records:
        assert _same(lazy_records[place], eager_records[place]), place
    assert not any(r.pending for n in lazy.nodes.values() for r in n.grad_outputs if r is not None)
    for name in lazy.leaf_grads:
        assert torch.equal(lazy.leaf_grad(name), eager.leaf_grad(name))


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
    run = hookviz.Session(model, (x,), loss_fn=lambda out: out.sum()).run()
    monkeypatch.undo()
    assert reduced.count(64 * 80) == 1  # AddmmBackward0's mat2 gradient; TBackward0 passes on its view
    transposed, weight = run.node("AddmmBackward0_0").grad_inputs[2], run.node("TBackward0_0").grad_inputs[0]
    assert (transposed.shape, weight.shape) == ((80, 64), (64, 80))
    plain = copy.deepcopy(model)
    plain(x).sum().backward()
    assert math.isclose(weight.norm, plain[0].weight.grad.norm().item(), rel_tol=1e-6)
    assert weight.norm == transposed.norm and weight.min == transposed.min  # filled, and equal
    assert not run.details_pending


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
        calls.clear()
        runs[bound] = hookviz.Session(model, (x,), loss_fn=loss_fn).run()
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
    assert sent.norm is None and sent.value is None
    assert "modified in place after it was recorded" in sent.note
    received = run.node("TanhBackward0_0").grad_outputs[0]  # after the hook doubled it
    plain = torch.ones(5, 2) @ model.b.weight * 2
    assert received.norm == pytest.approx(torch.linalg.vector_norm(plain).item(), rel=1e-6)


def test_a_replaced_lazy_run_is_freed_at_once_not_left_to_the_cyclic_collector():
    model, x, loss_fn = _model_and_data()
    session = hookviz.Session(model, (x,), loss_fn=loss_fn)
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


def test_a_record_kept_after_its_run_is_gone_says_its_details_are_unavailable():
    model, x, loss_fn = _model_and_data()
    session = hookviz.Session(model, (x,), loss_fn=loss_fn)
    session.run()
    run = session.run()
    grad = next(n for n in run.nodes.values() if n.kind == "op").grad_outputs[0]
    norm = grad.norm
    del run
    session.run()  # replaces last_run: the record alone is left
    assert grad.pending and grad.norm == norm
    assert grad.min is None and not grad.pending
    assert "details unavailable: the run they belong to is gone" in grad.note


def test_a_backward_only_rerun_and_a_dropped_session_still_fill_their_details():
    model, x, loss_fn = _model_and_data()
    session = hookviz.Session(model, (x,), loss_fn=loss_fn)
    session.run()
    rerun = session.run()
    assert rerun.forward_reused
    expected = hookviz.Session(model, (x,), loss_fn=loss_fn, details="eager").run()
    del session  # the run keeps what made it, not the session's retained graph
    assert _same(_records(rerun), _records(expected))


def test_details_are_recorded_with_the_hooks_the_run_had():
    model, x, loss_fn = _model_and_data()
    model.eval()
    handle = model[2].register_forward_hook(lambda module, args, output: output * 2)
    try:
        run = hookviz.Session(model, (x,), loss_fn=loss_fn).run()
    finally:
        handle.remove()
    assert not model[2]._forward_hooks  # removed before anything was read
    call = run.module_io("2")
    assert call.output_replaced is not None
    assert torch.equal(call.output_replaced[0].value, call.output[0].value * 2)
    assert not model[2]._forward_hooks  # and still removed afterwards


def test_details_of_a_run_whose_model_changed_since_are_marked_not_guessed():
    torch.manual_seed(0)
    model = sigmoid_mlp(depth=3, width=8, inputs=4, classes=3)
    x, y = torch.randn(5, 4), torch.tensor([0, 1, 2, 1, 0])
    run = hookviz.Session(model, (x,), loss_fn=lambda out: F.cross_entropy(out, y)).run()
    norm = run.nodes[run.root].grad_outputs[0].norm
    with torch.no_grad():
        model[0].weight.add_(1.0)  # an optimizer step
    record = run.nodes[run.root].grad_outputs[0]
    assert record.min is None and record.value is None
    assert "details unavailable" in record.note and "changed since the run" in record.note
    assert record.norm is None or record.norm == norm
    assert run.module_io("0").output == []  # forward values are not guessed either
    # The leaf gradients themselves are kept whole in every run.
    assert run.leaf_grad("0.weight").shape == model[0].weight.shape


@pytest.mark.parametrize("failure", [RuntimeError, KeyboardInterrupt])
def test_a_details_recording_that_fails_marks_the_records_and_never_half_fills(failure):
    """A user hook that raises on the second recording (or Ctrl+C during it): every deferred field
    says why it is missing; reading one never raises AttributeError; Ctrl+C still stops the caller."""
    model, x, loss_fn = _model_and_data()
    calls = []

    def hook(module, args, output):
        calls.append(1)
        if len(calls) > 1:
            raise failure("stop")

    handle = model[0].register_forward_hook(hook)
    try:
        run = hookviz.Session(model, (x,), loss_fn=loss_fn).run()
        if failure is KeyboardInterrupt:
            with pytest.raises(KeyboardInterrupt):
                run.fill_details()
        else:
            run.fill_details()
    finally:
        handle.remove()
    assert not run.details_pending
    record = run.nodes[run.root].grad_outputs[0]
    assert record.min is None and record.value is None
    assert "details unavailable: recording them again failed" in record.note
    assert run.module_io("0").output == []


def test_fill_details_copies_and_bad_options():
    model, x, loss_fn = _model_and_data()
    run = hookviz.Session(model, (x,), loss_fn=loss_fn).run()
    record = run.nodes[run.root].grad_outputs[0]
    clone = copy.deepcopy(record)  # a copy is of the values, so it fills first
    assert not clone.pending and not record.pending and clone.value is not None
    assert run.fill_details() is run
    with pytest.raises(HookvizError, match='pass "lazy"'):
        hookviz.Session(model, (x,), loss_fn=loss_fn, details="later")
