"""The notebooks' "click X" instructions done where a person clicks: on the text they name.

Each notebook that tells the reader to click runs top to bottom in JupyterLab (Run All Cells) and
the test clicks, on the notebook's own widget, the middle of the drawn text of what the sentence
names (the label's rendered bounding box, not the node's centre): notebook 01's "Click the box's
title" (the **Canonical (root)** title, which cytoscape draws above the box's body), its "click the
node **Sub**", notebook 00's "Click a Node", 02's "Click a node inside ``fc1``" and 04's "click a
Node". A saved page (``save_html``) is clicked on the same title.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).parent))
import harness  # noqa: E402

pytestmark = pytest.mark.e2e

ARTIFACTS = Path(__file__).parent / "artifacts"
NOTEBOOKS = ["00_quickstart", "01_module_hooks", "02_forward_hooks", "04_saved_tensors"]
TITLE = ".hookviz-widget .hv-inspector .hv-title"


class Canonical(nn.Module):
    def forward(self, x, y, z):
        return 2 * x + 3 * y - 5 * z


@pytest.fixture
def lab(lab_folder):
    """The teaching notebooks, copied into this test's folder of the session's JupyterLab."""
    for name in NOTEBOOKS:
        shutil.copy(harness.REPO / "notebooks" / f"{name}.ipynb", lab_folder.root / f"{name}.ipynb")
    return lab_folder


def _label_point(page, element_id: str) -> dict:
    """The page coordinates of the middle of an element's drawn label (its text), and whether
    that point lies outside the element's body (a box title does)."""
    harness.wait_at_rest(page)
    point = page.evaluate(
        """(id) => {
            const root = document.querySelector('.hookviz-widget');
            const el = root.cy.getElementById(id);
            if (el.empty()) return null;
            const text = el.renderedBoundingBox({ includeNodes: false, includeEdges: false,
                                                  includeLabels: true, includeOverlays: false });
            const body = el.renderedBoundingBox({ includeLabels: false, includeOverlays: false });
            const r = root.cy.container().getBoundingClientRect();
            const x = (text.x1 + text.x2) / 2, y = (text.y1 + text.y2) / 2;
            const outside = x < body.x1 || x > body.x2 || y < body.y1 || y > body.y2;
            return { x: r.left + x, y: r.top + y, w: text.w, outside };
        }""",
        element_id,
    )
    if point is None:
        raise AssertionError(f"{element_id!r} is not drawn")
    assert point["w"] > 0, f"{element_id!r} has no drawn label"
    return point


def _click_text(page, element_id: str) -> dict:
    point = _label_point(page, element_id)
    page.mouse.click(point["x"], point["y"])
    return point


def _wait_title(page, text: str) -> None:
    page.wait_for_function(
        "([selector, text]) => document.querySelector(selector)?.textContent.includes(text)",
        arg=[TITLE, text],
        timeout=30_000,
    )


def _run_notebook(page, lab: str, name: str):
    harness.open_notebook(page, lab, f"{name}.ipynb")
    harness.run_all_cells(page)
    # every cell done, as a reader who ran the notebook clicks: a later cell's output or selection
    # must not move the graph or change the inspector under the click
    page.wait_for_function(
        """() => {
            const prompts = document.querySelectorAll('.jp-Notebook .jp-CodeCell .jp-InputPrompt');
            return /\\[\\d+\\]/.test(prompts[prompts.length - 1]?.textContent || '');
        }""",
        timeout=180_000,
    )
    root = harness.widget_root(page)
    root.scroll_into_view_if_needed()
    harness.wait_painted(page)
    return root


def _first_op(page, where: str = "", label: str = "") -> str:
    """The id of the first drawn op (not a leaf) whose module starts with ``where`` and whose
    label matches the regular expression ``label``."""
    found = page.evaluate(
        """([where, label]) => document.querySelector('.hookviz-widget').cy
            .nodes('[!isGroup][kind != "leaf"]')
            .filter((n) => (n.parent().data('module') ?? '').startsWith(where))
            .filter((n) => new RegExp(label).test(n.data('label')))
            .map((n) => n.id())[0] ?? null""",
        [where, label],
    )
    assert found, f"no op drawn in {where!r}"
    return found


