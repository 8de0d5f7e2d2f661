"""What a step is in the setups that used to go silently wrong, each against plain PyTorch: a
skipped GradScaler step without scaler=, two scalers, a shared scaler, clipping (the pre-clip
norms), reentrant checkpointing, autograd.grad, a replaced parameter (no hang), the .grad tensors
the watch must not keep alive."""

from __future__ import annotations

import gc
import math
import threading
import weakref

import pytest
import torch
import torch.nn.functional as F
from test_watch_loops import Tiny, data, norms_of, record_step_norms
from torch import nn
from torch.utils.checkpoint import checkpoint

from hookviz.errors import WatchError
from hookviz.text import number
from hookviz.watching.watch import watch
from hookviz.widget.watch_rows import step_rows


def _amp_loop(model, optimizer, scaler, steps: int, infinite_at: set[int], w_args: dict):
    """The loop of PyTorch's AMP page (CPU, bfloat16 autocast) under ``watch(model, **w_args)``;
    the loss is made infinite at the iterations in ``infinite_at``."""
    with watch(model, optimizer=optimizer, **w_args) as w:
        for step, [(x, y)] in enumerate(data(steps)):
            optimizer.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = F.cross_entropy(model(x), y)
            if step in infinite_at:
                loss = loss * math.inf
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
    return w


def test_a_step_the_grad_scaler_skips_is_kept_without_scaler_and_no_number_shifts():
    model = Tiny()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16)
    expected = record_step_norms(optimizer, model)  # the steps that ran: 0, 1, 3, 4
    w = _amp_loop(model, optimizer, scaler, 5, {2}, {})
    assert w.scaler is None and len(expected) == 4
    assert w.steps == [0, 1, 2, 3, 4] and w.skipped_steps == [2]
    history = w.history
    assert history.nonfinite[2].sum() > 0 and history.skipped == [False, False, True, False, False]
    # without scaler= the pre-clip norms carry the scale: the diagnosis (and its onset, step 0) says
    # they explode; the NaN/Inf's onset is the skipped step
    assert {f.kind: f.step for f in w.onset()} == {"exploding": 0, "nan": 2}
    compared = 0
    for step, plain in zip([0, 1, 3, 4], expected):
        for name, norm in plain.items():
            assert w.norms(step)[name] == pytest.approx(norm, rel=1e-6), (step, name)
            compared += 1
    assert compared == 4 * 4


def test_two_scalers_each_watch_keeps_its_own_scale_and_skipped_steps():
    runs = []
    for init_scale, infinite_at in ((2.0**10, {1}), (2.0**16, {2})):
        model = Tiny()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler("cpu", init_scale=init_scale, growth_interval=1000)
        expected = record_step_norms(optimizer, model)
        runs.append((_amp_loop(model, optimizer, scaler, 4, infinite_at, {"scaler": scaler}), expected))
    (small, small_plain), (large, large_plain) = runs
    assert small.skipped_steps == [1] and large.skipped_steps == [2]
    assert small.loss_scale(0) == 2.0**10 and large.loss_scale(0) == 2.0**16  # each its own
    assert small.loss_scale(2) == 2.0**9 and large.loss_scale(3) == 2.0**15  # halved after the skip
    # the pre-clip norms are unscaled by each watch's own scaler: equal to the norms stepped on
    compared = 0
    for w, plain, stepped in ((small, small_plain, [0, 2, 3]), (large, large_plain, [0, 1, 3])):
        history = w.history
        for step, norms in zip(stepped, plain):
            row = history.steps.index(step)
            for name, norm in norms.items():
                column = history.names.index(name)
                assert history.pre_clip_norm[row, column].item() == pytest.approx(norm, rel=1e-5)
                compared += 1
    assert compared == 2 * 3 * 4


def test_one_scaler_shared_by_two_watches_is_wrapped_once_and_each_close_removes_its_own():
    torch.manual_seed(0)
    models = [Tiny(), Tiny()]
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.1) for m in models]
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16)
    first = watch(models[0], optimizer=optimizers[0], scaler=scaler)
    second = watch(models[1], optimizer=optimizers[1], scaler=scaler)
    wrapper = scaler.__dict__["step"]

    def iteration(step: int, infinite: bool):
        [(x, y)] = data(step + 1)[step]
        for optimizer in optimizers:
            optimizer.zero_grad()
        loss = F.cross_entropy(models[0](x), y) + F.cross_entropy(models[1](x), y)
        scaler.scale(loss * (math.inf if infinite else 1.0)).backward()
        for optimizer in optimizers:
            scaler.step(optimizer)
        scaler.update()

    iteration(0, False)
    iteration(1, True)
    assert first.skipped_steps == [1] and second.skipped_steps == [1]
    first.close()
    assert scaler.__dict__["step"] is wrapper  # the second watch still listens
    iteration(2, True)
    second.close()
    assert "step" not in scaler.__dict__  # the last listener gone: the class's method again
    assert first.steps == [0, 1] and second.steps == [0, 1, 2] and second.skipped_steps == [1, 2]


