"""No edge runs through a module box's title, on real models drawn in headless Chromium.

GPT-2 (6 layers, from its config) and a residual CNN (three conv-bn-relu blocks with their skip)
are saved as pages (``Widget.save_html``: the notebook's own bundle and state, no kernel) and
opened; boxes are opened by clicking them, and "Expand all" opens every one. In each view, every
open box's title is read as cytoscape drew it (its label's bounding box) and every edge as drawn
(its rendered points: the polyline of a straight or segments edge, sampled along a curved one),
and no point of an edge may lie inside a title.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).parent))
import harness  # noqa: E402

import hookviz  # noqa: E402

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

ARTIFACTS = Path(__file__).parent / "artifacts"

# Every edge against every open box's title, in model coordinates. An edge's points come from
# cytoscape's own rendering (rscratch.allpts: end points and bends of a straight or segments edge,
# the control points of a bezier one, which is sampled along its curve); a crossing is a point of
# it inside a title's box shrunk by 0.5 px.
_TITLES_AND_EDGES = """() => {
    const cy = document.querySelector('.hookviz-widget').cy;
    const titles = cy.nodes().filter((n) => n.isParent() && n.visible() && n.data('label')).map((n) =>
        [n, n.boundingBox({includeNodes: false, includeEdges: false, includeLabels: true, includeOverlays: false})]);
    const points = (e) => {
        const rs = e._private.rscratch;
        const p = rs.allpts || [];
        const out = [];
        if (['bezier', 'multibezier', 'self', 'compound'].includes(rs.edgeType)) {
            for (let i = 0; i + 5 < p.length; i += 4)
                for (let k = 0; k <= 40; k++) {
                    const t = k / 40, u = 1 - t;
                    out.push({x: u * u * p[i] + 2 * u * t * p[i + 2] + t * t * p[i + 4],
                              y: u * u * p[i + 1] + 2 * u * t * p[i + 3] + t * t * p[i + 5]});
                }
        } else {
            for (let i = 0; i + 3 < p.length; i += 2) {
                const steps = Math.max(2, Math.ceil(Math.hypot(p[i + 2] - p[i], p[i + 3] - p[i + 1])));
                for (let k = 0; k <= steps; k++)
                    out.push({x: p[i] + (p[i + 2] - p[i]) * k / steps, y: p[i + 1] + (p[i + 3] - p[i + 1]) * k / steps});
            }
        }
        return out;
    };
    const crossings = [];
    let pairs = 0, sampled = 0, empty = 0;
    cy.edges().filter((e) => e.visible()).forEach((e) => {
        const drawn = points(e);
        if (!drawn.length) empty++;
        sampled += drawn.length;
        for (const [n, b] of titles) {
            pairs++;
            const hit = drawn.find((q) => q.x > b.x1 + 0.5 && q.x < b.x2 - 0.5 && q.y > b.y1 + 0.5 && q.y < b.y2 - 0.5);
            if (hit) crossings.push(`${e.id()} through the title of ${n.id()} (${n.data('label')}) at ` +
                                    `${hit.x.toFixed(1)}, ${hit.y.toFixed(1)}`);
        }
    });
    return {titles: titles.map(([n]) => n.data('label')), edges: cy.edges().length, pairs, sampled, empty, crossings};
}"""


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


def _gpt2_page(folder: Path) -> Path:
    transformers = pytest.importorskip("transformers")
    transformers.utils.logging.set_verbosity_error()
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=6, n_embd=128, n_head=4, vocab_size=1000)
    ids = torch.randint(0, 1000, (2, 32))
    widget = hookviz.show(
        transformers.GPT2LMHeadModel(config),
        (),
        kwargs={"input_ids": ids, "labels": ids},
        loss_fn=lambda out: out.loss,
    )
    return widget.save_html(folder / "gpt2.html")


def _resnet_page(folder: Path) -> Path:
    torch.manual_seed(0)
    x, y = torch.randn(4, 3, 16, 16), torch.randint(0, 10, (4,))
    widget = hookviz.show(ResNet(), (x,), loss_fn=lambda out: F.cross_entropy(out, y))
    return widget.save_html(folder / "resnet.html")


def _settle(page) -> None:
    page.wait_for_function(
        "() => { const cy = document.querySelector('.hookviz-widget').cy;"
        " return !cy.animated() && !cy.nodes().some(n => n.animated()); }",
        timeout=30_000,
    )


def _open_box(page, group: str) -> None:
    """Click a closed box (brought to the middle of the view first) and wait for its new layout."""
    page.evaluate(
        "(id) => { const cy = document.querySelector('.hookviz-widget').cy; cy.center(cy.getElementById(id)); }",
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
    _settle(page)


def _assert_titles_clear(page, what: str, picture: Path) -> dict:
    page.locator(".hookviz-widget").screenshot(path=str(picture))
    report = page.evaluate(_TITLES_AND_EDGES)
    print(
        f"{what}: {len(report['titles'])} titles x {report['edges']} edges = {report['pairs']} pairs, "
        f"{report['sampled']} edge points"
    )
    assert report["titles"] and report["edges"] >= 5 and report["empty"] == 0, (what, report)
    assert report["pairs"] == len(report["titles"]) * report["edges"], (what, report)
    assert report["crossings"] == [], f"{what}: {report['crossings']}"
    return report


def _views(page_file: Path, boxes: list[str], name: str) -> int:
    """Open the saved page, then each box of ``boxes`` in turn, then "Expand all"; assert no edge
    crosses a title in each view; returns the number of (edge, title) pairs compared."""
    compared = 0
    with (
        harness.chromium_page(width=1280, height=900) as page,
        harness.diagnostics(page, ARTIFACTS / f"titles_{name}_failure.png") as console,
    ):
        page.goto(page_file.as_uri())
        harness.wait_painted(page, 1)
        _settle(page)
        compared += _assert_titles_clear(page, f"{name} first view", ARTIFACTS / f"titles_{name}_first.png")[
            "pairs"
        ]
        for box in boxes:
            _open_box(page, box)
            shot = ARTIFACTS / f"titles_{name}_{box.removeprefix('group:')}.png"
            compared += _assert_titles_clear(page, f"{name} with {box} open", shot)["pairs"]
        painted = harness.paint_count(page)
        page.locator(".hookviz-widget .hv-expand-all").click()
        harness.wait_painted(page, painted + 1, kind="layout")
        _settle(page)
        report = _assert_titles_clear(page, f"{name}, every box open", ARTIFACTS / f"titles_{name}_all.png")
        compared += report["pairs"]
        assert len(report["titles"]) >= 8, report["titles"]
        assert not [line for line in console if line.startswith("pageerror")]
    return compared


def test_no_edge_crosses_a_box_title_in_gpt2(tmp_path):
    harness.require_browser()
    ARTIFACTS.mkdir(exist_ok=True)
    page_file = _gpt2_page(tmp_path)
    boxes = ["group:transformer.h.0", "group:transformer.h.0.attn", "group:transformer.h.0.mlp"]
    compared = _views(page_file, boxes, "gpt2")
    assert compared >= 1000, compared


def test_no_edge_crosses_a_box_title_in_a_residual_stack(tmp_path):
    harness.require_browser()
    ARTIFACTS.mkdir(exist_ok=True)
    page_file = _resnet_page(tmp_path)
    compared = _views(page_file, ["group:blocks.0", "group:blocks.1"], "resnet")
    assert compared >= 300, compared
