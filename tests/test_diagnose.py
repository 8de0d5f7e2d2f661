"""Diagnosis on models that really have each problem, every number checked against plain PyTorch."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import hookviz
from hookviz import text
from hookviz.analysis.diagnose import diagnose
from hookviz.analysis.findings import Finding, percent
from hookviz.analysis.gradient_stats import gradient_stats
from hookviz.examples import sigmoid_mlp


def data(inputs=64, classes=10, batch=128):
    torch.manual_seed(0)
    return torch.randn(batch, inputs), torch.randint(0, classes, (batch,))


def plain_grads(model, x, loss_fn):
    """Parameter gradients of a plain ``loss.backward()`` (on a copy, so the model's .grad stays)."""
    model.zero_grad(set_to_none=True)
    loss_fn(model(x)).backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    return grads


def layer_norm(grads, module):
    return math.sqrt(
        sum(
            torch.linalg.vector_norm(g, dtype=torch.float64).item() ** 2
            for n, g in grads.items()
            if n.rsplit(".", 1)[0] == module
        )
    )


def test_deep_sigmoid_mlp_vanishes():
    x, y = data()
    torch.manual_seed(0)
    model = sigmoid_mlp(depth=20, width=256, inputs=64, classes=10)
    loss_fn = lambda out: F.cross_entropy(out, y)  # noqa: E731
    run = hookviz.Session(model, (x,), loss_fn=loss_fn).run()
    findings = hookviz.diagnose(run, model=model, group=False)
    grads = plain_grads(model, x, loss_fn)
    nearest = layer_norm(grads, "38")
    expected = [m for m in (str(i) for i in range(0, 39, 2)) if layer_norm(grads, m) < 1e-3 * nearest]
    assert len(expected) >= 10  # the model really has the problem
    vanishing = [f for f in findings if f.kind == "vanishing"]
    assert sorted(f.module for f in vanishing) == sorted(expected)
    assert {f.kind for f in findings} == {"vanishing"}
    first = next(f for f in vanishing if f.module == "0")
    assert first.node == "0.weight"
    assert first.value == pytest.approx(layer_norm(grads, "0") / nearest, rel=1e-5)
    assert "module '0' (Linear)" in first.message and "module '38'" in first.message
    # the same run with a looser threshold reports fewer layers
    assert len(hookviz.diagnose(run, vanishing=1e-9, group=False)) < len(vanishing)


@pytest.mark.parametrize("depth", [20, 30])
def test_a_run_of_vanishing_layers_is_one_finding_with_its_range(depth):
    """A deep sigmoid MLP: the layers below the threshold form one run from the loss side down to
    the input, said in one line with its first and last ratio (plain PyTorch's numbers)."""
    x, y = data()
    torch.manual_seed(0)
    model = sigmoid_mlp(depth=depth, width=256, inputs=64, classes=10)
    loss_fn = lambda out: F.cross_entropy(out, y)  # noqa: E731
    run = hookviz.Session(model, (x,), loss_fn=loss_fn).run()
    grads = plain_grads(model, x, loss_fn)
    layers = [str(i) for i in range(2 * depth - 2, -1, -2)]  # nearest the loss first
    nearest = layer_norm(grads, layers[0])
    below = [m for m in layers if layer_norm(grads, m) < 1e-3 * nearest]
    assert below == layers[layers.index(below[0]) :] and len(below) >= 10  # one run, down to '0'
    (finding,) = hookviz.diagnose(run, model=model)
    assert finding.kind == "vanishing" and finding.modules == tuple(below)
    first, last = (layer_norm(grads, m) / nearest for m in (below[0], below[-1]))
    assert finding.message.startswith(
        f"the gradient vanishes from module '{below[0]}' down to module '0' ({len(below)} Linear layers "
        f"in a row): {text.number(first)} … {text.number(last)} x that of module '{layers[0]}' (Linear)"
    )
    worst = min(below, key=lambda m: layer_norm(grads, m))
    assert finding.module == worst and finding.node == f"{worst}.weight"
    assert finding.value == pytest.approx(layer_norm(grads, worst) / nearest, rel=1e-5)
    # the per-layer findings are still there for who wants them, one per layer of the run
    assert [f.module for f in hookviz.diagnose(run, model=model, group=False)] == below


def test_runs_end_where_the_problem_changes():
    """One huge layer in the middle saturates the sigmoid after it, so every layer below gets an
    exactly-zero gradient (dead updates) while the two above it only vanish: two runs, two lines,
    each with the layers plain PyTorch says have that problem."""
    x, y = data()
    torch.manual_seed(0)
    model = sigmoid_mlp(depth=12, width=64, inputs=64, classes=10)
    with torch.no_grad():
        model[10].weight.mul_(1e4)
    loss_fn = lambda out: F.cross_entropy(out, y)  # noqa: E731
    run = hookviz.Session(model, (x,), loss_fn=loss_fn).run()
    grads = plain_grads(model, x, loss_fn)
    layers = [str(i) for i in range(22, -1, -2)]  # nearest the loss first
    nearest = layer_norm(grads, "22")

    def problem(module):
        zeros = torch.cat([g.flatten() for n, g in grads.items() if n.rsplit(".", 1)[0] == module])
        if (zeros == 0).double().mean().item() >= 0.9:
            return "dead"
        return "vanishing" if layer_norm(grads, module) < 1e-3 * nearest else None

    runs: list[tuple[str, list[str]]] = []
    for module in layers:
        kind = problem(module)
        if kind and runs and runs[-1][0] == kind and runs[-1][1][-1] == layers[layers.index(module) - 1]:
            runs[-1][1].append(module)
        elif kind:
            runs.append((kind, [module]))
    assert [kind for kind, _ in runs] == ["vanishing", "dead"]  # the model has both, in a row
    layer_findings = [f for f in hookviz.diagnose(run, model=model) if f.kind in ("vanishing", "dead")]
    layer_findings = [f for f in layer_findings if "updates" in f.message or f.kind == "vanishing"]
    assert [(f.kind, list(f.modules)) for f in layer_findings] == runs
    dead = layer_findings[1]
    assert dead.message.startswith(
        f"the updates are dead from module '{runs[1][1][0]}' down to module '0' ({len(runs[1][1])} "
        "Linear layers in a row): 100% … 100% of each layer's parameter gradient is exactly zero"
    )


def test_percentages_never_round_a_part_to_all_or_nothing():
    assert [percent(f) for f in (0, 1, 0.37, 0.995, 0.9999, 1 - 64 / 3.2e6, 2e-5, 0.004)] == [
        "0%",
        "100%",
        "37%",
        "99.5%",
        "99.99%",
        "> 99.99%",
        "< 0.01%",
        "0.4%",
    ]
    # a real layer with one live unit of 20000: its updates are dead but not "100%" dead
    x, y = data()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 20000), nn.ReLU(), nn.Linear(20000, 10))
    with torch.no_grad():
        model[0].bias.fill_(-100)
        model[0].bias[0] = 100
    loss_fn = lambda out: F.cross_entropy(out, y)  # noqa: E731
    findings = hookviz.diagnose(hookviz.Session(model, (x,), loss_fn=loss_fn).run(), model=model)
    grads = plain_grads(model, x, loss_fn)
    zeros = (torch.cat([grads["0.weight"].flatten(), grads["0.bias"]]) == 0).double().mean().item()
    assert 0.9999 < zeros < 1
    dead = next(f for f in findings if f.kind == "dead" and "updates are dead" in f.message)
    assert dead.modules == ("2", "0") and "> 99.99%" in dead.message and "100%" not in dead.message
    units = next(f for f in findings if f.kind == "dead" and f.module == "1")
    assert units.message.startswith("> 99.99% of the outputs of module '1' (ReLU)")