def test_notebook_01_box_title_and_sub(lab):
    ARTIFACTS.mkdir(exist_ok=True)
    with (
        harness.chromium_page() as page,
        harness.diagnostics(page, ARTIFACTS / "clicks_01_failure.png") as console,
    ):
        root = _run_notebook(page, lab, "01_module_hooks")
        labels = page.evaluate(
            "() => document.querySelector('.hookviz-widget').cy.getElementById('group:').data('label')"
        )
        assert labels == "Canonical (root)"
        # "Click the box's title": the title text, which is drawn above the box's body.
        point = _click_text(page, "group:")
        assert point["outside"], "the title is drawn over the body: this click would not test the title"
        _wait_title(page, "Canonical (root)")
        page.wait_for_selector(".hookviz-widget .hv-hook-views .hv-hook-legacy", timeout=30_000)
        # "click the node Sub": on its label.
        _click_text(page, "SubBackward0_0")
        _wait_title(page, "SubBackward0")
        assert root.locator(".hv-error:not(:empty)").count() == 0
        assert not [line for line in console if line.startswith("pageerror")]


@pytest.mark.parametrize(
    ("notebook", "module", "label", "section"),
    [
        ("00_quickstart", "", "", "grad"),  # "Click a Node to see its gradients and hooks"
        ("02_forward_hooks", "fc1", "", "forward value"),  # "Click a node inside fc1 ... forward value"
        # "click a Node: ... its saved tensors": a matrix product saves its operands
        ("04_saved_tensors", "", "^(Addmm|Mm|Bmm|Mul)", "saved tensors"),
    ],
)
def test_click_a_node_as_the_notebook_says(lab, notebook, module, label, section):
    ARTIFACTS.mkdir(exist_ok=True)
    with (
        harness.chromium_page() as page,
        harness.diagnostics(page, ARTIFACTS / f"clicks_{notebook}_failure.png"),
    ):
        root = _run_notebook(page, lab, notebook)
        if module:
            # the notebook's cell opens fc1 (select("module:fc1")): its ops are drawn
            page.wait_for_function(
                "(m) => document.querySelector('.hookviz-widget').cy.nodes('[!isGroup]')"
                ".some((n) => n.parent().data('module') === m)",
                arg=module,
                timeout=30_000,
            )
        op = _first_op(page, module, label)
        _click_text(page, op)
        _wait_title(page, op.rsplit("_", 1)[0])
        page.wait_for_function(
            "(text) => [...document.querySelectorAll('.hookviz-widget .hv-inspector h4')]"
            ".some((h) => h.textContent.includes(text))",
            arg=section,
            timeout=30_000,
        )
        assert root.locator(".hv-error:not(:empty)").count() == 0


def test_saved_page_box_title_selects_the_box(tmp_path):
    harness.require_browser()
    import hookviz

    model = Canonical()
    x = torch.tensor([2.0, 3.0], requires_grad=True)
    y = torch.tensor([6.0, 4.0], requires_grad=True)
    z = torch.tensor([1.0, 5.0], requires_grad=True)
    widget = hookviz.show(
        model, (x, y, z), loss_fn=lambda out: torch.nn.functional.mse_loss(out, torch.tensor([9.0, -1.0]))
    )
    path = widget.save_html(tmp_path / "saved.html")
    with (
        harness.chromium_page() as page,
        harness.diagnostics(page, ARTIFACTS / "clicks_saved_failure.png") as console,
    ):
        page.goto(path.as_uri())
        harness.widget_root(page)
        harness.wait_painted(page)
        point = _click_text(page, "group:")
        assert point["outside"]
        _wait_title(page, "Canonical (root)")
        assert not [line for line in console if line.startswith("pageerror")]
