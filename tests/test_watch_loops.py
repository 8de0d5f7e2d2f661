"""hookviz.watch on the training loops people write, each against a plain-PyTorch reference: the norms
each step used, recorded in a step pre-hook of the optimizer (or after each backward without one)."""

from __future__ import annotations

import copy
import math
import threading
import warnings

import pytest
import torch
import torch.nn.functional as F
from test_distributed import batch, mlp, spawn
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

import hookviz
from hookviz.errors import WatchError
from hookviz.watching.watch import watch


def norms_of(named) -> dict[str, float]:
    """``{name: 2-norm of .grad}`` of the parameters that hold one, as plain PyTorch computes it."""
    return {n: torch.linalg.vector_norm(p.grad).item() for n, p in named if p.grad is not None}


def record_step_norms(optimizer, model) -> list[dict[str, float]]:
    """The reference: a step pre-hook that records the norms each optimizer step reads."""
    found: list[dict[str, float]] = []
    mine = {id(p) for g in optimizer.param_groups for p in g["params"]}
    optimizer.register_step_pre_hook(
        lambda o, a, k: found.append(norms_of((n, p) for n, p in model.named_parameters() if id(p) in mine))
    )
    return found


def assert_steps_equal(w, expected: list[dict[str, float]]) -> int:
    """Every kept step's parameter norms equal the reference's, name for name; returns how many."""
    assert w.steps == list(range(len(expected)))
    compared = 0
    for step, plain in enumerate(expected):
        got = w.norms(step, kind="parameter")
        assert set(got) == set(plain), step
        for name, norm in plain.items():
            assert got[name] == pytest.approx(norm, rel=1e-6, abs=0), (step, name)
            compared += 1
    return compared


class Generator(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 8))

    def forward(self, z):
        return self.net(z)


def gan() -> nn.ModuleDict:
    torch.manual_seed(0)
    critic = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
    return nn.ModuleDict({"G": Generator(), "D": critic})


@pytest.mark.parametrize("outputs", [False, True], ids=["parameters", "and outputs"])
def test_a_gan_in_a_module_dict_keeps_every_backward(outputs):
    model = gan()
    expected = []
    with watch(model, outputs=outputs) as w:
        for _ in range(5):
            model.zero_grad()
            model["D"](model["G"](torch.randn(6, 4))).mean().backward()
            expected.append(norms_of(model.named_parameters()))
    assert w.step == 5
    assert assert_steps_equal(w, expected) == 5 * 8


def test_an_encoder_called_alone_and_the_whole_model_are_each_a_step():
    torch.manual_seed(0)
    model = nn.ModuleDict({"encoder": nn.Linear(8, 4), "decoder": nn.Linear(4, 8)})
    expected = []
    with watch(model) as w:
        for step in range(4):
            model.zero_grad(set_to_none=True)
            x = torch.randn(5, 8)
            if step % 2:
                model["encoder"](x).pow(2).mean().backward()  # the encoder alone
            else:
                F.mse_loss(model["decoder"](model["encoder"](x)), x).backward()
            expected.append(norms_of(model.named_parameters()))
    assert {n.split(".")[0] for n in expected[1]} == {"encoder"}
    assert assert_steps_equal(w, expected) == 4 + 2 + 4 + 2


def test_two_threads_training_two_modules_keep_each_backward_with_its_own_parameters():
    torch.manual_seed(0)
    box = nn.ModuleDict({"a": nn.Linear(8, 3), "b": nn.Linear(8, 3)})
    inputs = {"a": torch.randn(4, 8), "b": torch.randn(4, 8) * 3}
    expected = {}
    for key, x in inputs.items():  # each thread's step: the same gradient every time (zeroed first)
        box[key].zero_grad(set_to_none=True)
        box[key](x).pow(2).sum().backward()
        expected[key] = norms_of((f"{key}.{n}", p) for n, p in box[key].named_parameters())
    start = threading.Barrier(2)

    def train(key):
        start.wait()
        for _ in range(20):
            box[key].zero_grad(set_to_none=True)
            box[key](inputs[key]).pow(2).sum().backward()

    with watch(box) as w:
        threads = [threading.Thread(target=train, args=(key,)) for key in inputs]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert w.step == 40 and len(w.steps) == 40
    seen = {"a": 0, "b": 0}
    for step in w.steps:
        got = w.norms(step)
        key = next(iter(got)).split(".")[0]
        assert got == pytest.approx(expected[key], rel=1e-6)
        seen[key] += 1
    assert seen == {"a": 20, "b": 20}