def test_gradient_stats_match_plain_pytorch():
    x, y = data(inputs=8, classes=3, batch=16)
    torch.manual_seed(0)
    model = sigmoid_mlp(depth=4, width=16, inputs=8, classes=3)
    loss_fn = lambda out: F.cross_entropy(out, y)  # noqa: E731
    run = hookviz.Session(model, (x,), loss_fn=loss_fn).run()
    grads = plain_grads(model, x, loss_fn)
    stats = {(s.kind, s.name): s for s in gradient_stats(run, model)}
    assert [name for kind, name in stats if kind == "layer"] == ["6", "4", "2", "0"]  # nearest first
    compared = 0
    for name, parameter in model.named_parameters():
        s = stats["parameter", name]
        norm = torch.linalg.vector_norm(grads[name]).item()
        value = torch.linalg.vector_norm(parameter.detach(), dtype=torch.float64).item()
        assert s.grad_norm == pytest.approx(norm, rel=1e-6)
        assert s.parameter_norm == pytest.approx(value, rel=1e-12)
        assert s.ratio_to_parameter == pytest.approx(norm / value, rel=1e-6)
        assert s.ratio_to_nearest == pytest.approx(norm / layer_norm(grads, "6"), rel=1e-6)
        assert s.zero_fraction == (grads[name] == 0).double().mean().item()
        compared += 1
    assert compared == 8  # four Linear layers' weights and biases
    assert stats["layer", "2"].grad_norm == pytest.approx(layer_norm(grads, "2"), rel=1e-6)
    # without the model: same gradient numbers, no parameter norms
    bare = {(s.kind, s.name): s for s in gradient_stats(run)}
    assert bare.keys() == stats.keys()
    assert bare["parameter", "0.weight"].parameter_norm is None
    assert bare["parameter", "0.weight"].grad_norm == stats["parameter", "0.weight"].grad_norm