def test_a_bad_scaler_is_refused_at_open():
    model = Tiny()
    with pytest.raises(WatchError, match="not a torch.amp.GradScaler.*pass the GradScaler"):
        watch(model, scaler=object())
    with watch(model) as w:  # nothing was left on the model
        [(x, y)] = data(1)[0]
        F.cross_entropy(model(x), y).backward()
    assert w.steps == [0]


def test_the_norms_before_clipping_equal_what_clip_grad_norm_returns_and_findings_read_them():
    model = Tiny()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-6)
    totals, before = [], []
    with watch(model, optimizer=optimizer, stats_every=1) as w:
        for [(x, y)] in data(4):
            optimizer.zero_grad()
            (F.cross_entropy(model(x), y) * 1e6).backward()
            before.append(norms_of(model.named_parameters()))
            totals.append(torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0).item())
            optimizer.step()
    history = w.history
    assert history.pre_clip_total == pytest.approx(totals, rel=1e-5)
    compared = 0
    for step, norms in enumerate(before):
        for name, norm in norms.items():
            column = history.names.index(name)
            assert history.pre_clip_norm[step, column].item() == pytest.approx(norm, rel=1e-5)
            compared += 1
        after = torch.linalg.vector_norm(history.norm[step, : len(norms)]).item()
        assert after == pytest.approx(1.0, rel=1e-4)  # the optimizer stepped on the clipped .grad
    assert compared == 4 * 4
    assert "exploding" in [f.kind for f in w.diagnose(3)]  # the explosion clipping hid
    # the watch view's row under the heatmap shows both totals and the bound
    [row] = [r for r in step_rows(history)["rows"] if r["kind"] == "grad_norm"]
    assert len(row["text"]) == 4 and all("clipped to a bound of 1" in t for t in row["text"])
    assert f"before clipping {number(totals[0])}" in row["text"][0]


class _Checkpointed(nn.Module):
    def __init__(self, reentrant: bool):
        super().__init__()
        self.reentrant = reentrant
        self.first, self.middle, self.last = nn.Linear(8, 16), nn.Linear(16, 16), nn.Linear(16, 3)

    def forward(self, x):
        hidden = torch.relu(self.first(x))
        hidden = checkpoint(self.middle, hidden, use_reentrant=self.reentrant)
        return self.last(torch.relu(hidden))


def test_reentrant_checkpointing_is_refused_naming_the_fix_and_the_other_kind_is_one_step():
    torch.manual_seed(0)
    x, y = torch.randn(4, 8), torch.randint(0, 3, (4,))
    model = _Checkpointed(reentrant=True)
    with watch(model):
        with pytest.raises(WatchError, match="use_reentrant=False"):
            F.cross_entropy(model(x), y).backward()
    model = _Checkpointed(reentrant=False)
    with watch(model) as w:
        F.cross_entropy(model(x), y).backward()
    plain = norms_of(model.named_parameters())
    assert w.steps == [0] and set(w.norms(0)) == set(plain)
    assert all(w.norms(0)[n] == pytest.approx(v, rel=1e-6) for n, v in plain.items())


def test_autograd_grad_that_changes_no_grad_is_not_a_step():
    model = Tiny()
    [(x, y)] = data(1)[0]
    with watch(model) as w:
        torch.autograd.grad(F.cross_entropy(model(x), y), list(model.parameters()))
        assert w.step == 0 and w.steps == []
        F.cross_entropy(model(x), y).backward()
    assert w.steps == [0]


def test_a_replaced_parameter_then_a_submodule_alone_does_not_hang():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 3))
    w = watch(model)  # not `with`: if a backward hangs holding the watch's lock, close would too
    model(torch.randn(4, 8)).sum().backward()
    model[0].weight = nn.Parameter(model[0].weight.detach().clone())
    done = []

    def submodule_alone():
        model[2](torch.randn(4, 8)).sum().backward()  # no forward of the model: no check before
        done.append(True)

    thread = threading.Thread(target=submodule_alone, daemon=True)
    thread.start()
    thread.join(timeout=30)
    assert done, "the backward of a submodule hung after a parameter was replaced"
    model.zero_grad()
    model(torch.randn(4, 8)).sum().backward()
    w.close()
    assert w.steps == [0, 1, 2]
    assert w.norms(2)["0.weight"] == pytest.approx(model[0].weight.grad.norm().item(), rel=1e-6)


def test_the_watch_keeps_no_grad_alive():
    model = Tiny()
    [(x, y)] = data(1)[0]
    F.cross_entropy(model(x), y).backward()
    grads = [weakref.ref(p.grad) for p in model.parameters()]
    with watch(model):
        model.zero_grad(set_to_none=True)
        gc.collect()
        assert all(g() is None for g in grads)


