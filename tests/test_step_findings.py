"""One analysis for runs and watches: one batch recorded as a run and as a watch step gives the same
findings, place by place, by the same rules (hookviz.analysis.step_findings)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import hookviz
from hookviz.analysis.findings import places
from hookviz.examples import sigmoid_mlp


class Bag(nn.Module):
    """Token embeddings averaged, then a Linear: a batch of 8 tokens of 500 leaves most embedding
    rows without a gradient, by design."""

    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(500, 16)
        self.head = nn.Linear(16, 4)

    def forward(self, tokens):
        return self.head(self.embedding(tokens).mean(1))


def _embedding_case():
    torch.manual_seed(0)
    return Bag(), torch.randint(0, 500, (2, 4)), torch.randint(0, 4, (2,))


def _dead_weight_case():
    # The first Linear is fed zeros: its weight's gradient is all zero, its bias's is not (128 of
    # 136 elements zero, 94%); its outputs are its bias, not zero, so no dead units in the run.
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 8), nn.Tanh(), nn.Linear(8, 4))
    return model, torch.zeros(32, 16), torch.randint(0, 4, (32,))


def _vanishing_case():
    torch.manual_seed(0)
    model = sigmoid_mlp(depth=8, width=32, inputs=16, classes=4)
    return model, torch.randn(16, 16), torch.randint(0, 4, (16,))


def _exploding_case():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 16), nn.Linear(16, 16), nn.Linear(16, 4))
    with torch.no_grad():
        for layer in model:
            layer.weight.mul_(60.0)
    return model, torch.randn(16, 16) * 30, torch.randint(0, 4, (16,))


CASES = {
    "embedding": (_embedding_case, set()),
    "dead weight": (_dead_weight_case, {("dead", "0")}),
    "vanishing": (_vanishing_case, "vanishing"),
    "exploding": (_exploding_case, "exploding"),
}


@pytest.mark.parametrize("stats_every", [1, 4])
@pytest.mark.parametrize("name", list(CASES))
def test_a_batch_as_a_run_and_as_a_watch_step_has_the_same_findings(name, stats_every):
    build, expected = CASES[name]
    model, x, y = build()
    run = hookviz.Session(model, (x,), loss_fn=lambda out: F.cross_entropy(out, y)).run()
    from_run = hookviz.diagnose(run, group=False)
    with hookviz.watch(model, stats_every=stats_every) as w:
        for _ in range(2):  # step 1 keeps only norms when stats_every=4 (unless an alarm)
            model.zero_grad()
            F.cross_entropy(model(x), y).backward()
    from_watch = w.diagnose(group=False)
    assert places(from_watch) == places(from_run)
    if isinstance(expected, set):
        assert places(from_run) == expected
    else:
        assert {kind for kind, _ in places(from_run)} == {expected}
    compared = 0
    for a, b in zip(sorted(from_run, key=lambda f: f.module), sorted(from_watch, key=lambda f: f.module)):
        assert (a.kind, a.module, a.node) == (b.kind, b.module, b.node)
        assert a.value == pytest.approx(b.value, rel=1e-5)
        compared += 1
    assert compared == len(from_run)


def test_dead_findings_at_a_norms_only_step_use_the_last_measured_zeros():
    model, x, y = _dead_weight_case()
    with hookviz.watch(model, stats_every=3) as w:
        for _ in range(2):
            model.zero_grad()
            F.cross_entropy(model(x), y).backward()
    # step 1: the dead weight's norm is 0, an alarm: every statistic is read at once
    assert w.history.full_steps == [0, 1]
    model2, x2, y2 = _vanishing_case()
    with hookviz.watch(model2, stats_every=3) as w2:
        for _ in range(2):
            model2.zero_grad()
            F.cross_entropy(model2(x2), y2).backward()
    assert w2.history.full_steps == [0]
    assert math.isnan(w2.history.zero_fraction[1, 0])
    assert places(w2.diagnose(1)) == places(w2.diagnose(0))


def test_a_nan_norm_is_kept_when_layers_and_ranks_combine_norms():
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))
    with hookviz.watch(model) as w:
        model(torch.tensor([[1.0, math.nan, 0.0, 0.0]])).sum().backward()
    assert math.isnan(w.layer_norms()["0"])
    history = w.rank_history()
    assert math.isnan(history.total_norms()[0, 0])  # was 0-filled: a NaN rank looked healthy


def test_a_rank_view_takes_the_diagnosis_thresholds_and_reads_a_step_as_the_watch_does():
    from hookviz.watching.rank_view import RankView

    model, x, y = _vanishing_case()
    with hookviz.watch(model) as w:
        F.cross_entropy(model(x), y).backward()
    view = RankView(w.rank_history(), 0)
    for thresholds in ({}, {"vanishing": 1e-2}):  # vanishing=... raised TypeError
        expected = {p for p in places(w.diagnose(**thresholds)) if p[0] != "dead"}
        assert places(view.diagnose(**thresholds)) == expected and expected
