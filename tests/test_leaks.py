"""Nothing leaks: a notebook that runs hookviz all day must not grow.

Live tensors are counted with ``gc.get_objects()`` (bytes of distinct storages), so a tensor kept
alive by a cycle through C++ that gc cannot free shows up here.
"""

from __future__ import annotations

import gc
import warnings

import pytest
import torch
from conftest import assert_same_state, model_state
from torch import nn

import hookviz
from hookviz.record.backward_recorder import BackwardRecorder


def _live_tensor_bytes() -> int:
    gc.collect()
    storages = {}
    with warnings.catch_warnings():  # isinstance() on every object touches deprecated module attributes
        warnings.simplefilter("ignore", FutureWarning)
        things = [t for t in gc.get_objects() if isinstance(t, torch.Tensor)]
    for thing in things:
        try:
            if isinstance(thing, torch.Tensor) and not thing.is_meta and thing.layout == torch.strided:
                storage = thing.untyped_storage()
                storages[storage.data_ptr()] = storage.nbytes()
        except (RuntimeError, NotImplementedError):
            continue
    return sum(storages.values())


def _relu_mlp(width: int = 256) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(*[m for _ in range(6) for m in (nn.Linear(width, width), nn.ReLU())])


def _rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096


def test_dropped_sessions_and_fresh_forwards_leave_no_tensors_alive():
    model, data = _relu_mlp(), torch.randn(64, 256)
    before = _live_tensor_bytes()
    for _ in range(10):
        hookviz.Session(model, (data,), loss_fn=lambda out: out.sum()).run()
    session = hookviz.Session(model, (data,), loss_fn=lambda out: out.sum())
    for _ in range(20):
        session.run(forward=True)
    del session
    grown = _live_tensor_bytes() - before
    # One forward of this model keeps about 0.8 MB of activations and 1.6 MB of gradients.
    assert grown < 1_000_000, f"{grown / 1e6:.2f} MB of tensors still alive"


def test_a_thousand_backward_only_reruns_do_not_grow_memory():
    session = hookviz.Session(_relu_mlp(64), (torch.randn(8, 64),), loss_fn=lambda out: out.sum())
    for _ in range(20):  # warm up the allocator and the caches
        session.run()
    start = _rss_bytes()
    for _ in range(1000):
        run = session.run()
    assert run.forward_reused
    assert _rss_bytes() - start < 50_000_000


def test_release_removes_every_hook_hookviz_registered():
    model, data = _relu_mlp(), torch.randn(4, 256)
    model[0].register_forward_hook(lambda module, args, output: None)
    before = model_state(model, (data,))
    session = hookviz.Session(model, (data,), loss_fn=lambda out: out.sum())
    session.edit("2", "grad_input[0]", "grad * 2")
    session.run()
    graph = session._forward
    leaves = list(graph.leaves.values())

    def nodes_recorded() -> int:
        recorder = BackwardRecorder()
        graph.state.active = recorder
        try:
            torch.autograd.grad(graph.loss, leaves, retain_graph=True)
        finally:
            graph.state.active = None
        return len(recorder.order) + len(recorder.hook_calls)

    assert nodes_recorded() > 0  # hookviz's Node hooks are on the retained graph
    session.release()
    assert nodes_recorded() == 0  # ... and gone after release()
    assert session._forward is None
    assert_same_state(before, model_state(model, (data,)))  # module hooks and flags as they were


def test_a_run_not_yet_read_keeps_none_of_its_forwards_activations():
    """A run makes its records on first read; until then it holds its own gradients and plain
    data, not the retained forward: once the session lets that forward go, the activations it
    saved for backward are freed, and the run still reads what plain PyTorch computes."""
    import weakref

    activations = []

    class Probe(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(16, 16)

        def forward(self, x):
            hidden = torch.sigmoid(self.fc(x))
            activations.append(weakref.ref(hidden))
            return (hidden * hidden).sum()  # MulBackward0 saves hidden itself

    torch.manual_seed(0)
    model, data = Probe(), torch.randn(4, 16)
    session = hookviz.Session(model, (data,))
    run = session.run()
    assert "nodes" not in run.__dict__  # not assembled yet
    session.release()
    assert activations[0]() is None
    plain = Probe()
    plain.load_state_dict(model.state_dict())
    plain(data).backward()
    assert torch.equal(run.leaf_grad("fc.weight"), plain.fc.weight.grad)
    hidden = torch.sigmoid(plain.fc(data))
    sigmoid = next(n for n in run.nodes.values() if n.op == "SigmoidBackward0")
    assert sigmoid.grad_outputs[0].norm == pytest.approx((2 * hidden).double().norm().item(), rel=1e-7)
