"""The Module tree view of a small model fills its canvas readably: the canonical module's two
boxes (the root, and "(loss)" beside it) are drawn large, with room between them."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import hookviz

sys.path.insert(0, str(Path(__file__).parent))
import harness  # noqa: E402

pytestmark = pytest.mark.e2e


class Canonical(nn.Module):
    def forward(self, x, y, z):
        return 2 * x + 3 * y - 5 * z


def test_a_small_module_tree_is_drawn_large_and_apart(tmp_path):
    harness.require_browser()
    x = torch.tensor([2.0, 3.0], requires_grad=True)
    y = torch.tensor([6.0, 4.0], requires_grad=True)
    z = torch.tensor([1.0, 5.0], requires_grad=True)
    widget = hookviz.show(
        Canonical(), (x, y, z), loss_fn=lambda out: F.mse_loss(out, torch.tensor([9.0, -1.0]))
    )
    widget.set_view("modules")
    path = widget.save_html(tmp_path / "tree.html")
    with harness.chromium_page() as page:
        page.goto(path.as_uri())
        harness.widget_root(page)
        harness.wait_painted(page)
        harness.wait_at_rest(page)
        drawn = page.evaluate(
            """() => { const cy = document.querySelector('.hookviz-widget').cy;
                return { zoom: cy.zoom(), boxes: Object.fromEntries(
                    cy.nodes().map((n) => [n.id(), n.renderedBoundingBox({ includeOverlays: false })])) }; }"""
        )
    root, loss = drawn["boxes"]["group:"], drawn["boxes"]["group:(loss)"]
    # larger than its natural size (at 1.4 the two boxes were a speck in the canvas)
    assert drawn["zoom"] > 2
    gap = max(
        loss["y1"] - root["y2"], root["y1"] - loss["y2"], loss["x1"] - root["x2"], root["x1"] - loss["x2"]
    )
    assert gap >= 20, drawn  # "(loss)" does not touch the root's box (it was 13 px away)
