"""The first teaching notebook in a real JupyterLab and headless Chromium.

Open ``notebooks/01_module_hooks.ipynb`` as a student would, run all cells from the Run menu, and read
the leaf grads from the widget on the page: after the notebook's edits of SubBackward0's grad_inputs
(``grad + 888888`` / ``grad - 777777``) x's grad is [1777792, 1777764], as the notebook's plain legacy
hook computes. Uses the browser harness of ``tests/e2e/harness.py``.
"""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

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


def _run_all_cells(page) -> None:
    page.locator(".jp-Notebook .jp-Cell").first.click()
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Run All Cells$")).click()


def test_module_hooks_notebook_in_jupyterlab(lab):
    ARTIFACTS.mkdir(exist_ok=True)
    with (
        harness.chromium_page() as page,
        harness.diagnostics(page, ARTIFACTS / "notebook_failure.png") as console,
    ):
        harness.open_notebook(page, lab, NOTEBOOK.name)
        _run_all_cells(page)
        root = harness.widget_root(page)
        root.scroll_into_view_if_needed()
        # The cell after the widget's applies the two edits and re-runs; the page then shows the new grads.
        page.wait_for_function(
            "(selector) => document.querySelector(selector)?.textContent.includes('1777792, 1777764')",
            arg=LEAF_AFTER.format("x"),
            timeout=120_000,
        )
        # Every cell ran: Run All stops at the first error, so the last code cell gets a number only
        # when none failed. Then no error output anywhere.
        page.wait_for_function(
            """() => {
                const prompts = document.querySelectorAll('.jp-Notebook .jp-CodeCell .jp-InputPrompt');
                return /\\[\\d+\\]/.test(prompts[prompts.length - 1]?.textContent || '');
            }""",
            timeout=120_000,
        )
        assert (
            page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
            .filter(has_text="Traceback")
            .count()
            == 0
        )
        assert page.locator(".jp-RenderedText[data-mime-type='application/vnd.jupyter.error']").count() == 0
        assert "[1777792, 1777764]" in page.locator(LEAF_AFTER.format("x")).inner_text()
        assert "[2666688, 2666646]" in page.locator(LEAF_AFTER.format("y")).inner_text()
        assert "[-3888925, -3888855]" in page.locator(LEAF_AFTER.format("z")).inner_text()
        assert root.locator(".hv-error:not(:empty)").count() == 0
        assert not [line for line in console if line.startswith("pageerror")]

        page.wait_for_timeout(300)
        root.screenshot(path=str(ARTIFACTS / "notebook_01_widget.png"))
        page.screenshot(path=str(ARTIFACTS / "notebook_01_page.png"))
