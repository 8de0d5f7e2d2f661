"""Notebook 07 in a real JupyterLab: the exploding run's banner says when the NaN started, and where.

Run all of ``notebooks/07_live_training.ipynb``; the cell that trains with ``lr=3.0`` prints the
first step whose gradient held NaN (found from ``.grad`` by the notebook's own loop over
``diagnose``); the second widget's banner must name that step (not only the last one), and its
heatmap must mark it.
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
NOTEBOOK = harness.REPO / "notebooks" / "07_live_training.ipynb"


@pytest.fixture
def lab(lab_folder):
    pytest.importorskip("sklearn")
    shutil.copy(NOTEBOOK, lab_folder.root / NOTEBOOK.name)
    return lab_folder


def test_exploding_banner_names_the_onset_step(lab):
    ARTIFACTS.mkdir(exist_ok=True)
    with (
        harness.chromium_page() as page,
        harness.diagnostics(page, ARTIFACTS / "notebook07_failure.png") as console,
    ):
        harness.open_notebook(page, lab, NOTEBOOK.name)
        page.locator(".jp-Notebook .jp-Cell").first.click()
        page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
        page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Run All Cells$")).click()
        printed = page.locator(".jp-OutputArea-output").filter(has_text="the first NaN gradient came at step")
        printed.wait_for(timeout=300_000)
        first = int(re.search(r"came at step (\d+)", printed.inner_text()).group(1))
        root = harness.widget_root(page, 1)
        root.scroll_into_view_if_needed()
        onsets = root.locator(".hv-banner .hv-onsets")
        onsets.wait_for(timeout=60_000)
        page.wait_for_function(
            "([el, text]) => el.textContent.includes(text)",
            arg=[onsets.element_handle(), f"NaN/Inf first at step {first}"],
            timeout=60_000,
        )
        # the banner's own step is the last one; the onset line names when it began
        assert "Watch step 99" in root.locator(".hv-banner").inner_text()
        # the heatmap marks it: plotly draws the annotation as SVG text
        heatmap = root.locator(".hv-heatmap")
        heatmap.get_by_text(f"NaN/Inf from step {first}").wait_for(timeout=30_000)
        assert not [line for line in console if line.startswith("pageerror")]
        page.wait_for_timeout(300)
        root.screenshot(path=str(ARTIFACTS / "notebook07_onset.png"))
