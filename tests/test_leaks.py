"""Nothing leaks: a notebook that runs hookviz all day must not grow.

Live tensors are counted with ``gc.get_objects()`` (bytes of distinct storages), so a tensor kept
alive by a cycle through C++ that gc cannot free shows up here.
"""

from __future__ import annotations

import functools
import gc
import tempfile
import traceback
import warnings
import weakref
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
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


def test_ten_dropped_sessions_of_fresh_models_leave_no_tensors_alive():
    data = torch.randn(64, 256)
    before = _live_tensor_bytes()
    for _ in range(10):  # each model's 6 x 256 x 256 weights are 1.6 MB
        hookviz.Session(_relu_mlp(), (data,), loss_fn=lambda out: out.sum()).run()
    grown = _live_tensor_bytes() - before
    assert grown < 1_000_000, f"{grown / 1e6:.2f} MB of tensors still alive"


def _small() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 1))


def _loss(out: torch.Tensor) -> torch.Tensor:
    return out.pow(2).sum()


def _train(model: nn.Module, data: torch.Tensor, steps: int = 2) -> None:
    for _ in range(steps):
        model.zero_grad()
        _loss(model(data)).backward()


def _use_and_drop(use, model: nn.Module | None = None):
    """``use(model, data)`` on a fresh model, then the model and all ``use`` made dropped (but what
    it returns): (a weak reference to the model, what ``use`` returned)."""
    model, data = model if model is not None else _small(), torch.randn(4, 8)
    kept = use(model, data)
    reference = weakref.ref(model)
    del model
    gc.collect()
    return reference, kept


def _run(model, data):
    hookviz.Session(model, (data,), loss_fn=_loss).run()


def _fill_details(model, data):
    run = hookviz.Session(model, (data,), loss_fn=_loss, details="lazy").run()
    assert run.details_pending
    run.fill_details()
    assert not run.details_pending


def _release(model, data):
    session = hookviz.Session(model, (data,), loss_fn=_loss)
    session.run()
    session.release()


def _open_watch(model, data):
    watch = hookviz.watch(model)
    _train(model, data)
    assert watch.steps == [0, 1]


def _show(model, data):
    hookviz.show(model, (data,), loss_fn=_loss).close()


def _show_closed_watch(model, data):
    with hookviz.watch(model) as watch:
        _train(model, data)
    widget = hookviz.show(watch)
    assert widget.live.wait_shown()
    widget.close()


def _show_open_watch(model, data):
    watch = hookviz.watch(model)
    widget = hookviz.show(watch)  # its thread follows the watch until the widget closes
    _train(model, data)
    widget.close()


def _save_html(model, data):
    with tempfile.TemporaryDirectory() as directory:
        widget = hookviz.show(model, (data,), loss_fn=_loss)
        widget.save_html(Path(directory) / "page.html")
        widget.close()


@pytest.mark.parametrize(
    "use",
    [_run, _fill_details, _release, _open_watch, _show, _show_closed_watch, _show_open_watch, _save_html],
    ids=lambda use: use.__name__.strip("_"),
)
def test_a_dropped_model_is_freed(use):
    reference, _ = _use_and_drop(use)
    assert reference() is None, f"the model is still alive after {use.__name__.strip('_')}"


def test_a_kept_closed_watch_lets_its_model_go_and_still_reads_its_history(tmp_path):
    def closed_watch(model, data):
        with hookviz.watch(model) as watch:
            _train(model, data, steps=3)
        return watch

    reference, watch = _use_and_drop(closed_watch)
    assert reference() is None
    assert watch.model is None and watch.closed
    assert watch.steps == [0, 1, 2] and len(watch.norms()) == 4
    assert "Sequential" in repr(watch)
    assert hookviz.load(hookviz.save(watch, tmp_path / "watch")).steps == [0, 1, 2]


def test_a_kept_closed_watch_of_an_optimizer_lets_its_parameters_and_state_go():
    parameters = []

    def closed_watch(model, data):
        optimizer = torch.optim.Adam(model.parameters())
        parameters.extend(weakref.ref(p) for p in model.parameters())
        with hookviz.watch(model, optimizer=optimizer, stats_every=1) as watch:
            for _ in range(2):
                _train(model, data, steps=1)
                optimizer.step()
        return watch

    reference, watch = _use_and_drop(closed_watch)
    assert reference() is None
    assert len(parameters) == 4 and [p() for p in parameters] == [None] * 4
    assert watch.steps == [0, 1] and len(watch.update_ratios(1)) == 4
    assert watch.notes[0].startswith("a step is one optimizer.step() of Adam")


def test_a_forward_that_holds_its_module_is_not_kept_by_hookviz():
    """accelerate's hooks set ``module.forward`` to a partial over the module: a cache of
    signatures keyed by it kept every such model."""

    def hooked_forward(module, *args, **kwargs):
        return type(module).forward(module, *args, **kwargs)

    model = _small()
    model.forward = functools.update_wrapper(functools.partial(hooked_forward, model), type(model).forward)
    reference, _ = _use_and_drop(_fill_details, model)
    del model
    gc.collect()
    assert reference() is None


def test_a_custom_function_that_closes_over_the_model_is_not_kept_by_hookviz():
    """A Node's type is the user's class for a custom ``autograd.Function``; one defined beside its
    model (its backward reading the model) must not outlive it in a table of Node types."""

    def make() -> nn.Module:
        class WithFunction(nn.Module):
            def __init__(self):
                super().__init__()
                self.inner = _small()

            def forward(self, x):
                return Scaled.apply(self.inner(x))

        model = WithFunction()

        class Scaled(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x * 2

            @staticmethod
            def backward(ctx, grad):
                return grad * 2 * len(model.inner)

        return model

    reference, _ = _use_and_drop(_fill_details, make())
    assert reference() is None


def test_a_kept_closed_ddp_watch_lets_its_model_go_before_the_process_group(tmp_path):
    """A user's script that keeps a closed DDP watch (to gather or save it) must be able to free the
    model before ``destroy_process_group()``: a DDP Reducer freed after it can hang in gloo."""
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    watch = None
    try:

        def ddp_watch(model, data):
            with hookviz.watch(model) as watch:
                _train(model, data)
            return watch

        reference, watch = _use_and_drop(ddp_watch, DistributedDataParallel(_small()))
        assert reference() is None
        assert watch.gather(dst=0).steps == [0, 1]
    except BaseException as error:
        traceback.clear_frames(error.__traceback__)  # its frames hold the DDP model
        raise
    finally:
        del watch  # on the code before the fix it held the model
        gc.collect()
        dist.destroy_process_group()


@pytest.mark.e2e
@pytest.mark.soak
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