class UncertaintyWeighted(nn.Module):
    """A loss weighted by a learned log-variance: ``log_var`` is used only by the loss."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 1))
        self.log_var = nn.Parameter(torch.tensor(0.3))

    def forward(self, x):
        return self.body(x)


def test_a_parameter_used_only_by_the_loss_is_kept():
    torch.manual_seed(0)
    model = UncertaintyWeighted()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    expected = []
    with watch(model) as w:
        for _ in range(3):
            optimizer.zero_grad()
            x, y = torch.randn(10, 6), torch.randn(10, 1)
            loss = F.mse_loss(model(x), y) * torch.exp(-model.log_var) + model.log_var
            loss.backward()
            expected.append(norms_of(model.named_parameters()))
            optimizer.step()
    assert "log_var" in w.norms(0) and w.norms(0)["log_var"] > 0
    assert assert_steps_equal(w, expected) == 3 * 5


def test_hookviz_own_runs_inside_an_open_watch_are_not_steps():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
    x, y = torch.randn(4, 6), torch.randint(0, 3, (4,))
    with watch(model, outputs=True) as w:
        F.cross_entropy(model(x), y).backward()
        expected = [norms_of(model.named_parameters())]
        session = hookviz.Session(model, x, loss_fn=lambda out: F.cross_entropy(out, y), details="lazy")
        run = session.run()
        session.run()  # a re-run on the retained graph
        session.run(forward=True)
        run.fill_details()
    assert w.step == 1
    assert assert_steps_equal(w, expected) == 4
    assert not run.hook_calls  # the watch's hooks are hookviz's, not the user's


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc1, self.fc2 = nn.Linear(6, 16), nn.Linear(16, 3)

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x)))


def data(steps: int, micro: int = 1, scale: float = 1.0) -> list[list[tuple[torch.Tensor, torch.Tensor]]]:
    """``steps`` lists of ``micro`` batches ``(x [8, 6], class [8])``, the same every call."""
    generator = torch.Generator().manual_seed(7)
    return [
        [
            (torch.randn(8, 6, generator=generator) * scale, torch.randint(0, 3, (8,), generator=generator))
            for _ in range(micro)
        ]
        for _ in range(steps)
    ]


def test_accumulation_over_four_micro_batches_is_one_step_with_update_ratios_and_learning_rates():
    model = Tiny()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    expected = record_step_norms(optimizer, model)
    ratios = []
    before = {}
    optimizer.register_step_pre_hook(
        lambda o, a, k: before.update({n: p.detach().clone() for n, p in model.named_parameters()})
    )
    optimizer.register_step_post_hook(
        lambda o, a, k: ratios.append(
            {
                n: (torch.linalg.vector_norm(p.detach() - before[n]) / torch.linalg.vector_norm(p)).item()
                for n, p in model.named_parameters()
            }
        )
    )
    with watch(model, optimizer=optimizer, stats_every=1) as w:  # update ratios every step
        for micro_batches in data(3, micro=4):
            for x, y in micro_batches:
                (F.cross_entropy(model(x), y) / 4).backward()
            optimizer.step()
            optimizer.zero_grad()
    assert w.step == 3 and w.step_optimizer(0) == "SGD"
    assert assert_steps_equal(w, expected) == 3 * 4
    compared = 0
    for step, plain in enumerate(ratios):
        got = w.update_ratios(step)
        assert got.keys() == plain.keys()
        for name, ratio in plain.items():
            assert got[name] == pytest.approx(ratio, rel=1e-5)
            compared += 1
        assert w.learning_rates(step) == [0.05]
    assert compared == 12
    assert w.history.update_ratio.shape == (3, 4) and "optimizer.step()" in w.notes[0]


def test_clip_grad_norm_steps_keep_the_clipped_gradients():
    model = Tiny()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    expected = record_step_norms(optimizer, model)
    unclipped = []
    with watch(model, optimizer=optimizer) as w:
        for [(x, y)] in data(3, scale=30.0):
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            unclipped.append(torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5).item())
            optimizer.step()
    assert assert_steps_equal(w, expected) == 3 * 4
    total = math.sqrt(sum(v * v for v in w.norms(0).values()))
    assert total == pytest.approx(0.5, rel=1e-5) and unclipped[0] > 1


def test_a_closure_step_keeps_the_gradients_the_closure_left():
    # optimizer.step(closure) runs the closure (backward, clipping) inside step(), after the step
    # pre-hooks: Lightning trains this way. The reference records the norms at the closure's end.
    model = Tiny()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    expected = []
    with watch(model, optimizer=optimizer) as w:
        for [(x, y)] in data(3, scale=30.0):

            def closure(x=x, y=y):
                optimizer.zero_grad()
                loss = F.cross_entropy(model(x), y)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
                expected.append(norms_of(model.named_parameters()))
                return loss

            if len(expected) % 2:
                optimizer.step(closure)
            else:
                optimizer.step(closure=closure)
    assert assert_steps_equal(w, expected) == 3 * 4
    assert math.sqrt(sum(v * v for v in w.norms(0).values())) == pytest.approx(0.5, rel=1e-5)


def test_an_lbfgs_step_keeps_the_gradients_of_its_first_closure_call():
    # LBFGS calls the closure several times in one step(); the step starts from the first call's.
    model = Tiny()
    optimizer = torch.optim.LBFGS(model.parameters(), lr=0.1, max_iter=4)
    calls, expected = [], []
    with watch(model, optimizer=optimizer) as w:
        for [(x, y)] in data(2):

            def closure(x=x, y=y):
                optimizer.zero_grad()
                loss = F.cross_entropy(model(x), y)
                loss.backward()
                calls.append(norms_of(model.named_parameters()))
                return loss

            first = len(calls)
            optimizer.step(closure)
            expected.append(calls[first])
    assert len(calls) > 2 * 2 and w.step == 2
    assert assert_steps_equal(w, expected) == 2 * 4


@pytest.mark.parametrize("skip", [False, True], ids=["every-step", "a-skipped-step"])
def test_bf16_autocast_and_grad_scaler_steps_keep_the_unscaled_gradients(skip):
    model = Tiny()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16)
    expected = record_step_norms(optimizer, model)
    skipped_norms = []
    with watch(model, optimizer=optimizer, scaler=scaler) as w:
        for step, [(x, y)] in enumerate(data(4)):
            optimizer.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = F.cross_entropy(model(x), y)
            if skip and step == 2:
                loss = loss * math.inf
            scaler.scale(loss).backward()
            stepped = len(expected)
            scaler.step(optimizer)
            if len(expected) == stepped:  # skipped: the reference is the unscaled .grad it held
                skipped_norms.append(norms_of(model.named_parameters()))
                expected.append(skipped_norms[-1])
            scaler.update()
    assert w.step == 4
    assert w.skipped_steps == ([2] if skip else [])
    compared = 0
    for step, plain in enumerate(expected):
        got = w.norms(step)
        assert set(got) == set(plain)
        for name, norm in plain.items():
            assert got[name] == pytest.approx(norm, rel=1e-6, nan_ok=True)
            compared += 1
    assert compared == 4 * 4
    assert w.norms(0)["fc1.weight"] < 100  # not multiplied by the scale (2**16)
    if skip:
        assert w.history.nonfinite[2].sum() > 0 and not w.update_ratios(2)
        assert [f.kind for f in w.diagnose(2)][:1] == ["nan"]
        assert w.loss_scale(2) == 2.0**16 and w.loss_scale(3) == 2.0**15  # update() halved it
        assert "skipped" in w.notes[1]


def test_a_grad_scaler_without_optimizer_is_noted_and_not_called_an_explosion():
    model = Tiny()
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16)
    with watch(model, scaler=scaler) as w:
        [(x, y)] = data(1)[0]
        scaler.scale(F.cross_entropy(model(x), y)).backward()
    assert w.loss_scale(0) == 2.0**16 and "loss scale" in w.notes[1]
    assert w.norms(0)["fc1.weight"] > 1e3  # the gradients carry the scale ...
    assert "exploding" not in [f.kind for f in w.diagnose(0)]  # ... and diagnosis divides it out


def scaled_loop(w_args: dict, loss_factor: float = 1.0, steps: int = 4):
    """A bf16 autocast + ``GradScaler(init_scale=2**16)`` loop under ``watch(model, **w_args)``,
    no ``scaler=`` given; returns the watch and the scaler."""
    model = Tiny()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16)
    with watch(model, **w_args) as w:
        for [(x, y)] in data(steps):
            optimizer.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = F.cross_entropy(model(x), y) * loss_factor
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
    return w, scaler


def test_a_grad_scaler_not_given_is_named_in_the_notes_and_findings_and_never_guessed():
    # no heap scan: the watch divides by no scale it was not given, and says how to give it
    w, scaler = scaled_loop({})
    assert w.scaler is None and [w.loss_scale(s) for s in w.steps] == [None] * 4
    assert w.looks_scaled() and "scaler=scaler" in w.notes[1]
    assert min(w.norms(0).values()) > 1e3  # every norm carries the scale (65536)
    exploding = [f for f in w.diagnose(0) if f.kind == "exploding"]
    assert exploding and all("scaler=" in f.message for f in exploding)
    assert scaler.get_scale() == 2.0**16  # the watch left the scaler as it was


def test_a_real_explosion_under_a_grad_scaler_not_given_is_still_found():
    # the loss times 1e6: the unscaled gradients themselves pass exploding_norm (1e3)
    w, _ = scaled_loop({}, loss_factor=1e6)
    assert w.scaler is None
    assert "exploding" in [f.kind for f in w.diagnose(0)]
    assert [f.kind for f in w.onset()] == ["exploding"] and w.onset()[0].step == 0


def test_a_stale_grad_scaler_the_loop_does_not_update_hides_no_explosion():
    # a GradScaler of an earlier experiment, still alive (a notebook cell), that scaled a loss once
    stale_model = Tiny()
    stale = torch.amp.GradScaler("cpu", init_scale=2.0**16)
    [(x, y)] = data(1)[0]
    stale.scale(F.cross_entropy(stale_model(x), y)).backward()
    model = Tiny()
    with watch(model) as w:  # no AMP here: the loss times 1e6 truly explodes
        for [(x, y)] in data(3):
            model.zero_grad()
            (F.cross_entropy(model(x), y) * 1e6).backward()
    assert w.scaler is None and "otherwise the gradients are exploding" in w.notes[1]
    assert all("exploding" in [f.kind for f in w.diagnose(s)] for s in w.steps)
    assert stale.get_scale() == 2.0**16  # the watch left it as it was


def test_no_loss_scale_is_suspected_while_norms_stay_below_the_alarm():
    model = Tiny()
    with watch(model) as w:
        for [(x, y)] in data(3):
            F.cross_entropy(model(x), y).backward()
    assert not w.looks_scaled() and w.scaler is None and len(w.notes) == 1


@pytest.mark.parametrize(
    ("lr", "expected"),
    [(1e-3, None), (1e-1, "update_too_large"), (1e-7, "update_too_small")],
    ids=["sane", "100x-too-large", "10000x-too-small"],
)
def test_an_update_ratio_far_from_1e_3_is_a_finding_with_its_onset(lr, expected):
    model = Tiny()
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    before, plain = {}, []  # the reference: ‖Δw‖ / ‖w‖ per parameter and step, by plain PyTorch
    optimizer.register_step_pre_hook(
        lambda o, a, k: before.update({n: p.detach().clone() for n, p in model.named_parameters()})
    )
    optimizer.register_step_post_hook(
        lambda o, a, k: plain.append(
            {
                n: (torch.linalg.vector_norm(p - before[n]) / torch.linalg.vector_norm(p)).item()
                for n, p in model.named_parameters()
            }
        )
    )
    # stats_every=1: the ratios are read at every step (by default every 16th, NaN between)
    with watch(model, optimizer=optimizer, stats_every=1) as w:
        for [(x, y)] in data(5):
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
    found = [f for s in w.steps for f in w.diagnose(s, group=False) if f.kind.startswith("update")]
    onsets = [f for f in w.onset() if f.kind.startswith("update")]
    if expected is None:
        assert not found and not onsets
        assert all(1e-5 < r < 1e-1 for step in plain for r in step.values())
        return
    assert {f.kind for f in found} == {expected} and len(found) == 5 * 2  # both layers, every step
    compared = 0
    for finding in found:
        ratios = plain[finding.step]
        assert finding.value == pytest.approx(ratios[finding.node], rel=1e-5)
        others = [r for n, r in ratios.items() if n.startswith(finding.module + ".")]
        side = min if expected == "update_too_large" else max
        assert finding.value == pytest.approx(side(others), rel=1e-5)  # every one beyond the threshold
        compared += 1
    assert compared == 10
    [onset] = onsets
    assert onset.kind == expected and onset.step == 0 and onset.module in ("fc1", "fc2")
    assert onset.node.startswith(onset.module + ".")


def test_two_optimizers_each_step_holds_its_own_parameters_and_names_its_optimizer():
    model = gan()
    g_optimizer = torch.optim.SGD(model["G"].parameters(), lr=0.01)
    d_optimizer = torch.optim.Adam(model["D"].parameters(), lr=0.001)
    expected = []
    for optimizer in (d_optimizer, g_optimizer):
        mine = {id(p) for p in optimizer.param_groups[0]["params"]}
        optimizer.register_step_pre_hook(
            lambda o, a, k, mine=mine: expected.append(
                norms_of((n, p) for n, p in model.named_parameters() if id(p) in mine)
            )
        )
    with watch(model, optimizer=[g_optimizer, d_optimizer]) as w:
        for _ in range(3):
            z = torch.randn(6, 4)
            d_optimizer.zero_grad()
            model["D"](model["G"](z).detach()).mean().backward()
            d_optimizer.step()
            g_optimizer.zero_grad()
            (-model["D"](model["G"](z)).mean()).backward()
            g_optimizer.step()
    assert [w.step_optimizer(s) for s in w.steps] == ["Adam", "SGD"] * 3
    assert assert_steps_equal(w, expected) == 3 * (4 + 4)
    assert {n.split(".")[0] for n in w.norms(0)} == {"D"} and {n.split(".")[0] for n in w.norms(1)} == {"G"}


def test_a_watch_that_keeps_no_step_while_gradients_flow_says_why():
    model = Tiny()
    owner = torch.optim.SGD(model.parameters(), lr=0.1)
    [(x, y)] = data(1)[0]
    with pytest.warns(RuntimeWarning, match="never stepped"):
        with watch(model, optimizer=owner):
            F.cross_entropy(model(x), y).backward()  # and no owner.step()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with watch(model) as w:
            F.cross_entropy(model(x), y).backward()
    assert w.steps == [0]


def test_an_optimizer_that_owns_none_of_the_model_is_refused_at_open():
    model = Tiny()
    foreign = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=0.1)
    mine = torch.optim.SGD(model.parameters(), lr=0.1)
    hooks_before = len(model._forward_hooks)
    with pytest.raises(WatchError, match=r"optimizer=SGD\[1\] owns none of the parameters of Tiny"):
        watch(model, optimizer=[mine, foreign])
    assert len(model._forward_hooks) == hooks_before and not mine._optimizer_step_pre_hooks
    with watch(model, optimizer=mine) as w:  # the model was left as it was: it can be watched
        [(x, y)] = data(1)[0]
        F.cross_entropy(model(x), y).backward()
        mine.step()
    assert w.steps == [0]


def test_optimizer_steps_are_saved_and_loaded(tmp_path):
    model = Tiny()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    with watch(model, optimizer=optimizer) as w:
        for [(x, y)] in data(2):
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
    loaded = hookviz.load(hookviz.save(w, tmp_path / "w"))
    ratios = w.history.update_ratio
    # step 0 reads every statistic, its update ratios too; step 1 only norms: its ratios are NaN
    assert not ratios[0].isnan().any() and ratios[1].isnan().all()
    assert torch.equal(loaded.update_ratio.isnan(), ratios.isnan())
    assert torch.equal(loaded.update_ratio.nan_to_num(), ratios.nan_to_num())
    assert loaded.optimizers == ["SGD", "SGD"] and loaded.skipped == [False, False]
    assert loaded.learning_rates == [[0.05], [0.05]] and loaded.notes == w.notes


def _ddp_accumulation(rank, device):
    model = mlp().to(device)
    wrapped = DDP(model)
    optimizer = torch.optim.SGD(wrapped.parameters(), lr=0.1)
    reduced = record_step_norms(optimizer, wrapped)
    local = []
    plain = copy.deepcopy(model)
    with watch(wrapped, optimizer=optimizer) as w:
        for step in range(2):
            plain.zero_grad()
            for micro in range(4):
                x, y = batch(rank, 4 * step + micro, device)
                (F.cross_entropy(plain(x), y) / 4).backward()
                if micro < 3:
                    with wrapped.no_sync():
                        (F.cross_entropy(wrapped(x), y) / 4).backward()
                else:
                    (F.cross_entropy(wrapped(x), y) / 4).backward()
            local.append(norms_of((f"module.{n}", p) for n, p in plain.named_parameters()))
            optimizer.step()
            optimizer.zero_grad()
            with torch.no_grad():  # the plain copy follows the reduced update
                for p, q in zip(plain.parameters(), model.parameters()):
                    p.copy_(q)
    assert w.step == 2
    assert assert_steps_equal(w, local) == 2 * 6  # the rank's own accumulated gradients
    history = w.gather()
    if rank == 0:
        compared = 0
        for index, step in enumerate(history.steps):
            for name, norm in reduced[index].items():
                assert history.norms(step)[name] == pytest.approx(norm, rel=1e-6)
                compared += 1
        assert compared == 2 * 6


@pytest.mark.e2e
@pytest.mark.distributed
def test_ddp_with_no_sync_accumulation_keeps_one_step_per_optimizer_step():
    spawn(_ddp_accumulation)
