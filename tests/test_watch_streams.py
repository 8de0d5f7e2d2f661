"""Which steps a watch keeps: every step read, thinning and stats_every counted per stream (each
optimizer; each position in an iteration), NaN/Inf and explosions always kept. Each against the
norms plain PyTorch gives at the same steps."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from test_watch_loops import gan, norms_of
from torch import nn

from hookviz.watching.watch import watch


def _plain_norms(model: nn.Module) -> dict[str, float]:
    return norms_of(model.named_parameters())


def _assert_kept_equal(w, expected: dict[int, dict[str, float]]) -> int:
    """Each kept step's parameter norms equal plain PyTorch's at that step; returns how many."""
    compared = 0
    for step in w.steps:
        got = w.norms(step, kind="parameter")
        assert set(got) == set(expected[step]), step
        for name, norm in expected[step].items():
            assert got[name] == pytest.approx(norm, rel=1e-5, nan_ok=True), (step, name)
            compared += 1
    return compared


def test_a_gan_at_capacity_8_keeps_steps_and_full_statistics_of_both_optimizers():
    model = gan()
    opt_g = torch.optim.Adam(model["G"].parameters(), lr=1e-4)
    opt_d = torch.optim.Adam(model["D"].parameters(), lr=1e-4)
    expected: dict[int, dict[str, float]] = {}
    for optimizer, half in ((opt_g, "G"), (opt_d, "D")):
        optimizer.register_step_pre_hook(
            lambda o, a, k, half=half: expected.__setitem__(
                len(expected), {f"{half}.{n}": v for n, v in _plain_norms(model[half]).items()}
            )
        )
    torch.manual_seed(2)
    with watch(model, optimizer=[opt_g, opt_d], capacity=8) as w:
        for _ in range(520):
            real, z = torch.randn(16, 8), torch.randn(16, 4)
            opt_d.zero_grad()
            fake = model["G"](z).detach()
            d_loss = F.softplus(-model["D"](real)).mean() + F.softplus(model["D"](fake)).mean()
            d_loss.backward()
            opt_d.step()
            opt_g.zero_grad()
            g_loss = F.softplus(-model["D"](model["G"](z))).mean()
            g_loss.backward()
            opt_g.step()
    assert w.step == 1040 and len(expected) == 1040 and len(w.steps) <= 8
    optimizers = {w.step_optimizer(s) for s in w.steps}
    assert optimizers == {"Adam[0]", "Adam[1]"}  # G's steps (odd numbers) are kept too
    history = w.history
    full = set(history.full_steps)
    assert {w.step_optimizer(s) for s in full} == {"Adam[0]", "Adam[1]"}
    g_column = history.names.index("G.net.0.weight")
    g_full = [s for s in full if w.step_optimizer(s) == "Adam[0]"]
    assert all(not math.isnan(history.zero_fraction[history.steps.index(s), g_column]) for s in g_full)
    assert _assert_kept_equal(w, expected) >= 8


def test_a_nan_on_a_step_thinning_no_longer_records_is_kept():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    expected: dict[int, dict[str, float]] = {}
    with watch(model, capacity=4) as w:
        for step in range(100):
            model.zero_grad()
            x = torch.randn(8, 8)
            if step == 37:
                x[0, 0] = math.nan
            F.cross_entropy(model(x), torch.randint(0, 3, (8,))).backward()
            expected[step] = _plain_norms(model)
    assert 37 in w.steps and len(w.steps) <= 4
    assert w.history.nonfinite[w.steps.index(37)].sum() > 0
    assert [f.kind for f in w.onset()] == ["nan"] and w.onset()[0].step == 37
    assert _assert_kept_equal(w, expected) > 0


@pytest.mark.parametrize("kind", ["two-backwards", "accumulation-x2"])
def test_each_position_in_an_iteration_keeps_its_share_and_its_full_statistics(kind):
    """Two backwards per iteration (two losses) or two accumulated micro-batches, no optimizer=,
    capacity 8, every=2: the second backward of each iteration (odd step numbers) is kept too."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    expected: dict[int, dict[str, float]] = {}
    with watch(model, capacity=8, every=2, stats_every=4) as w:
        for _ in range(300):
            optimizer.zero_grad()
            x, y = torch.randn(8, 8), torch.randint(0, 3, (8,))
            out = model(x)
            if kind == "two-backwards":
                F.cross_entropy(out, y).backward(retain_graph=True)
                expected[len(expected)] = _plain_norms(model)
                out.pow(2).mean().backward()
            else:
                F.cross_entropy(out, y).backward()
                expected[len(expected)] = _plain_norms(model)
                F.cross_entropy(model(x.flip(0)), y.flip(0)).backward()
            expected[len(expected)] = _plain_norms(model)
            optimizer.step()
    assert w.step == 600 and len(w.steps) <= 8
    parities = {s % 2 for s in w.steps}
    assert parities == {0, 1}  # both positions of the iteration
    assert {s % 2 for s in w.history.full_steps} == {0, 1}
    assert len(w.steps) >= 4 and _assert_kept_equal(w, expected) == 4 * len(w.steps)


def test_a_step_kept_after_thinning_has_no_ratio_or_pre_clip_norm_of_a_dropped_one():
    # A step added last finds its ratios and pre-clip norms NaN: the rows past the kept steps are
    # NaN from the start and again after each thinning, so keep() writes none there.
    from hookviz.watching.history import StepInfo
    from hookviz.watching.kept_steps import KeptSteps

    kept = KeptSteps(capacity=4, width=3)
    row = torch.ones(3, 4, dtype=torch.float64)
    for _ in range(4):
        plan = kept.plan("stream")
        assert kept.keep(plan, row, StepInfo(), pre_clip=torch.full((3,), 2.0, dtype=torch.float64))
        kept.set_ratios(plan.step, [0, 1, 2], [1e-3, 2e-3, 3e-3])
    compared = 0
    for _ in range(4):  # thinned at the first of these: the later steps land where dropped ones were
        plan = kept.plan("stream")
        if kept.keep(plan, row, StepInfo()):
            assert all(math.isnan(r) for r in kept.ratios(plan.step)), plan.step
            assert all(math.isnan(n) for n in kept.pre_clip(plan.step)), plan.step
            compared += 1
    assert compared == 2 and len(kept) == 4