def test_badly_initialised_deep_net_explodes():
    x, y = data()
    torch.manual_seed(0)
    model = sigmoid_mlp(depth=12, width=64, inputs=64, classes=10, activation=nn.ReLU)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.mul_(10)
    loss_fn = lambda out: F.cross_entropy(out, y)  # noqa: E731
    run = hookviz.Session(model, (x,), loss_fn=loss_fn).run()
    findings = hookviz.diagnose(run, model=model, group=False)
    grads = plain_grads(model, x, loss_fn)
    exploding = {f.module: f.value for f in findings if f.kind == "exploding"}
    expected = {m: layer_norm(grads, m) for m in (str(i) for i in range(0, 23, 2))}
    assert {m for m, v in expected.items() if v > 1e3} == set(exploding)
    assert exploding, "no layer's gradient explodes: the comparison below would compare nothing"
    for module, norm in exploding.items():
        assert norm == pytest.approx(expected[module], rel=1e-5)
    assert {f.kind for f in findings} == {"exploding"}
    # grouped: every layer explodes, nearest the loss first, so one line from '22' down to '0'
    (grouped,) = hookviz.diagnose(run, model=model)
    assert grouped.modules == tuple(str(i) for i in range(22, -1, -2))
    assert grouped.message.startswith(
        f"the gradient explodes from module '22' down to module '0' (12 Linear layers in a row): norms "
        f"{text.number(expected['22'])} … {text.number(expected['0'])}"
    )


def test_relu_with_large_negative_bias_is_dead():
    x, y = data()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
    with torch.no_grad():
        model[0].bias.fill_(-100)
    loss_fn = lambda out: F.cross_entropy(out, y)  # noqa: E731
    run = hookviz.Session(model, (x,), loss_fn=loss_fn).run()
    findings = hookviz.diagnose(run, model=model, group=False)
    relu_out = model[1](model[0](x))
    grads = plain_grads(model, x, loss_fn)
    dead = {f.module: f for f in findings if f.kind == "dead"}
    assert (relu_out == 0).double().mean().item() == 1.0
    assert dead["1"].value == 1.0 and dead["1"].node == "ReluBackward0_0"
    assert "module '1' (ReLU)" in dead["1"].message
    assert (
        dead["0"].value
        == (torch.cat([grads["0.weight"].flatten(), grads["0.bias"]]) == 0).double().mean().item()
    )
    zeros_2 = (torch.cat([grads["2.weight"].flatten(), grads["2.bias"]]) == 0).double().mean().item()
    assert zeros_2 >= 0.9 and dead["2"].value == pytest.approx(zeros_2)
    assert {f.kind for f in findings} == {"dead"}
    # grouped: layers '2' and '0' are in a row (dead updates), the ReLU's units on their own
    grouped = hookviz.diagnose(run, model=model)
    assert [f.modules for f in grouped] == [("2", "0"), ()] and grouped[1].module == "1"
    assert grouped[0].value == max(dead["0"].value, zeros_2)


@pytest.mark.parametrize("full_tensor_limit", [1 << 20, 16])  # whole values, then histograms
def test_large_weights_saturate_sigmoids(full_tensor_limit):
    x, y = data()
    torch.manual_seed(0)
    model = sigmoid_mlp(depth=4, width=64, inputs=64, classes=10)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.mul_(100)
    loss_fn = lambda out: F.cross_entropy(out, y)  # noqa: E731
    run = hookviz.Session(model, (x,), loss_fn=loss_fn, full_tensor_limit=full_tensor_limit).run()
    grouped = [f for f in hookviz.diagnose(run, model=model) if f.kind == "saturated"]
    assert [f.modules for f in grouped] == [("1", "3", "5")]  # one line: the sigmoids in a row
    assert grouped[0].message.startswith("saturated activations from module '1' to module '5' (3 Sigmoid")
    saturated = {
        f.module: f.value for f in hookviz.diagnose(run, model=model, group=False) if f.kind == "saturated"
    }
    h, compared = x, 0
    for i, layer in enumerate(model):
        h = layer(h)
        if isinstance(layer, nn.Sigmoid):
            compared += 1
            fraction = ((h <= 0.01) | (h >= 0.99)).double().mean().item()
            assert fraction >= 0.9
            if full_tensor_limit > h.numel():
                assert saturated[str(i)] == pytest.approx(fraction, abs=1e-12)
            else:  # the histogram estimate counts whole bins: never below the truth
                assert saturated[str(i)] >= fraction - 0.05
    assert compared == 3 == len(saturated)  # each Sigmoid, and no other module, is saturated


