"""The watch answers "when did it start, and where" (issue 41, point 3): the onset of NaN/Inf and of
exploding norms checked against plain PyTorch's ``.grad`` in the same loop, the banner and heatmap
that carry it, per-layer lines told apart, ``show(watch, run)``, and "not watched" beside "no grad".
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import hookviz
from hookviz.colors import NAN_COLOR, NO_GRAD_COLOR, NOT_WATCHED_COLOR
from hookviz.errors import WatchError
from hookviz.examples import sigmoid_mlp
from hookviz.watching.plots import LINES_SHOWN, line_styles


def _explode(steps: int = 40, lr: float = 3.0):
    """Notebook 07's exploding run (scikit-learn's digits): a 6-layer ReLU MLP under SGD with
    momentum at a learning rate that overflows. Returns the model, the closed watch and, from plain
    PyTorch in the same loop, the first step whose .grad held NaN/Inf and the first whose .grad
    norm passed 1e3 (with the parameter names that did at that step)."""
    digits = pytest.importorskip("sklearn.datasets").load_digits()
    x = torch.tensor(digits.data, dtype=torch.float32)
    x, y = (x - x.mean(0)) / (x.std(0) + 1e-6), torch.tensor(digits.target)
    torch.manual_seed(0)
    model = sigmoid_mlp(depth=6, width=32, inputs=64, classes=10, activation=nn.ReLU)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    generator = torch.Generator().manual_seed(0)
    first_nan = first_big = None
    nan_names, big_names = [], []
    with hookviz.watch(model) as w:
        for step in range(steps):
            index = torch.randint(0, len(x), (64,), generator=generator)
            loss = F.cross_entropy(model(x[index]), y[index])
            optimizer.zero_grad()
            loss.backward()
            grads = {n: p.grad for n, p in model.named_parameters()}
            bad = [n for n, g in grads.items() if not torch.isfinite(g).all()]
            if bad and first_nan is None:
                first_nan, nan_names = step, bad
            big = [n for n, g in grads.items() if torch.isfinite(g).all() and g.norm().item() > 1e3]
            if big and first_big is None:
                first_big, big_names = step, big
            optimizer.step()
    return model, w, first_nan, nan_names, first_big, big_names


@pytest.fixture(scope="module")
def exploded():
    return _explode()


def test_onset_is_the_first_step_plain_pytorch_saw_nan(exploded):
    _, w, first_nan, nan_names, first_big, big_names = exploded
    assert first_nan is not None and first_nan < w.steps[-1]  # the run went on after the NaN
    found = {f.kind: f for f in w.onset()}
    assert found["nan"].step == first_nan
    assert found["nan"].node in nan_names
    # the place: the first of them backward reached (the layer nearest the loss)
    order = w.arrival_order
    columns = [w.names.index(n) for n in nan_names]
    assert found["nan"].node == w.names[min(columns, key=lambda c: order[c])]
    assert f"first at step {first_nan}" in found["nan"].message
    assert found["exploding"].step == first_big and found["exploding"].node in big_names
    # the last step's own finding still names step 99, the onset names when it began
    assert all(f.step == w.steps[-1] for f in w.diagnose())


def test_no_onset_in_a_healthy_run():
    torch.manual_seed(0)
    model = sigmoid_mlp(depth=3, width=8, inputs=4, classes=3, activation=nn.ReLU)
    x, y = torch.randn(32, 4), torch.randint(0, 3, (32,))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with hookviz.watch(model) as w:
        for _ in range(5):
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
    assert w.onset() == []


def test_live_banner_and_heatmap_keep_the_onset(exploded):
    _, w, first_nan, *_ = exploded
    view = hookviz.show(w)
    assert view.live.wait_shown()
    onset = {f["kind"]: f for f in view.diagnosis["onset"]}
    assert onset["nan"]["step"] == first_nan and view.diagnosis["step"] == w.steps[-1]
    figure = view.watch_heatmap
    marks = [s for s in figure["layout"]["shapes"] if s.get("line", {}).get("color") == NAN_COLOR]
    assert [s["x0"] for s in marks] == [first_nan]
    assert f"NaN/Inf from step {first_nan}" in [a["text"] for a in figure["layout"]["annotations"]]
    assert figure["step_marker"]["line"]["color"] != NAN_COLOR  # red only means NaN/Inf
    # the banner keeps the onset when the slider goes back to a step before it
    assert view.watch_step(w.steps[0])
    assert view.diagnosis["onset"][-1]["step"] == first_nan


def test_layer_lines_are_told_apart(exploded):
    _, w, *_ = exploded
    view = hookviz.show(w)
    assert view.live.wait_shown()
    lines = [t for t in view.watch_heatmap["data"] if t["type"] == "scatter"]
    drawn = [t for t in lines if t["visible"] is True]
    assert len(lines) == 6 and len(drawn) == 6
    assert len({t["line"]["color"] for t in drawn}) == len(drawn)
    styles = line_styles(12)
    visible = [color for color, shown in styles if shown is True]
    assert len(visible) == LINES_SHOWN and len(set(visible)) == LINES_SHOWN
    assert styles[0][1] is True and styles[-1][1] is True
    assert sum(shown == "legendonly" for _, shown in styles) == 12 - LINES_SHOWN
    assert all(color != NAN_COLOR for color, _ in styles)
    figure = w.lines()
    assert sum(t.visible is True for t in figure.data) == min(LINES_SHOWN, len(figure.data)) == 6


def test_show_watch_on_a_run_draws_it_or_refuses(exploded):
    model, w, *_ = exploded
    run = hookviz.Session(model, (torch.randn(4, 64),), loss_fn=lambda out: out.sum()).run()
    view = hookviz.show(w, run)
    assert view.watch_view["step"] == w.steps[-1]
    colors = view.watch_view["node_colors"]
    assert colors["0.weight"] == NAN_COLOR  # the last step's gradients hold NaN
    # op nodes are never recorded by a watch: "not watched", which the legend names
    ops = [n["id"] for n in view.graph["nodes"] if n["kind"] != "leaf"]
    assert ops and not any(op in colors for op in ops)
    assert view.watch_view["missing_color"] == NOT_WATCHED_COLOR != NO_GRAD_COLOR
    keys = {k["text"]: k["color"] for k in view.watch_view["legend"]["keys"]}
    assert keys["not watched"] == NOT_WATCHED_COLOR and keys["no grad"] == NO_GRAD_COLOR
    # the chart follows the watch: its layers' norms at the shown step, not the run's
    assert "step" in view.chart["figure"]["layout"]["title"]["text"]
    view.hide_watch()
    assert "watch" not in view.chart["figure"]["layout"]["title"]["text"]
    with pytest.raises(WatchError, match="must be a hookviz.Run or hookviz.Session"):
        hookviz.show(w, torch.randn(4, 64))
    other = nn.Linear(3, 2)  # its parameters are "weight" and "bias"
    other_run = hookviz.Session(other, (torch.randn(2, 3),), loss_fn=lambda out: out.sum()).run()
    with pytest.raises(WatchError, match="none of the watch's parameters"):
        hookviz.show(w, other_run)


def test_a_parameter_without_gradient_is_no_grad_not_unwatched():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))
    model[0].weight.requires_grad_(True)
    with hookviz.watch(model) as w:
        model[1](torch.randn(3, 4)).sum().backward()  # model[0] gets no gradient this step
    session = hookviz.Session(model, (torch.randn(3, 4),), loss_fn=lambda out: out.sum())
    view = hookviz.show_watch(w, session)
    colors = view.watch_view["node_colors"]
    assert colors["0.weight"] == colors["0.bias"] == NO_GRAD_COLOR
    assert not math.isnan(view.watch_view["norms"]["1.weight"])
    assert colors["1.weight"] not in (NO_GRAD_COLOR, NOT_WATCHED_COLOR)


def test_the_inspector_says_not_watched_where_the_graph_does():
    """show(watch, run): a Sigmoid box (no parameter the watch records) is "not watched" in the
    inspector as in the graph's colour; a Linear box gets its norm at the step shown, as text of
    the norm the graph colours it by; an op is "not watched"; the note follows the step slider and
    leaves with the watch."""
    from hookviz import text

    torch.manual_seed(0)
    model = sigmoid_mlp(depth=3, width=8, inputs=4, classes=2)
    x, y = torch.randn(16, 4), torch.randint(0, 2, (16,))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with hookviz.watch(model) as w:
        for _ in range(3):
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
    run = hookviz.Session(model, (x,), loss_fn=lambda out: F.cross_entropy(out, y)).run()
    view = hookviz.show(w, run)
    types = {g["module"]: g.get("type") for g in view.graph["groups"]}
    sigmoids = [m for m, kind in types.items() if kind == "Sigmoid"]
    linears = [m for m, kind in types.items() if kind == "Linear"]
    assert len(sigmoids) == 2 and len(linears) == 3, types  # depth 3: three Linear, two Sigmoid between
    colors = view.watch_view["node_colors"]
    for module in sigmoids:
        assert view.select(module)
        note = view.inspector["watch"]
        assert f"group:{module}" not in colors  # the graph draws it "not watched"
        assert note["state"] == "not watched" and note["color"] == NOT_WATCHED_COLOR
        assert note["text"].startswith("Not watched: the watch recorded no parameter of this module")
        assert "no grad" not in note["text"] and "None" not in note["text"]
    step = view.watch_view["step"]
    for module in linears:
        assert view.select(module)
        note = view.inspector["watch"]
        norm = view.watch_view["node_norms"][f"group:{module}"]
        assert note == {
            "state": "norm",
            "color": colors[f"group:{module}"],
            "text": f"Watch, step {step}: ‖grad‖ {text.norm(norm)}",
        }
    op = next(n["id"] for n in view.graph["nodes"] if n["kind"] == "op")
    assert view.select(op)
    assert view.inspector["watch"]["state"] == "not watched"
    assert view.select(linears[0])
    assert view.watch_step(w.steps[0])
    assert view.inspector["watch"]["text"].startswith(f"Watch, step {w.steps[0]}: ")
    view.hide_watch()
    assert "watch" not in view.inspector and view.inspector["id"] == f"module:{linears[0]}"
