"""``hookviz.compare`` and ``hookviz compare``: two real training runs of the same model (same seed,
same batches), one healthy (ReLU) and one whose gradient vanishes (sigmoid); where they part is
checked against plain PyTorch's per-layer ``.grad`` norms of both loops."""

from __future__ import annotations

import html
import json
import math

import pytest
import torch
from digits_runs import digits, train
from test_cli import hookviz_cli
from torch import nn

import hookviz
from hookviz.analysis.compare import ratio
from hookviz.examples import sigmoid_mlp

FACTOR = 10.0


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    folder = tmp_path_factory.mktemp("compare")
    healthy = train(folder / "relu.hookviz", nn.ReLU, depth=8, lr=0.1, steps=20)
    vanishing = train(folder / "sigmoid.hookviz", nn.Sigmoid, depth=8, lr=0.1, steps=20)
    return healthy, vanishing


def plain_partings(a: list[dict], b: list[dict], factor: float) -> dict[str, tuple[int, float]]:
    """Per layer, the first step where plain PyTorch's norms of the two loops differ by more than
    ``factor`` (either way round), and that ratio."""
    found = {}
    for step, (norms_a, norms_b) in enumerate(zip(a, b)):
        for layer in norms_a:
            apart = max(norms_a[layer] / norms_b[layer], norms_b[layer] / norms_a[layer])
            if layer not in found and apart > factor:
                found[layer] = (step, apart)
    return found


def test_compare_finds_the_step_and_layer_where_the_runs_part(pair):
    healthy, vanishing = pair
    comparison = hookviz.compare(healthy.path, vanishing.path)
    assert comparison.names == ("relu", "sigmoid")  # from the file names
    expected = plain_partings(healthy.norms, vanishing.norms, FACTOR)
    assert expected  # the runs do part
    got = {p.layer: (p.step, p.ratio) for p in comparison.partings}
    assert got.keys() == expected.keys()
    for layer, (step, apart) in expected.items():
        assert got[layer][0] == step and got[layer][1] == pytest.approx(apart, rel=1e-5)
    # the first: the earliest step, and of the layers that part then, the one furthest apart
    first_step = min(step for step, _ in expected.values())
    layer = max((ly for ly, (s, _) in expected.items() if s == first_step), key=lambda ly: expected[ly][1])
    first = comparison.first
    assert (first.step, first.layer) == (first_step, layer)
    assert first.a == pytest.approx(healthy.norms[first_step][layer], rel=1e-5)
    assert first.b == pytest.approx(vanishing.norms[first_step][layer], rel=1e-5)
    assert layer == "0"  # the sigmoid's gradient vanishes most at the input
    assert f"first part at step {first_step}, layer '0'" in comparison.summary()
    # each run's findings and onsets, as hookviz reads each file alone
    assert comparison.findings[0] == [] and {f.kind for f in comparison.findings[1]} == {"vanishing"}
    watched = vanishing.watch.diagnose()  # the watch itself, at its last step
    assert [(f.kind, f.modules, f.step) for f in comparison.findings[1]] == [
        (f.kind, f.modules, f.step) for f in watched
    ]
    assert [f.kind for f in comparison.onsets[1]] == [f.kind for f in vanishing.watch.onset()]
    assert comparison.steps == list(range(20))


def test_compare_reads_watches_and_labels_them(pair):
    healthy, vanishing = pair
    from_files = hookviz.compare(healthy.path, vanishing.path)
    live = hookviz.compare(healthy.watch, vanishing.watch)
    assert live.names == ("a", "b")
    assert [(p.step, p.layer) for p in live.partings] == [(p.step, p.layer) for p in from_files.partings]
    assert [p.ratio for p in live.partings] == pytest.approx([p.ratio for p in from_files.partings])
    named = hookviz.compare(healthy.path, vanishing.path, names=["yesterday", "today"])
    assert named.names == ("yesterday", "today") and "yesterday and today first part" in named.summary()
    # a higher factor: fewer layers part, later or never
    strict = hookviz.compare(healthy.path, vanishing.path, factor=1e4)
    expected = plain_partings(healthy.norms, vanishing.norms, 1e4)
    assert {p.layer: p.step for p in strict.partings} == {k: s for k, (s, _) in expected.items()}
    assert len(strict.partings) < len(from_files.partings)


