"""The widget in Notebook 7 (``jupyter notebook``), as the docs promise beside JupyterLab (docs/guides/widget.md).

Open the canonical example in the classic-looking Notebook 7 front end, run the cell, click
SubBackward0 on the canvas, edit its ``grad_inputs[0]`` to ``grad + 888888``, re-run, and read x's
new grad from the page: [1777792, 1777764], what the same hook gives in plain PyTorch
(``tests/test_widget.py`` checks those numbers against PyTorch).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import harness  # noqa: E402

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

ARTIFACTS = Path(__file__).parent / "artifacts"


@pytest.fixture
def notebook_server(lab_folder):
    """This test's folder in the shared server, whose ``notebook`` server extension serves Notebook
    7's pages (``/notebooks/<path>``, the pages ``jupyter notebook`` serves) beside JupyterLab's."""
    pytest.importorskip("notebook", minversion="7")
    harness.write_notebook(lab_folder.root / "canonical.ipynb", [harness.CANONICAL])
    return lab_folder


def test_edit_and_rerun_in_notebook7(notebook_server):
    ARTIFACTS.mkdir(exist_ok=True)
    with (
        harness.chromium_page() as page,
        harness.diagnostics(page, ARTIFACTS / "notebook7_failure.png") as console,
    ):
        page.goto(
            f"{notebook_server.base}/notebooks/{notebook_server.path}/canonical.ipynb?token={harness.TOKEN}"
        )
        page.wait_for_selector(".jp-Notebook .jp-Cell", state="visible", timeout=60_000)
        # Notebook 7 shows the kernel's state in its toolbar; a cell run before it is idle is lost.
        page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status=idle]", timeout=90_000)
        harness.run_cell(page, 0)
        root = harness.widget_root(page)
        harness.wait_painted(page, 1)
        assert "[16, -12]" in root.locator('tr[data-leaf="x"] .hv-leaf-after').inner_text()
        harness.click_node(page, "SubBackward0_0")
        page.wait_for_function(
            "() => document.querySelector('.hookviz-widget .hv-inspector .hv-title')?.textContent.includes('SubBackward0')",
            timeout=30_000,
        )
        root.locator(".hv-site").select_option("grad_inputs[0]")
        root.locator(".hv-expr").fill("grad + 888888")
        root.locator(".hv-apply").click()
        root.locator(".hv-rerun.hv-pending").wait_for(timeout=30_000)  # the edit waits for Re-run
        root.locator(".hv-rerun").click()
        page.wait_for_function(
            "() => document.querySelector('.hookviz-widget tr[data-leaf=\"x\"] .hv-leaf-after')?.textContent.includes('1777792, 1777764')",
            timeout=30_000,
        )
        assert root.locator(".hv-rerun.hv-pending").count() == 0
        assert root.locator(".hv-error:not(:empty)").count() == 0
        # Notebook 7.6 itself throws "reading 'schema'" while loading its settings, and, for a
        # notebook in a folder (each test has its own), at times "Command 'filebrowser:open-path'
        # not registered" while it restores its file browser to that folder; the widget throws
        # nothing.
        notebook7_own = ("schema", "Command 'filebrowser:open-path' not registered")
        assert not [
            line
            for line in console
            if line.startswith("pageerror") and not any(known in line for known in notebook7_own)
        ]
        root.screenshot(path=str(ARTIFACTS / "notebook7.png"))
