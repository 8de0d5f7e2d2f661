"""In JupyterLab + headless Chromium: why a selected module got no gradient, and a run opened from a file.

1. A module called under ``torch.no_grad()`` is selected: the inspector says why no hook fires there
   (``Run.explain``), on the page.
2. A run and a watch history are saved and opened with ``hookviz.load``: the page turns Re-run off and
   shows the read-only note; the watch view has a rank selector, and picking a rank shows that rank's
   local norms.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import harness  # noqa: E402

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

ARTIFACTS = Path(__file__).parent / "artifacts"

GATED = """
import torch, torch.nn as nn, hookviz

class Gated(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate, self.fc = nn.Linear(3, 3), nn.Linear(3, 3)

    def forward(self, x):
        with torch.no_grad():
            gate = torch.sigmoid(self.gate(x))
        return (self.fc(x) * gate).sum()

torch.manual_seed(0)
w = hookviz.show(Gated(), (torch.randn(2, 3),))
w.select("module:gate")
w
"""

FROM_FILES = """
import tempfile
from pathlib import Path
import torch, torch.nn as nn, torch.nn.functional as F, hookviz
from hookviz.watching import gather as watch_gather

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
data, labels = torch.randn(16, 4), torch.randint(0, 2, (16,))
with hookviz.watch(model) as watch:
    for _ in range(3):
        model.zero_grad()
        F.cross_entropy(model(data), labels).backward()
folder = Path(tempfile.mkdtemp())
run = hookviz.Session(model, (data,), loss_fn=lambda out: F.cross_entropy(out, labels)).run()
history = hookviz.load(hookviz.save(watch, folder / "history"))
opened = hookviz.load(hookviz.save(run, folder / "run"))
v = hookviz.show(history, on=opened)
v
"""


@pytest.fixture
def lab(lab_folder):
    harness.write_notebook(lab_folder.root / "explain.ipynb", [GATED, FROM_FILES])
    return lab_folder


def test_why_no_gradient_and_a_run_opened_from_a_file(lab):
    ARTIFACTS.mkdir(exist_ok=True)
    with (
        harness.chromium_page() as page,
        harness.diagnostics(page, ARTIFACTS / "explain_files_failure.png"),
    ):
        harness.open_notebook(page, lab, "explain.ipynb")
        harness.run_cell(page, 0)
        first = harness.widget_root(page, 0)
        first.locator(".hv-explanation").wait_for(timeout=60_000)
        assert "ran under torch.no_grad()" in first.locator(".hv-explanation").inner_text()

        harness.run_cell(page, 1)
        second = harness.widget_root(page, 1)
        second.locator(".hv-watch-rank").wait_for(state="visible", timeout=60_000)
        assert second.locator(".hv-rerun").is_disabled()
        assert "read-only" in second.inner_text()
        options = second.locator(".hv-watch-rank option").all_inner_texts()
        assert options == ["rank 0 (local)"]  # one process: nothing reduced to offer
        page.wait_for_function(
            "() => document.querySelectorAll('.hookviz-widget')[1].querySelector('.hv-watch b')"
            "?.textContent.includes('rank 0')",
            timeout=30_000,
        )
        page.screenshot(path=str(ARTIFACTS / "explain_files.png"), full_page=True)