def test_steps_are_aligned_by_step_number(tmp_path):
    # the same loop, one watch keeping every step and one every other: read at the shared numbers
    every = train(tmp_path / "every.hookviz", nn.ReLU, depth=4, steps=8)
    history = hookviz.load(every.path)
    assert history.steps == list(range(8))
    x, y = digits()
    torch.manual_seed(0)
    model = sigmoid_mlp(depth=4, width=32, inputs=64, classes=10, activation=nn.Sigmoid)
    generator = torch.Generator().manual_seed(0)
    plain = {}
    with hookviz.watch(model, every=2) as thinned:
        for step in range(8):
            index = torch.randint(0, len(x), (64,), generator=generator)
            model.zero_grad()
            torch.nn.functional.cross_entropy(model(x[index]), y[index]).backward()
            plain[step] = {
                name: math.hypot(*(p.grad.norm().item() for p in module.parameters(recurse=False)))
                for name, module in model.named_modules()
                if list(module.parameters(recurse=False))
            }
    comparison = hookviz.compare(every.watch, thinned, factor=1.0001)
    assert thinned.steps == comparison.steps and len(thinned.steps) == 4
    # every parting is at a step both kept, with each run's own norm at that step number
    assert comparison.partings
    for p in comparison.partings:
        assert p.step in thinned.steps
        assert p.a == pytest.approx(every.norms[p.step][p.layer], rel=1e-5)
        assert p.b == pytest.approx(plain[p.step][p.layer], rel=1e-5)


def test_figure_and_page(pair, tmp_path):
    healthy, vanishing = pair
    comparison = hookviz.compare(healthy.path, vanishing.path)
    figure = comparison.figure()
    layers = comparison.layers
    assert len(figure.data) == 2 * len(layers)  # one line per run per layer
    first = figure.data[0], figure.data[1]
    assert [t.name for t in first] == ["relu", "sigmoid"]
    assert list(first[0].y) == pytest.approx([n[layers[0]] for n in healthy.norms], rel=1e-5)
    assert list(first[1].y) == pytest.approx([n[layers[0]] for n in vanishing.norms], rel=1e-5)
    axes = [figure.layout[f"yaxis{i if i > 1 else ''}"] for i in range(1, len(layers) + 1)]
    assert [axis.type for axis in axes] == ["log"] * len(layers)
    page = comparison.save_html(tmp_path / "compare.html")
    text = page.read_text()
    assert html.escape(comparison.summary()) in text and "plotly" in text.lower()
    assert "the gradient vanishes" in text  # the sigmoid run's finding


def test_compare_refuses_what_it_cannot_compare(pair, tmp_path):
    healthy, _ = pair
    model = sigmoid_mlp(depth=3, width=4, inputs=4, classes=2)
    run = hookviz.Session(model, (torch.randn(3, 4),), loss_fn=torch.sum).run()
    with pytest.raises(hookviz.HookvizError, match="is a run .* hookviz.diff"):
        hookviz.compare(healthy.path, hookviz.save(run, tmp_path / "run"))
    with pytest.raises(hookviz.HookvizError, match="factor=1 must be a number above 1"):
        hookviz.compare(healthy.path, healthy.path, factor=1)
    with pytest.raises(hookviz.HookvizError, match="names='ab' must be two labels"):
        hookviz.compare(healthy.path, healthy.path, names="ab")
    with pytest.raises(hookviz.FileFormatError):
        bad = tmp_path / "bad.hookviz"
        bad.write_bytes(b"not a hookviz file at all")
        hookviz.compare(healthy.path, bad)


def test_the_command_line_compares_two_files(pair, tmp_path):
    healthy, vanishing = pair
    done = hookviz_cli("compare", healthy.path, vanishing.path, "--json", "-o", tmp_path / "page.html")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    comparison = hookviz.compare(healthy.path, vanishing.path)
    assert data["first"]["step"] == comparison.first.step and data["first"]["layer"] == comparison.first.layer
    assert data["summary"] == comparison.summary() and (tmp_path / "page.html").is_file()
    done = hookviz_cli("compare", healthy.path, vanishing.path)
    assert done.returncode == 0 and comparison.summary()[:40] in done.stdout.replace("\n", " ")
    assert f"Gradient norm per layer at step {comparison.first.step}, where they first part" in done.stdout
    assert ratio(comparison.first.a, comparison.first.b) == comparison.first.ratio


