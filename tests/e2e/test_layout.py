"""Opening a box and reading its edges, on real models in a real JupyterLab and headless Chromium.

GPT-2 (6 layers), BERT and a 20-layer sigmoid MLP, all built from their configs, and a small
ResNet-style CNN written here (conv-bn-relu-conv-bn plus the block's input, three blocks, a final
fc). Measured from what cytoscape drew, in pixels of the graph's box:

- after a box is opened, the share of what it holds (its ops, parameters and closed boxes) whose
  label is drawn at 8 px or more and lies inside the box the graph is drawn in;
- every drawn edge, as its rendered path (end points and bends), passes through no node other
  than its ends and the boxes around them;
- a residual block's ``Add`` has two incoming edges from different sources, ending apart;
- after a box is opened, every edge leaves its source downwards and enters its target from
  above, and its target lies below its source;
- the mouse wheel zooms at a usable speed;
- the view opened with a click is framed again once the side panel has taken its width.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import harness  # noqa: E402

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

ARTIFACTS = Path(__file__).parent / "artifacts"


BERT = """\
import torch, hookviz
from transformers import BertConfig, BertForSequenceClassification
from transformers.utils import logging; logging.set_verbosity_error()
torch.manual_seed(0)
config = BertConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                    intermediate_size=128, vocab_size=500)
ids = torch.randint(0, 500, (2, 16))
w = hookviz.show(BertForSequenceClassification(config), (),
                 kwargs={"input_ids": ids, "labels": torch.tensor([0, 1])}, loss_fn=lambda out: out.loss)
w"""

CNN = """\
import torch, torch.nn as nn, torch.nn.functional as F, hookviz
class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(c, c, 3, padding=1), nn.BatchNorm2d(c)
        self.conv2, self.bn2 = nn.Conv2d(c, c, 3, padding=1), nn.BatchNorm2d(c)
    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(y)) + x)
class ResNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.blocks = nn.Sequential(Block(8), Block(8), Block(8))
        self.fc = nn.Linear(8, 10)
    def forward(self, x):
        return self.fc(self.blocks(F.relu(self.stem(x))).mean((2, 3)))