class _SAM(torch.optim.Optimizer):
    """Sharpness-aware minimisation as its papers' code writes it: ``step(closure)`` moves the
    weights up the gradient, runs the closure there, moves them back, then the base SGD steps."""

    def __init__(self, params, lr: float, rho: float = 0.5):
        super().__init__(params, {"lr": lr, "rho": rho})
        self.base = torch.optim.SGD(self.param_groups, lr=lr)

    @torch.no_grad()
    def step(self, closure):
        moved = []
        for group in self.param_groups:
            norm = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in group["params"]]))
            for p in group["params"]:
                e = p.grad * (group["rho"] / (norm + 1e-12))
                p.add_(e)
                moved.append((p, e))
        with torch.enable_grad():
            closure()
        for p, e in moved:
            p.sub_(e)
        self.base.step()


def test_a_sam_step_takes_its_update_ratios_from_the_weights_before_the_closure_moved_them():
    model = Tiny()
    optimizer = _SAM(model.parameters(), lr=0.1)
    expected = []
    with watch(model, optimizer=optimizer, stats_every=1) as w:
        for [(x, y)] in data(3):
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()  # the gradient at w: where SAM moves to
            before = {n: p.detach().clone() for n, p in model.named_parameters()}

            def closure(x=x, y=y):
                optimizer.zero_grad()
                loss = F.cross_entropy(model(x), y)
                loss.backward()
                return loss

            optimizer.step(closure)
            expected.append(
                {
                    n: (torch.linalg.vector_norm(p - before[n]) / torch.linalg.vector_norm(p)).item()
                    for n, p in model.named_parameters()
                }
            )
    compared = 0
    for step, ratios in enumerate(expected):
        got = w.update_ratios(step)
        for name, ratio in ratios.items():
            assert got[name] == pytest.approx(ratio, rel=1e-4), (step, name)
            compared += 1
    assert compared == 3 * 4


def test_a_parameter_watched_by_two_open_watches_is_warned_at_open():
    torch.manual_seed(0)
    shared = nn.Linear(4, 4)
    first, second = nn.Sequential(shared, nn.Linear(4, 2)), nn.Sequential(shared, nn.Linear(4, 3))
    with watch(first):
        with pytest.warns(
            RuntimeWarning, match=r"2 parameter\(s\) of Sequential \('0.weight', '0.bias'\).*also"
        ):
            with watch(second) as w:
                second(torch.randn(2, 4)).sum().backward()
    assert w.steps == [0]


def test_a_parameter_unfrozen_after_the_watch_opened_is_named_in_a_warning():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    model[0].requires_grad_(False)
    with watch(model) as w:
        model(torch.randn(2, 4)).sum().backward()
        model[0].requires_grad_(True)  # gradual unfreezing
        with pytest.warns(RuntimeWarning, match=r"\('0.weight', '0.bias'\) were frozen.*not watched"):
            model(torch.randn(2, 4)).sum().backward()
    assert w.steps == [0, 1] and "0.weight" not in w.names


def test_a_torchscript_model_is_refused_at_open_naming_the_eager_model():
    torch.manual_seed(0)
    scripted = torch.jit.script(nn.Sequential(nn.Linear(4, 4), nn.ReLU()))
    with pytest.raises(WatchError, match="TorchScript module.*watch the eager model"):
        watch(scripted)


def test_compiled_autograd_around_forward_and_backward_is_refused_at_the_backward_naming_the_fix():
    compiled_autograd = pytest.importorskip("torch._dynamo.compiled_autograd")
    model = Tiny()
    [(x, y)] = data(1)[0]
    with watch(model) as w:
        with compiled_autograd._enable(torch.compile(backend="eager")):
            loss = F.cross_entropy(model(x), y)
            with pytest.raises(
                WatchError, match="does not support compiled autograd.*without compiled autograd"
            ):
                loss.backward()
        assert all(p.grad is None for p in model.parameters())  # the refused backward wrote nothing
        F.cross_entropy(model(x), y).backward()  # without it, the watch works on
    assert w.steps == [0]


@pytest.mark.parametrize("how", ["enable", "config"])
def test_compiled_autograd_around_backward_only_is_refused_there_and_the_loop_goes_on(how):
    compiled_autograd = pytest.importorskip("torch._dynamo.compiled_autograd")
    model = Tiny()
    [(x, y)] = data(1)[0]
    compiled = torch.compile(model, backend="eager")
    with watch(model) as w:
        loss = F.cross_entropy(compiled(x), y)  # the forward ran without compiled autograd
        with pytest.raises(WatchError, match="does not support compiled autograd.*without compiled autograd"):
            if how == "enable":
                with compiled_autograd._enable(torch.compile(backend="eager")):
                    loss.backward()
            else:
                torch._dynamo.config.compiled_autograd = True
                try:
                    loss.backward()
                finally:
                    torch._dynamo.config.compiled_autograd = False
        assert all(p.grad is None for p in model.parameters())  # the refused backward wrote nothing
        assert w.steps == [] and not w.closed
        F.cross_entropy(model(x), y).backward()  # without it, the watch works on
        expected = {n: p.grad.norm().item() for n, p in model.named_parameters()}
    assert w.steps == [0] and w.norms(0) == pytest.approx(expected, rel=1e-6)