def test_healthy_models_have_no_findings(canonical):
    x, y = data()
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64), nn.LayerNorm(64), nn.ReLU(), nn.Linear(64, 10)
    )
    run = hookviz.Session(model, (x,), loss_fn=lambda out: F.cross_entropy(out, y)).run()
    assert hookviz.diagnose(run) == [] and hookviz.diagnose(run, model=model) == []
    session = canonical[0]
    assert hookviz.diagnose(session.run()) == []


class LogOfReLU(nn.Module):
    """``log`` of a ReLU output, with zeros masked out by ``where``: finite forward, NaN backward
    (the famous trap: where's unused branch still sends 0 * (1/0) = NaN back)."""

    def __init__(self, masked: bool):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.act = nn.ReLU()
        self.out = nn.Linear(4, 1)
        self.masked = masked

    def forward(self, x):
        h = self.act(self.fc(x))
        logged = torch.log(h)
        return self.out(torch.where(h > 0, logged, torch.zeros_like(h)) if self.masked else logged)


def test_nan_origin_is_log_of_zero_in_backward():
    torch.manual_seed(0)
    model, x = LogOfReLU(masked=True), torch.randn(8, 4)
    run = hookviz.Session(model, (x,), loss_fn=lambda out: out.sum()).run()
    findings = [f for f in hookviz.diagnose(run) if f.kind == "nan"]
    backward = next(f for f in findings if "in backward" in f.message)
    h = model.act(model.fc(x))
    zeros = int((h == 0).sum())
    assert zeros > 0
    assert backward.node == "LogBackward0_0" and backward.module == ""
    assert backward.value == zeros  # 0 * (1/0) = NaN where h == 0
    assert f"{zeros} of {h.numel()} values exactly 0" in backward.message
    assert "log" in backward.message and "ReluBackward0_0" in backward.message
    # the same with plain PyTorch: the gradient arriving at h holds NaN exactly where h == 0
    h.retain_grad()
    torch.where(h > 0, torch.log(h), torch.zeros_like(h)).sum().backward()
    assert torch.isnan(h.grad).sum().item() == zeros
    # the forward finding names the -inf that log made (masked later by where)
    forward = next(f for f in findings if "in forward" in f.message)
    assert forward.node == "LogBackward0_0" and forward.value == zeros


def test_nan_from_forward_names_the_forward_op_and_its_input():
    torch.manual_seed(0)
    model, x = LogOfReLU(masked=False), torch.randn(8, 4)
    run = hookviz.Session(model, (x,), loss_fn=lambda out: out.pow(2).mean()).run()
    assert math.isnan(run.loss.item()) or math.isinf(run.loss.item())
    findings = [f for f in hookviz.diagnose(run) if f.kind == "nan"]
    forward = findings[0]
    assert forward.node == "LogBackward0_0" and "in forward" in forward.message
    assert forward.value == int((model.act(model.fc(x)) == 0).sum())
    backward = findings[1]
    assert "its forward input already held NaN/Inf" in backward.message


def test_nonfinite_everywhere_is_a_finding_not_a_crash():
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 1))
    x = torch.full((3, 4), math.nan)
    findings = hookviz.diagnose(
        hookviz.Session(model, (x,), loss_fn=lambda out: out.sum()).run(), model=model
    )
    assert findings[0].kind == "nan" and "input 'input'" in findings[0].message
    assert findings[0].value == 12


def test_bad_thresholds_are_clear_errors():
    x, y = data(inputs=8, classes=3, batch=4)
    model = sigmoid_mlp(depth=3, width=8, inputs=8, classes=3)
    run = hookviz.Session(model, (x,), loss_fn=lambda out: F.cross_entropy(out, y)).run()
    with pytest.raises(hookviz.HookvizError, match="unknown threshold.*'vanish'.*vanishing=0.001"):
        hookviz.diagnose(run, vanish=1e-3)
    with pytest.raises(hookviz.HookvizError, match="dead=2 is a fraction"):
        diagnose(run, dead=2)
    with pytest.raises(hookviz.HookvizError, match="positive number"):
        diagnose(run, exploding=-1)


def test_finding_is_plain_data():
    finding = Finding("dead", "fc1", "fc1.weight", "message", 1.0)
    assert finding.step is None and finding.kind == "dead"