def test_the_watch_view_draws_a_second_run_beside_the_first(pair, tmp_path):
    healthy, vanishing = pair
    widget = hookviz.Widget(None).show_watch_history(hookviz.load(healthy.path))
    assert widget.compare_with(vanishing.path) is widget
    figure = widget.watch_heatmap
    lines = [t for t in figure["data"] if t.get("yaxis") == "y2"]
    dashed = {t["name"]: t for t in lines if t["line"].get("dash") == "dash"}
    solid = {t["name"]: t for t in lines if t["line"].get("dash") != "dash"}
    assert solid and dashed.keys() == {f"{name} (sigmoid)" for name in solid}
    compared = 0
    for name, trace in solid.items():
        other = dashed[f"{name} (sigmoid)"]
        assert other["line"]["color"] == trace["line"]["color"] and other["x"] == trace["x"]
        for step, a, b in zip(trace["x"], trace["y"], other["y"]):
            assert a == pytest.approx(healthy.norms[step][name], rel=1e-3)
            assert b == pytest.approx(vanishing.norms[step][name], rel=1e-3)
            compared += 1
    assert compared == len(solid) * 20
    first = widget.comparison.first
    assert (first.step, first.layer) == (0, "0")
    assert any(s.get("xref") == "x2" and s["x0"] == first.step for s in figure["layout"]["shapes"])
    # moving the step slider keeps the second run; the saved page keeps it too
    assert widget.watch_step(5) and widget.watch_heatmap is figure
    page = widget.save_html(tmp_path / "page.html").read_text()
    state = json.loads(page.split('id="hookviz-state">')[1].split("</script>")[0])
    assert "0 (sigmoid)" in [t.get("name") for t in state["watch_heatmap"]["data"]]
    # a closed watch shown live (hookviz.show(w)): its live view's last update does not undo it
    live = hookviz.show(healthy.watch).compare_with(vanishing.path, names=["relu", "sigmoid"])
    assert "0 (sigmoid)" in [t.get("name") for t in live.watch_heatmap["data"]]
    live.live.wait_shown()
    assert "0 (sigmoid)" in [t.get("name") for t in live.watch_heatmap["data"]]
    with pytest.raises(hookviz.WatchError, match="no watch is shown"):
        hookviz.Widget(None).compare_with(vanishing.path)


def _tiny_run(optimizers_of, steps: int = 3) -> hookviz.Watch:
    """A 3-layer ReLU MLP (seed 0) trained on one fixed batch, watched with ``optimizer=`` the
    optimizers ``optimizers_of(model)`` gives, each stepped in that order every iteration."""
    torch.manual_seed(0)
    model = sigmoid_mlp(depth=3, width=8, inputs=4, classes=3, activation=nn.ReLU)
    x, y = torch.randn(16, 4), torch.randint(0, 3, (16,))
    optimizers = optimizers_of(model)
    with hookviz.watch(model, optimizer=optimizers) as w:
        for _ in range(steps):
            torch.nn.functional.cross_entropy(model(x), y).backward()
            for optimizer in optimizers:
                optimizer.step()
                optimizer.zero_grad()
    return w


def test_steps_are_paired_optimizer_by_optimizer():
    def split(model):
        rest = [*model[2].parameters(), *model[4].parameters()]
        return [torch.optim.SGD(model[0].parameters(), lr=0.1), torch.optim.Adam(rest, lr=0.01)]

    first, second = _tiny_run(split), _tiny_run(split)
    assert first.history.optimizers == ["SGD", "Adam"] * 3
    same = hookviz.compare(first, second, factor=1.0001)
    assert same.steps == first.steps and same.partings == []  # the same run twice never parts
    # stepped the other way round, a step number is another optimizer's step: nothing is paired
    swapped = _tiny_run(lambda model: split(model)[::-1])
    assert swapped.history.optimizers == ["Adam", "SGD"] * 3
    assert hookviz.compare(first, swapped).steps == []
    # one optimizer each, SGD yesterday and Adam today: the two are paired, step by step
    sgd = _tiny_run(lambda model: [torch.optim.SGD(model.parameters(), lr=0.1)])
    adam = _tiny_run(lambda model: [torch.optim.Adam(model.parameters(), lr=0.1)])
    both = hookviz.compare(sgd, adam, factor=1.0001)
    assert both.steps == [0, 1, 2]
    # step 0: the same weights and batch, so the same gradients; they part only after a step
    assert all(p.step > 0 for p in both.partings) and both.partings
