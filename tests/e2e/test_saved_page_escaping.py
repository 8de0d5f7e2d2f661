"""A page saved from a model whose module names are hostile HTML (``a<!--<script>``, ``</script>``)
opens in headless Chromium and draws its graph: no name ends or comments out the page's scripts."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent))
import harness  # noqa: E402
from test_export_escaping import HOSTILE_NAMES, hostile_widget  # noqa: E402

pytestmark = [pytest.mark.e2e, pytest.mark.browser]


def test_a_page_with_hostile_module_names_is_drawn(tmp_path):
    harness.require_browser()
    widget, _ = hostile_widget()
    path = widget.save_html(tmp_path / "hostile.html")
    with harness.chromium_page(width=1280, height=900) as page:
        errors = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.goto(path.as_uri())
        harness.wait_painted(page, 1)
        drawn = page.evaluate("() => document.querySelector('.hookviz-widget').cy.nodes().map(n => n.id())")
        labels = page.evaluate(
            "() => document.querySelector('.hookviz-widget').cy.nodes().map(n => n.data('label') || '')"
        )
        assert errors == []
        assert len(drawn) > 0
        # each module's box is drawn, under its own name
        assert sum(any(name in label for label in labels) for name in HOSTILE_NAMES) == len(HOSTILE_NAMES), (
            labels
        )
