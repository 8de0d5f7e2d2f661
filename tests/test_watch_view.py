"""The watch answers "when did it start, and where": the onset of NaN/Inf and of
exploding norms checked against plain PyTorch's ``.grad`` in the same loop, the banner and heatmap
that carry it, per-layer lines told apart, ``show(watch, on=run)``, and "not watched" beside "no grad".
"""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import hookviz
from hookviz.analysis.diagnose import DEFAULT_THRESHOLDS
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
    view = hookviz.show(w, on=run)
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
        hookviz.show(w, on=torch.randn(4, 64))
    other = nn.Linear(3, 2)  # its parameters are "weight" and "bias"
    other_run = hookviz.Session(other, (torch.randn(2, 3),), loss_fn=lambda out: out.sum()).run()
    with pytest.raises(WatchError, match="none of the watch's parameters"):
        hookviz.show(w, on=other_run)


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


def _digits_with_optimizer(steps: int = 6, skip: int | None = 3, stats_every: int = 1):
    """scikit-learn's digits, a 3-layer ReLU MLP under Adam (lr 1e-3), bf16 autocast and a
    GradScaler, watched with ``optimizer=`` and ``scaler=``; the loss made Inf at step ``skip`` (the
    scaler skips that step). Returns the model, the closed watch and plain PyTorch's update ratios
    per step (``{}`` for the skipped one). ``stats_every=1``: a ratio at every step."""
    digits = pytest.importorskip("sklearn.datasets").load_digits()
    x = torch.tensor(digits.data, dtype=torch.float32)
    x, y = (x - x.mean(0)) / (x.std(0) + 1e-6), torch.tensor(digits.target)
    torch.manual_seed(0)
    model = sigmoid_mlp(depth=3, width=32, inputs=64, classes=10, activation=nn.ReLU)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16)
    plain, before = [], {}
    optimizer.register_step_pre_hook(
        lambda o, a, k: before.update({n: p.detach().clone() for n, p in model.named_parameters()})
    )
    optimizer.register_step_post_hook(
        lambda o, a, k: plain.__setitem__(
            -1,
            {
                n: (torch.linalg.vector_norm(p - before[n]) / torch.linalg.vector_norm(p)).item()
                for n, p in model.named_parameters()
            },
        )
    )
    generator = torch.Generator().manual_seed(0)
    with hookviz.watch(model, optimizer=optimizer, scaler=scaler, stats_every=stats_every) as w:
        for step in range(steps):
            index = torch.randint(0, len(x), (64,), generator=generator)
            optimizer.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = F.cross_entropy(model(x[index]), y[index])
            plain.append({})  # the post-hook fills it when the step runs
            scaler.scale(loss * (math.inf if step == skip else 1.0)).backward()
            scaler.step(optimizer)
            scaler.update()
    return model, w, plain


