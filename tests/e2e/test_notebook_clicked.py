"""Notebook 01 run both ways: its "click" steps done by clicking first, then the rest of its cells.

Run every cell above the widget's markdown, do what cell 16 says by clicking (the node **Sub**,
``grad_inputs[0]`` ``grad + 888888``, ``grad_inputs[1]`` ``grad - 777777``, **Re-run backward**),
then run the rest: cell 19 applies the same edits from Python, which replace the clicked ones (one
edit per site), so its asserts hold and x's grad is the legacy hook's [1777792, 1777764], not the
edits stacked.
"""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import nbformat
import pytest

sys.path.insert(0, str(Path(__file__).parent))
import harness  # noqa: E402

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

ARTIFACTS = Path(__file__).parent / "artifacts"
NOTEBOOK = harness.REPO / "notebooks" / "01_module_hooks.ipynb"
LEAF_AFTER = '.hookviz-widget tr[data-leaf="{}"] .hv-leaf-after'


@pytest.fixture
def lab(lab_folder):
    shutil.copy(NOTEBOOK, lab_folder.root / NOTEBOOK.name)
    return lab_folder


def _cell_after_the_widget() -> int:
    """Index of the first cell after the one that shows the widget (the markdown of cell 18)."""
    cells = nbformat.read(NOTEBOOK, as_version=4).cells
    shown = [
        i for i, c in enumerate(cells) if c.cell_type == "code" and c.source.rstrip().endswith("\nwidget")
    ]
    assert len(shown) == 1, "notebook 01 shows its widget in one cell ending with `widget`"
    return shown[0] + 1


def _run_menu(page, item: str) -> None:
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(f"^{re.escape(item)}$")).click()


def _leaf_shows(page, name: str, text: str) -> None:
    page.wait_for_function(
        "([selector, text]) => document.querySelector(selector)?.textContent.includes(text)",
        arg=[LEAF_AFTER.format(name), text],
        timeout=60_000,
    )


def test_notebook_01_clicked_first_then_run(lab):
    after_widget = _cell_after_the_widget()
    ARTIFACTS.mkdir(exist_ok=True)
    with (
        harness.chromium_page() as page,
        harness.diagnostics(page, ARTIFACTS / "notebook_clicked_failure.png") as console,
    ):
        harness.open_notebook(page, lab, NOTEBOOK.name)
        cells = page.locator(".jp-Notebook .jp-Cell")
        cells.nth(after_widget).click()
        _run_menu(page, "Run All Above Selected Cell")
        root = harness.widget_root(page)
        root.scroll_into_view_if_needed()
        harness.wait_painted(page)
        _leaf_shows(page, "x", "[16, -12]")

        # Cell 16's steps, by clicking. The graph labels the node "Sub", as the text says.
        assert page.evaluate(
            "() => document.querySelector('.hookviz-widget').cy.getElementById('SubBackward0_0').data('label')"
        ).startswith("Sub")
        harness.click_node(page, "SubBackward0_0")
        page.wait_for_function(
            "() => document.querySelector('.hookviz-widget .hv-inspector .hv-title')?.textContent.includes('SubBackward0')",
            timeout=30_000,
        )
        harness.apply_edit(root, page, "grad_inputs[0]", "grad + 888888", 1)
        harness.apply_edit(root, page, "grad_inputs[1]", "grad - 777777", 2)
        root.locator(".hv-rerun").click()
        _leaf_shows(page, "x", "[1777792, 1777764]")

        # Then the rest of the notebook, from the cell after the widget's.
        cells.nth(after_widget).click()
        _run_menu(page, "Run Selected Cell and All Below")
        page.wait_for_function(
            """() => {
                const prompts = document.querySelectorAll('.jp-Notebook .jp-CodeCell .jp-InputPrompt');
                return /\\[\\d+\\]/.test(prompts[prompts.length - 1]?.textContent || '');
            }""",
            timeout=180_000,
        )
        errors = page.locator(".jp-RenderedText[data-mime-type='application/vnd.jupyter.error']")
        assert errors.count() == 0, errors.all_inner_texts()
        # The cell's edits replaced the clicked ones: two edits, the legacy hook's numbers.
        assert root.locator(".hv-edits-list li").count() == 2
        compared = 0
        for name, values in (
            ("x", "[1777792, 1777764]"),
            ("y", "[2666688, 2666646]"),
            ("z", "[-3888925, -3888855]"),
        ):
            assert values in page.locator(LEAF_AFTER.format(name)).inner_text(), name
            compared += 1
        assert compared == 3
        assert root.locator(".hv-error:not(:empty)").count() == 0
        assert not [line for line in console if line.startswith("pageerror")]
        root.screenshot(path=str(ARTIFACTS / "notebook_01_clicked.png"))
