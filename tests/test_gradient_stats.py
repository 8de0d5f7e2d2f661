"""One parameter-to-layer rule and one layer norm: a run, its graph, its findings and a watch of the
same model group parameters into the same layers, with the norms plain PyTorch gives."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import hookviz
from hookviz.analysis.gradient_stats import gradient_stats, layer_norms, module_norm, module_norms, module_of
from hookviz.colors import NOT_WATCHED_COLOR, norm_color
from hookviz.widget.chart import chart_json
from hookviz.widget.graph import graph_json
from hookviz.widget.watch_json import watch_chart_json, watch_node_norms


class Block(nn.Module):
    """A module with a parameter of its own beside a child's: ``block.scale`` is ``block``'s,
    ``block.inner.weight`` is ``block.inner``'s."""

    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.full((4,), 0.5))
        self.inner = nn.Linear(4, 4)

    def forward(self, x):
        return torch.tanh(self.inner(x)) * self.scale


class TiedAndNested(nn.Module):
    """Tied input and output embeddings (one parameter, ``embed.weight``, used twice) around a
    Block, and a parameter of the root module itself."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(10, 4)
        self.block = Block()
        self.head = nn.Linear(4, 10, bias=False)
        self.head.weight = self.embed.weight
        self.temperature = nn.Parameter(torch.tensor(2.0))

    def forward(self, ids):
        return self.head(self.block(self.embed(ids))) / self.temperature


def _loss(out):
    return out.logsumexp(-1).mean()


def test_a_run_its_graph_its_findings_and_a_watch_group_parameters_alike():
    torch.manual_seed(0)
    model, ids = TiedAndNested(), torch.randint(0, 10, (3, 5))
    expected_layers = {
        "temperature": "",  # the root module's own
        "embed.weight": "embed",  # tied: one parameter, under its first name
        "block.scale": "block",  # the nested module's own parameter
        "block.inner.weight": "block.inner",
        "block.inner.bias": "block.inner",
    }
    assert [n for n, _ in model.named_parameters()] == list(expected_layers)
    # plain PyTorch: each parameter's gradient norm, and each layer's (its parameters' together)
    grads = torch.autograd.grad(_loss(model(ids)), list(model.parameters()))
    norms = {n: torch.linalg.vector_norm(g).item() for (n, _), g in zip(model.named_parameters(), grads)}
    expected_norms = {
        layer: math.sqrt(sum(norms[n] ** 2 for n, owner in expected_layers.items() if owner == layer))
        for layer in dict.fromkeys(expected_layers.values())
    }

    run = hookviz.Session(model, (ids,), loss_fn=_loss).run()
    groupings = {
        "run": {n: run.nodes[n].module for n in expected_layers},
        "graph": {
            item["id"]: item["module"] for item in graph_json(run)["nodes"] if item["id"] in expected_layers
        },
        "findings": {s.name: s.module for s in gradient_stats(run, model) if s.kind == "parameter"},
        "rule": {n: module_of(n) for n in expected_layers},
    }
    for source, grouping in groupings.items():
        assert grouping == expected_layers, source
    run_layers = {s.name: s.grad_norm for s in gradient_stats(run, model) if s.kind == "layer"}
    assert run_layers == pytest.approx(expected_norms, rel=1e-6)

    with hookviz.watch(model) as watch:
        model.zero_grad()
        _loss(model(ids)).backward()
    assert watch.parameter_names == list(expected_layers)
    assert watch.layer_norms() == pytest.approx(expected_norms, rel=1e-6)
    step = watch.norms(kind="parameter")
    assert layer_norms(step) == pytest.approx(expected_norms, rel=1e-6)
    chart = watch_chart_json(step, {"lo": -4, "hi": 1}, "step 0")
    assert dict(zip(chart["modules"], map(float, chart["current"]))) == pytest.approx(
        expected_norms, rel=1e-6
    )
    # a module box: the layers it is or encloses, taken together
    graph = graph_json(run)
    colours = watch_node_norms(graph, step, {})
    block = math.sqrt(expected_norms["block"] ** 2 + expected_norms["block.inner"] ** 2)
    assert colours["group:block"] == pytest.approx(block, rel=1e-6)
    assert module_norm("block", layer_norms(step)) == pytest.approx(block, rel=1e-6)
    assert colours["group:"] == pytest.approx(math.sqrt(sum(v**2 for v in norms.values())), rel=1e-6)


def test_a_run_graphs_module_boxes_take_the_layer_norm_watches_and_findings_take():
    # One definition of a module's norm: a box of the run's graph takes the 2-norm of the gradients
    # of the layers it is or encloses, as the watch view colours it and as the findings' layer rows
    # give it, all three checked against plain PyTorch's .grad of the same step.
    torch.manual_seed(0)
    model, ids = TiedAndNested(), torch.randint(0, 10, (3, 5))
    with hookviz.watch(model) as watch:
        model.zero_grad()
        _loss(model(ids)).backward()
    grads = {n: p.grad.detach().double() for n, p in model.named_parameters()}
    run = hookviz.Session(model, (ids,), loss_fn=_loss).run()
    graph = graph_json(run)
    step = watch.norms(kind="parameter")
    watch_colours = watch_node_norms(graph, step, {})
    findings = {s.name: s.grad_norm for s in gradient_stats(run, model) if s.kind == "layer"}
    assert findings == pytest.approx(watch.layer_norms(), rel=1e-6)
    compared = set()
    for group in graph["groups"]:
        module = group["module"]
        inside = [
            g
            for n, g in grads.items()
            if module_of(n) == module or n.startswith(f"{module}." if module else "")
        ]
        if not inside:  # the loss box; head, whose tied weight is embed's (its first name)
            assert group["norm"] is None and group["norm_text"] == "no parameters", module
            assert group["color"] == NOT_WATCHED_COLOR and group["id"] not in watch_colours, module
            continue
        expected = torch.linalg.vector_norm(torch.cat([g.flatten() for g in inside])).item()
        assert group["norm"] == pytest.approx(expected, rel=1e-6), module
        assert watch_colours[group["id"]] == pytest.approx(expected, rel=1e-6), module
        assert module_norm(module, findings) == pytest.approx(expected, rel=1e-6), module
        assert group["color"] == norm_color(group["norm"], graph["color_range"]), module
        compared.add(module)
    assert compared == {"", "embed", "block", "block.inner"}
    # A layer that encloses no other layer: its box and its point in the gradient-flow chart share
    # one colour (block's box holds block.inner too, the root's every layer).
    chart = chart_json(run)
    points = dict(zip(chart["modules"], chart["colors"]))
    boxes = {g["module"]: g["color"] for g in graph["groups"]}
    assert set(points) == {"", "embed", "block", "block.inner"}
    assert {m: points[m] for m in ("embed", "block.inner")} == {m: boxes[m] for m in ("embed", "block.inner")}


def test_a_parameter_of_a_module_never_called_is_drawn_in_the_module_that_used_it():
    class UsesItsChildsWeight(nn.Module):
        def __init__(self):
            super().__init__()
            self.child = nn.Linear(3, 2)  # never called: its weight is used directly

        def forward(self, x):
            return torch.nn.functional.linear(x, self.child.weight).sum()

    run = hookviz.Session(UsesItsChildsWeight(), (torch.randn(4, 3),)).run()
    assert module_of("child.weight") == "child"
    assert module_of("child.weight", {""}) == "" == run.nodes["child.weight"].module


def test_every_modules_norm_at_once_is_each_modules_norm_by_the_one_rule():
    # module_norms (one pass over the layers, what a big graph's boxes take) gives each module
    # exactly what a filter over every layer gives (math.hypot of their norms in the same order),
    # None, NaN and Inf included; module_norm of one module is the same number.
    names = ["a.b.c", "a.b", "a.bb", "a", "d.0", "d.10.x", "e"]
    norms = dict(zip(names, [3.0, 4.0, None, 1e-30, math.inf, 2.5, math.nan]))
    every = module_norms(norms)
    assert set(every) == {"", "a", "a.b", "a.b.c", "a.bb", "d", "d.0", "d.10", "d.10.x", "e"}
    compared = []
    for module in [*every, "a.b.c.z", "f"]:
        prefix = f"{module}." if module else ""
        present = [
            n for layer, n in norms.items() if (layer == module or layer.startswith(prefix)) and n is not None
        ]
        expected = repr(math.hypot(*present)) if present else "None"
        assert repr(every.get(module)) == expected, module
        assert repr(module_norm(module, norms)) == expected, module
        compared.append(expected)
    assert {"nan", "inf", "None", "5.0"} <= set(compared)