def test_the_watch_view_draws_update_ratio_and_learning_rate_rows_and_marks_skipped_steps():
    from hookviz.colors import SKIPPED_COLOR, UPDATE_RATIO_COLORS
    from hookviz.text import number
    from hookviz.widget.watch_json import live_watch_figure
    from hookviz.widget.watch_rows import SKIPPED_TEXT

    model, w, plain = _digits_with_optimizer()
    assert w.skipped_steps == [3] and plain[3] == {}
    view = hookviz.show(model, (torch.randn(2, 64),), loss_fn=torch.sum)
    view.show_watch(w, step=3)
    rows = view.watch_heatmap["step_rows"]
    assert rows["steps"] == w.steps == list(range(6))
    layers = ["0", "2", "4"]  # sigmoid_mlp's Linear layers, as the heatmap lists their parameters
    ratio_rows = [r for r in rows["rows"] if r["kind"] == "update_ratio"]
    assert [r["label"] for r in ratio_rows] == [f"‖Δw‖/‖w‖ of {layer}" for layer in layers]
    compared = 0
    for row, layer in zip(ratio_rows, layers):
        for step, (color, text) in enumerate(zip(row["colors"], row["text"])):
            if step == 3:
                assert color == NOT_WATCHED_COLOR and SKIPPED_TEXT in text
                continue
            weight, bias = plain[step][f"{layer}.weight"], plain[step][f"{layer}.bias"]
            # three categories, as the update findings judge a layer: every parameter beyond one
            low, high = DEFAULT_THRESHOLDS["update_ratio_low"], DEFAULT_THRESHOLDS["update_ratio_high"]
            category = (
                "large" if min(weight, bias) > high else "small" if max(weight, bias) < low else "healthy"
            )
            assert color == UPDATE_RATIO_COLORS[category]
            assert w.update_ratios(step)[f"{layer}.weight"] == pytest.approx(weight, rel=1e-5)
            assert text == (
                f"step {step}<br>‖Δw‖/‖w‖ of {layer}: {layer}.weight "
                f"{number(w.update_ratios(step)[f'{layer}.weight'])}, {layer}.bias "
                f"{number(w.update_ratios(step)[f'{layer}.bias'])} "
                + {"large": "(too large)", "small": "(too small)", "healthy": "(healthy)"}[category]
            )
            assert w.update_ratios(step)[f"{layer}.bias"] == pytest.approx(bias, rel=1e-5)
            compared += 1
    assert compared == 3 * 5
    [rate] = [r for r in rows["rows"] if r["kind"] == "learning_rate"]
    assert rate["label"] == "lr Adam" and rate["text"][0] == "step 0<br>lr Adam: 0.001"
    assert rate["text"][3].endswith("(skipped)")
    assert rows["skipped"] == {"steps": [3], "color": SKIPPED_COLOR, "text": SKIPPED_TEXT}
    # the legend names the thresholds the categories (and the findings) use
    assert [k["text"] for k in rows["legend"]][:3] == [
        "‖Δw‖/‖w‖ below 1.00e-5: too small",
        "1.00e-5 to 0.1: healthy",
        "above 0.1: too large",
    ]
    # the step on screen says it was skipped; the watch's notes are shown with it
    assert view.watch_view["step_note"] == SKIPPED_TEXT and view.watch_view["notes"] == w.notes
    assert any("update-to-weight ratio" in part for part in view.watch_view["parts"])
    assert view.watch_step(2) and view.watch_view["step_note"] == ""
    # a sane learning rate: no update finding at any step
    assert not [f for s in w.steps for f in w.diagnose(s) if f.kind.startswith("update")]
    # the live figure carries the same rows
    live = live_watch_figure(w.history, "t")
    assert live["step_rows"]["rows"] == rows["rows"]
    # the JS tests read this payload (js/tests/logic.test.js), never a hand-kept copy
    from test_widget import FIXTURES, write_page_fixture

    FIXTURES.mkdir(exist_ok=True)
    (FIXTURES / "watch_rows.json").write_text(
        json.dumps(view.watch_heatmap, allow_nan=False), encoding="utf-8"
    )
    write_page_fixture(view, "watch_page")  # the page with the watch shown, as a saved page holds it


def test_a_ratio_the_watch_did_not_read_says_so_and_is_not_coloured_as_a_value():
    from hookviz.widget.watch_rows import NOT_READ_TEXT

    model, w, plain = _digits_with_optimizer(steps=5, skip=None, stats_every=2)
    assert w.history.full_steps == [0, 2, 4]  # no alarm on this healthy run
    view = hookviz.show(model, (torch.randn(2, 64),), loss_fn=torch.sum)
    view.show_watch(w)
    ratio_rows = [r for r in view.watch_heatmap["step_rows"]["rows"] if r["kind"] == "update_ratio"]
    compared = 0
    for row in ratio_rows:
        for step, (color, text) in enumerate(zip(row["colors"], row["text"])):
            layer = row["label"].removeprefix("‖Δw‖/‖w‖ of ")
            ratio = w.update_ratios(step).get(f"{layer}.weight")
            if step % 2:
                assert ratio is None or math.isnan(ratio)
                assert NOT_READ_TEXT in text and color == NOT_WATCHED_COLOR
            else:
                assert ratio == pytest.approx(plain[step][f"{layer}.weight"], rel=1e-5)
                assert NOT_READ_TEXT not in text and color != NOT_WATCHED_COLOR
            compared += 1
    assert compared == 3 * 5


