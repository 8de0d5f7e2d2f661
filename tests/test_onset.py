"""Onsets count the steps that measured what they show, name the run of layers that had it, and
every kind of finding a watch's diagnosis makes has one; checked against plain PyTorch's
``.grad`` of models trained a few steps."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import hookviz
from hookviz.analysis.diagnose import DEFAULT_THRESHOLDS
from hookviz.widget.watch_json import ONSET_COLORS, ONSET_LABELS


def _layer_norms(model: nn.Module) -> dict[str, float]:
    """Each Linear layer's gradient norm (all its parameters together), in float64."""
    return {
        name: torch.linalg.vector_norm(
            torch.cat([p.grad.double().flatten() for p in module.parameters()])
        ).item()
        for name, module in model.named_modules()
        if isinstance(module, nn.Linear)
    }


def _kinds_diagnosed(w) -> set[str]:
    return {f.kind for step in w.steps for f in w.diagnose(step, group=False)}


def test_the_vanishing_onset_names_the_layers_in_a_row_and_every_step_it_stays():
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(20):
        layers += [nn.Linear(16, 16), nn.Sigmoid()]
    model = nn.Sequential(*layers, nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    plain = []
    with hookviz.watch(model, optimizer=optimizer, stats_every=4) as w:
        for _ in range(12):
            optimizer.zero_grad()
            model(torch.randn(8, 16)).pow(2).mean().backward()
            plain.append(_layer_norms(model))
            optimizer.step()
    nearest = "40"  # the head: its gradient arrives first in backward
    vanishing = [
        [layer for layer, norm in norms.items() if layer != nearest and norm / norms[nearest] < 1e-3]
        for norms in plain
    ]
    steps = [s for s, found in enumerate(vanishing) if found]
    assert steps, "the 20 sigmoid layers must vanish for this test to mean something"
    first = steps[0]
    [onset] = [f for f in w.onset() if f.kind == "vanishing"]
    # nearest the loss first: the deepest layer of the run, down to the input's
    expected = sorted(vanishing[first], key=int, reverse=True)
    assert onset.step == first and list(onset.modules) == expected and expected[-1] == "0"
    assert f"in module '{expected[0]}' down to module '0' ({len(expected)} Linear layers in a row)" in (
        onset.message
    )
    # norms are measured at every kept step: the count is over all of them from the onset on
    measured = 12 - first
    if len(steps) == measured:
        assert f"every one of the {measured} steps measured from step {first} to 11 has it" in onset.message
    else:
        assert f"{len(steps)} of the {measured} steps measured from step {first} on" in onset.message
    # the onset's layers are the ones the diagnosis of that step names
    at_onset = [f.module for f in w.diagnose(first, group=False) if f.kind == "vanishing"]
    assert at_onset == expected
    assert _kinds_diagnosed(w) <= {f.kind for f in w.onset()}


def test_the_dead_onset_counts_only_the_steps_that_measured_zero_fractions():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1))
    with torch.no_grad():
        model[2].bias.fill_(-0.6)  # most of its units never fire: their weights' gradients are 0
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    stats_every, count = 3, 12
    zeros, smallest = [], []
    with hookviz.watch(model, optimizer=optimizer, stats_every=stats_every) as w:
        for _ in range(count):
            optimizer.zero_grad()
            model(torch.randn(16, 8)).pow(2).mean().backward()
            grads = [p.grad for p in model[2].parameters()]
            zeros.append(sum(int((g == 0).sum()) for g in grads) / sum(g.numel() for g in grads))
            smallest.append(min(torch.linalg.vector_norm(p.grad).item() for p in model.parameters()))
            optimizer.step()
    # no gradient of exact zeros (an alarm, read in full): zero fractions are read every 3rd step
    assert min(smallest) > 0
    full = list(range(0, count, stats_every))
    dead = [s for s in full if zeros[s] >= DEFAULT_THRESHOLDS["dead"]]
    assert dead and len(dead) < len(full), "the layer must be dead at some measured steps, not all"
    first, last = dead[0], dead[-1]
    measured = len([s for s in full if s >= first])
    [onset] = [f for f in w.onset() if f.kind == "dead"]
    assert (
        onset.step == first and onset.module == "2" and onset.value == pytest.approx(zeros[first], abs=1e-12)
    )
    assert f"{len(dead)} of the {measured} steps measured from step {first} on have it" in onset.message
    assert f"the last at step {last}" in onset.message
    assert f"(zero fractions were measured at {measured} of the {count - first} kept steps" in onset.message
    assert _kinds_diagnosed(w) <= {f.kind for f in w.onset()}


def test_every_onset_kind_has_a_colour_and_a_label_on_the_heatmap():
    from hookviz.analysis.onset import STATISTIC

    assert set(ONSET_COLORS) == set(ONSET_LABELS) == set(STATISTIC)