torch.manual_seed(0)
x, y = torch.randn(4, 3, 16, 16), torch.randint(0, 10, (4,))
w = hookviz.show(ResNet(), (x,), loss_fn=lambda out: F.cross_entropy(out, y))
w"""


# What an opened box shows: of what it holds (not boxes that are open themselves), how many are
# drawn with a label of at least 8 px that lies inside the graph's box.
_OPENED = """([id]) => {
    const cy = document.querySelector('.hookviz-widget').cy;
    const box = cy.getElementById(id);
    const width = cy.width(), height = cy.height(), zoom = cy.zoom();
    const held = box.descendants().filter((n) => !n.isParent());
    const readable = held.filter((n) => {
        const px = parseFloat(n.style('font-size')) * zoom;
        const b = n.renderedBoundingBox({includeLabels: true, includeOverlays: false});
        return px >= 8 && b.x1 >= -0.5 && b.y1 >= -0.5 && b.x2 <= width + 0.5 && b.y2 <= height + 0.5;
    });
    return {open: box.isParent(), held: held.length, readable: readable.length, zoom, width, height};
}"""

# Every drawn edge as the polyline cytoscape renders (model coordinates): its end points and the
# bends of a segments edge (control points of a curved one). A crossing is a piece of it inside the
# body of a node other than its ends and the boxes around them (shrunk by 1 px: an end point
# sits on its node's border). Also where each edge leaves and enters.
_EDGES = """() => {
    const cy = document.querySelector('.hookviz-widget').cy;
    const nodes = cy.nodes().filter((n) => n.visible()).map((n) => [n, n.boundingBox({includeLabels: false,
        includeOverlays: false})]);
    const inside = (p, b) => p.x > b.x1 + 1 && p.x < b.x2 - 1 && p.y > b.y1 + 1 && p.y < b.y2 - 1;
    const crossings = [];
    const edges = cy.edges().map((e) => {
        const points = [e.sourceEndpoint(), ...chunk(e.segmentPoints() || e.controlPoints() || []),
                        e.targetEndpoint()];
        const own = e.source().union(e.target()).union(e.source().ancestors()).union(e.target().ancestors());
        for (const [n, b] of nodes) {
            if (own.contains(n)) continue;
            let hit = false;
            for (let i = 0; i + 1 < points.length && !hit; i++) {
                const [a, c] = [points[i], points[i + 1]];
                const steps = Math.max(2, Math.ceil(Math.hypot(c.x - a.x, c.y - a.y) / 2));
                for (let k = 0; k <= steps && !hit; k++)
                    hit = inside({x: a.x + (c.x - a.x) * k / steps, y: a.y + (c.y - a.y) * k / steps}, b);
            }
            if (hit) crossings.push(`${e.id()} through ${n.id()}`);
        }
        const s = e.source().position(), t = e.target().position();
        return {id: e.id(), source: e.source().id(), target: e.target().id(), points,
                leaves_down: points[0].y >= s.y, enters_from_above: points[points.length - 1].y <= t.y,
                target_below: t.y > s.y, routed: e.style('curve-style')};
    });
    function chunk(p) { return Array.isArray(p) ? p : []; }
    return {edges, crossings};
}"""


@pytest.fixture
def lab(lab_folder):
    pytest.importorskip("transformers")
    for name, source in {"gpt2": harness.GPT2, "bert": BERT, "cnn": CNN, "mlp": harness.MLP}.items():
        harness.write_notebook(lab_folder.root / f"{name}.ipynb", [source])
    return lab_folder


def open_model(page, lab, name: str):
    harness.open_notebook(page, lab, name)
    harness.run_cell(page, 0)
    root = harness.widget_root(page)
    root.scroll_into_view_if_needed()
    harness.wait_painted(page, 1, timeout=120_000)
    page.wait_for_function(
        "() => document.querySelector('.hookviz-widget').hookviz.model.get('details_pending') === false",
        timeout=120_000,
        polling=100,
    )
    page.wait_for_timeout(300)
    return root


def settle(page) -> None:
    """Wait until no node or viewport animation runs and the view has kept its size for a moment
    (the side panel a click opens narrows the graph)."""
    page.wait_for_function(
        "() => { const cy = document.querySelector('.hookviz-widget').cy;"
        " return !cy.animated() && !cy.nodes().some(n => n.animated()); }",
        timeout=30_000,
    )
    page.wait_for_timeout(500)
    page.wait_for_function(
        "() => { const cy = document.querySelector('.hookviz-widget').cy;"
        " return !cy.animated() && !cy.nodes().some(n => n.animated()); }",
        timeout=30_000,
    )


def open_box(page, group: str) -> dict:
    """Click a closed box (panned into view first, as a user drags the view to it) and wait
    until it is open and the view settled; report what it shows (``_OPENED``)."""
    page.evaluate(
        "(id) => { const cy = document.querySelector('.hookviz-widget').cy;"
        " const b = cy.getElementById(id).renderedBoundingBox();"
        " if (b.x1 < 0 || b.y1 < 0 || b.x2 > cy.width() || b.y2 > cy.height()) cy.center(cy.getElementById(id)); }",
        group,
    )
    painted = harness.paint_count(page)
    harness.click_node(page, group)
    page.wait_for_function(
        "(id) => document.querySelector('.hookviz-widget').cy.getElementById(id).isParent()",
        arg=group,
        timeout=30_000,
    )
    harness.wait_painted(page, painted + 1, kind="layout")
    settle(page)
    return page.evaluate(_OPENED, [group])


def assert_readable_when_opened(report: dict, group: str) -> None:
    assert report["open"] and report["held"] >= 3, (group, report)
    share = report["readable"] / report["held"]
    print(f"opened {group}: {report}")
    assert share >= 0.8, f"{group}: {report['readable']} of {report['held']} readable and in view: {report}"


def assert_edges_clear(page, what: str) -> dict:
    drawn = page.evaluate(_EDGES)
    assert len(drawn["edges"]) >= 10, what
    assert drawn["crossings"] == [], f"{what}: {len(drawn['crossings'])} crossings: {drawn['crossings'][:10]}"
    return drawn


def assert_downward(drawn: dict, what: str) -> None:
    """Every edge leaves its source from below, enters its target from above, and its target is
    drawn lower: no edge reads backwards."""
    backwards = [
        e["id"]
        for e in drawn["edges"]
        if not (e["target_below"] and e["leaves_down"] and e["enters_from_above"])
    ]
    assert backwards == [], (
        f"{what}: {len(backwards)} of {len(drawn['edges'])} edges read backwards: {backwards}"
    )


def assert_panels_readable(page, name: str) -> None:
    """The panels around the graph on this model: the chart keeps >= 200 px inside the widget, and
    every text (>= 4.5) and box title (>= 3) is readable in JupyterLab Light and in Dark."""
    harness.assert_chart_fits(page, f"{name}: chart")
    harness.assert_contrast(page, 0, f"{name}: JupyterLab Light", ARTIFACTS / f"layout_{name}_light.png")
    harness.switch_theme(page, "JupyterLab Dark")
    try:
        harness.assert_chart_fits(page, f"{name}: chart in Dark")
        harness.assert_contrast(page, 0, f"{name}: JupyterLab Dark", ARTIFACTS / f"layout_{name}_dark.png")
    finally:
        harness.switch_theme(page, "JupyterLab Light")


def test_gpt2_attention_opens_readable_with_clear_edges_and_a_usable_wheel(lab):
    ARTIFACTS.mkdir(exist_ok=True)
    with (
        harness.chromium_page(width=1280, height=1100) as page,
        harness.diagnostics(page, ARTIFACTS / "layout_gpt2_failure.png") as console,
    ):
        root = open_model(page, lab, "gpt2.ipynb")
        assert_edges_clear(page, "GPT-2 first view")
        full_width = page.evaluate("() => document.querySelector('.hookviz-widget').cy.width()")

        # The click that opens h.0 also opens the side panel: the frame is taken in the narrower view.
        block = open_box(page, "group:transformer.h.0")
        assert page.evaluate("() => document.querySelector('.hookviz-widget').cy.width()") < full_width - 200
        assert block["readable"] == block["held"], block
        attention = open_box(page, "group:transformer.h.0.attn")
        root.screenshot(path=str(ARTIFACTS / "layout_gpt2_attn_open.png"))
        assert attention["held"] >= 30, attention
        assert_readable_when_opened(attention, "h.0.attn")
        drawn = assert_edges_clear(page, "GPT-2 with h.0.attn open")
        assert_downward(drawn, "GPT-2 with h.0.attn open")
        assert sum(e["routed"] == "segments" for e in drawn["edges"]) >= 5

        # Six notches of a mouse wheel (100 px each) zoom out by more than half.
        graph = page.evaluate(
            "() => { const r = document.querySelector('.hookviz-widget .hv-cy').getBoundingClientRect();"
            " return {x: r.left + r.width / 2, y: r.top + r.height / 2}; }"
        )
        page.mouse.move(graph["x"], graph["y"])
        before = attention["zoom"]
        for _ in range(6):
            page.mouse.wheel(0, 100)
            page.wait_for_timeout(30)
        after = page.evaluate("() => document.querySelector('.hookviz-widget').cy.zoom()")
        assert after < before / 2, (before, after)
        for _ in range(6):
            page.mouse.wheel(0, -100)
            page.wait_for_timeout(30)
        back = page.evaluate("() => document.querySelector('.hookviz-widget').cy.zoom()")
        assert abs(back - before) < 0.02 * before, (before, after, back)
        assert_panels_readable(page, "gpt2")
        assert not [line for line in console if line.startswith("pageerror")]


def test_bert_attention_self_opens_readable(lab):
    with (
        harness.chromium_page(width=1280, height=1100) as page,
        harness.diagnostics(page, ARTIFACTS / "layout_bert_failure.png") as console,
    ):
        root = open_model(page, lab, "bert.ipynb")
        report = open_box(page, "group:bert.encoder.layer.1.attention.self")
        root.screenshot(path=str(ARTIFACTS / "layout_bert_self_open.png"))
        assert report["held"] >= 25, report
        assert_readable_when_opened(report, "layer.1.attention.self")
        assert_downward(assert_edges_clear(page, "BERT with attention.self open"), "BERT")
        assert_panels_readable(page, "bert")
        assert not [line for line in console if line.startswith("pageerror")]


def test_resnet_skip_is_a_second_input_of_add_and_opening_keeps_edges_downward(lab):
    with (
        harness.chromium_page(width=1280, height=1100) as page,
        harness.diagnostics(page, ARTIFACTS / "layout_cnn_failure.png") as console,
    ):
        root = open_model(page, lab, "cnn.ipynb")
        root.screenshot(path=str(ARTIFACTS / "layout_cnn_first_view.png"))
        drawn = assert_edges_clear(page, "CNN first view")
        # Each block's Add: one input from its bn2, one from the block's input (the skip).
        adds = {}
        for e in drawn["edges"]:
            if e["target"].startswith("AddBackward"):
                adds.setdefault(e["target"], []).append(e)
        assert len(adds) == 3, sorted(adds)
        for add, incoming in adds.items():
            assert len(incoming) == 2 and incoming[0]["source"] != incoming[1]["source"], (add, incoming)
            a, b = (edge["points"][-1] for edge in incoming)
            assert abs(a["x"] - b["x"]) + abs(a["y"] - b["y"]) >= 4, f"{add}: both inputs end at {a}"

        report = open_box(page, "group:blocks.0.bn1")
        root.screenshot(path=str(ARTIFACTS / "layout_cnn_bn1_open.png"))
        assert_readable_when_opened(report, "blocks.0.bn1")
        assert_downward(assert_edges_clear(page, "CNN with bn1 open"), "CNN with bn1 open")
        assert_panels_readable(page, "cnn")
        assert not [line for line in console if line.startswith("pageerror")]


def test_deep_mlp_edges_clear_and_an_opened_layer_readable(lab):
    with (
        harness.chromium_page(width=1280, height=1100) as page,
        harness.diagnostics(page, ARTIFACTS / "layout_mlp_failure.png") as console,
    ):
        root = open_model(page, lab, "mlp.ipynb")
        root.screenshot(path=str(ARTIFACTS / "layout_mlp_first_view.png"))
        assert_edges_clear(page, "MLP first view")
        report = open_box(page, "group:20")
        root.screenshot(path=str(ARTIFACTS / "layout_mlp_20_open.png"))
        assert_readable_when_opened(report, "20")
        assert_downward(assert_edges_clear(page, "MLP with 20 open"), "MLP with 20 open")
        assert_panels_readable(page, "mlp")
        assert not [line for line in console if line.startswith("pageerror")]