def test_a_watch_without_optimizer_has_no_step_rows():
    torch.manual_seed(0)
    model = sigmoid_mlp(depth=3, width=8, inputs=4, classes=3, activation=nn.ReLU)
    x, y = torch.randn(32, 4), torch.randint(0, 3, (32,))
    with hookviz.watch(model) as w:
        for _ in range(2):
            F.cross_entropy(model(x), y).backward()
    view = hookviz.show(model, (x,), loss_fn=lambda out: F.cross_entropy(out, y))
    view.show_watch(w)
    assert "step_rows" not in view.watch_heatmap
    assert view.watch_view["notes"] == w.notes and len(w.notes) == 1


class _Branchy(nn.Module):
    """A linear stack with an extra layer used only when asked: its parameters get no gradient on
    the other steps."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
        self.extra = nn.Linear(2, 2)

    def forward(self, x, use_extra=False):
        out = self.body(x)
        return self.extra(out) if use_extra else out


def test_the_leaf_table_follows_the_step_with_the_watchs_statistics():
    torch.manual_seed(0)
    model = _Branchy()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    expected = []  # per step, from plain PyTorch's .grad: {name: (norm, max |grad|, NaN+Inf, zeros)}
    with hookviz.watch(model, stats_every=2) as w:
        for step in range(3):
            optimizer.zero_grad(set_to_none=True)
            model(torch.randn(5, 4), use_extra=step == 0).pow(2).sum().backward()
            expected.append(
                {
                    n: (
                        p.grad.double().norm().item(),
                        p.grad.abs().max().item(),
                        int((~torch.isfinite(p.grad)).sum()),
                        (p.grad == 0).double().mean().item(),
                    )
                    for n, p in model.named_parameters()
                    if p.grad is not None
                }
            )
            optimizer.step()
    session = hookviz.Session(model, (torch.randn(5, 4),), loss_fn=lambda out: out.pow(2).sum())
    view = hookviz.show_watch(w, session)
    names = [n for n, _ in model.named_parameters()]
    compared = 0
    for step in (2, 0, 1):  # the picker moves; the table follows it
        assert view.watch_step(step)
        table = view.watch_view["leaves"]
        assert table["title"] == f"Leaf gradients of the watch: gradient norms, step {step}"
        assert f"Leaf table: gradient norms of each parameter at step {step}" in view.watch_view["parts"][2]
        assert [row["name"] for row in table["rows"]] == names
        for row in table["rows"]:
            values, cells = row["values"], row["text"]
            if row["name"] not in expected[step]:  # extra.* at steps 1 and 2
                assert step != 0 and row["name"].startswith("extra.")
                assert values == dict.fromkeys(values) and cells["norm"] == "no grad"
                compared += 1
                continue
            norm, largest, nonfinite, zeros = expected[step][row["name"]]
            assert values["norm"] == pytest.approx(norm, rel=1e-5)
            assert values["nonfinite"] == nonfinite == 0
            # stats_every=2 counts per stream: step 0 (with extra.*) is one stream's first step,
            # steps 1 and 2 (without) another's: its second (step 2) keeps norms only; the note says why "–"
            if step == 2:
                assert values["max_abs"] is None and cells["max_abs"] == "–"
            else:
                assert values["max_abs"] == pytest.approx(largest, rel=1e-5)
                assert values["zero_fraction"] == pytest.approx(zeros)
            compared += 1
        assert bool(table["note"]) == (step == 2)
        # the root module's box holds every parameter: coloured by all their gradients together
        total = math.sqrt(sum(v[0] ** 2 for v in expected[step].values()))
        assert view.watch_view["node_norms"]["group:"] == pytest.approx(total, rel=1e-5)
    assert compared == 3 * len(names)
    view.hide_watch()
    assert "leaves" not in view.watch_view


def test_the_inspector_says_not_watched_where_the_graph_does():
    """show(watch, on=run): a Sigmoid box (no parameter the watch records) is "not watched" in the
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
    view = hookviz.show(w, on=run)
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
            # the inspector's own norm tables are the run's: the page labels them so
            "run_label": "run",
        }
    op = next(n["id"] for n in view.graph["nodes"] if n["kind"] == "op")
    assert view.select(op)
    assert view.inspector["watch"]["state"] == "not watched"
    assert view.select(linears[0])
    assert view.watch_step(w.steps[0])
    assert view.inspector["watch"]["text"].startswith(f"Watch, step {w.steps[0]}: ")
    view.hide_watch()
    assert "watch" not in view.inspector and view.inspector["id"] == f"module:{linears[0]}"
