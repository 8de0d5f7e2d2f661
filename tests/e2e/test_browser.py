"""The widget in a real JupyterLab and headless Chromium: the canonical example, edited and re-run.

Click SubBackward0 (the module's last op) on the canvas, edit its ``grad_inputs[0]`` to
``grad + 888888`` and ``grad_inputs[1]`` to ``grad - 777777``, re-run backward, and read x's new
grad from the page: the numbers plain PyTorch gives with the same hook (see tests/test_widget.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from hookviz.colors import NO_GRAD_COLOR, NOT_WATCHED_COLOR

sys.path.insert(0, str(Path(__file__).parent))
import harness  # noqa: E402

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

ARTIFACTS = Path(__file__).parent / "artifacts"

# A deep sigmoid MLP: its gradients vanish (the banner says so), trained 3 steps under a watch given
# the optimizer (so its view draws each layer's update ratio and the learning rate as rows).
VANISHING = """\
import torch, torch.nn.functional as F, hookviz
from hookviz.examples import sigmoid_mlp
torch.manual_seed(0)
model = sigmoid_mlp(depth=20, width=32, inputs=8, classes=3)
x, labels = torch.randn(16, 8), torch.randint(0, 3, (16,))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
with hookviz.watch(model, optimizer=optimizer) as watch:
    for _ in range(3):
        optimizer.zero_grad(); F.cross_entropy(model(x), labels).backward(); optimizer.step()
w = hookviz.show(model, (x,), loss_fn=lambda out: F.cross_entropy(out, labels))
w"""


@pytest.fixture
def lab(lab_folder):
    harness.write_notebook(lab_folder.root / "canonical.ipynb", [harness.CANONICAL])
    harness.write_notebook(lab_folder.root / "vanishing.ipynb", [VANISHING, "w.show_watch(watch, step=0);"])
    return lab_folder


def _leaf_text(page, name: str) -> str:
    return page.locator(f'.hookviz-widget tr[data-leaf="{name}"] .hv-leaf-after').inner_text()


def test_edit_and_rerun_in_jupyterlab(lab):
    ARTIFACTS.mkdir(exist_ok=True)
    with harness.chromium_page() as page, harness.diagnostics(page, ARTIFACTS / "failure.png"):
        harness.open_notebook(page, lab, "canonical.ipynb")
        harness.run_cell(page, 0)
        root = harness.widget_root(page)
        page.wait_for_function(
            "() => Number(document.querySelector('.hookviz-widget').dataset.painted || 0) >= 1",
            timeout=60_000,
        )
        assert "[16, -12]" in _leaf_text(page, "x")

        harness.click_node(page, "SubBackward0_0")
        page.wait_for_function(
            "() => document.querySelector('.hookviz-widget .hv-inspector .hv-title')?.textContent.includes('SubBackward0')",
            timeout=30_000,
        )
        # A refused expression stays in the box, and the error names the column.
        root.locator(".hv-site").select_option("grad_inputs[0]")
        root.locator(".hv-expr").fill("grad +* 2")
        root.locator(".hv-apply").click()
        page.wait_for_function(
            "() => document.querySelector('.hookviz-widget .hv-editor .hv-error')?.textContent.includes('column')",
            timeout=30_000,
        )
        assert root.locator(".hv-expr").input_value() == "grad +* 2"
        harness.apply_edit(root, page, "grad_inputs[0]", "grad + 888888", 1)
        harness.apply_edit(root, page, "grad_inputs[1]", "grad - 777777", 2)
        # Applied, not yet run: the edits, the edited node and the Re-run button say so.
        assert root.locator(".hv-rerun.hv-pending").count() == 1
        assert root.locator(".hv-edits-list .hv-badge-pending").count() == 2
        assert _data(page, "SubBackward0_0", "pending") is True
        assert not _data(page, "MulBackward0_0", "pending")
        # Sorted by norm, largest first: the sort holds for the re-run's table.
        root.locator('.hv-leaves-table th[data-sort="norm"]').click()
        root.locator(".hv-rerun").click()
        page.wait_for_function(
            "() => document.querySelector('.hookviz-widget tr[data-leaf=\"x\"] .hv-leaf-after')?.textContent.includes('1777792, 1777764')",
            timeout=30_000,
        )
        assert "[1777792, 1777764]" in _leaf_text(page, "x")
        assert root.locator(".hv-rerun.hv-pending").count() == 0
        assert not _data(page, "SubBackward0_0", "pending")
        assert "[2666688, 2666646]" in _leaf_text(page, "y")
        assert "[-3888925, -3888855]" in _leaf_text(page, "z")
        assert root.locator('.hv-leaves-table th[data-sort="norm"]').inner_text().endswith("▼")
        assert root.locator(".hv-leaves-table tr[data-leaf]").evaluate_all(
            "rows => rows.map(r => r.dataset.leaf)"
        ) == ["z", "y", "x"]
        # The inspector shows before -> after for the selected node.
        assert "before" in root.locator(".hv-inspector").inner_text()
        assert root.locator(".hv-error:not(:empty)").count() == 0

        page.wait_for_timeout(300)
        root.screenshot(path=str(ARTIFACTS / "widget.png"))

        # A device the kernel refuses (here one the picker offered before the machine lost it)
        # does not stay picked, and the run on screen stays.
        page.evaluate(
            "() => document.querySelector('.hookviz-widget .hv-device').append(new Option('cuda:7'))"
        )
        root.locator(".hv-device").select_option("cuda:7")
        root.locator(".hv-rerun").click()
        page.wait_for_function(
            "() => [...document.querySelectorAll('.hookviz-widget .hv-error')].some(e => e.textContent.includes('cuda:7'))",
            timeout=30_000,
        )
        assert root.locator(".hv-device").input_value() == "cpu"
        assert "[1777792, 1777764]" in _leaf_text(page, "x")

        # Replay: step 2 of the recorded backward order lights what ran, the view follows it (here
        # from a view panned far off), and the inspector follows.
        page.evaluate("() => document.querySelector('.hookviz-widget').cy.pan({x: -4000, y: -4000})")
        root.locator(".hv-slider").fill("1")
        page.wait_for_function(
            "() => document.querySelector('.hookviz-widget').cy.nodes('.running').length === 1",
            timeout=10_000,
        )
        running = page.evaluate(
            "() => document.querySelector('.hookviz-widget').cy.nodes('.running')[0].id()"
        )
        assert running == "SubBackward0_0"
        page.wait_for_function(
            "() => { const cy = document.querySelector('.hookviz-widget').cy;"
            " const b = cy.getElementById('SubBackward0_0').renderedBoundingBox();"
            " return !cy.animated() && b.x1 >= 0 && b.y1 >= 0 && b.x2 <= cy.width() && b.y2 <= cy.height(); }",
            timeout=10_000,
        )
        page.wait_for_function(
            "() => document.querySelector('.hookviz-widget .hv-inspector .hv-title')?.textContent.includes('SubBackward0')"
        )
        assert "step 2/" in root.locator(".hv-step").inner_text()

        # The module tree (here only what loss_fn built is a module box, and no op is drawn), and back.
        root.locator(".hv-view-modules").click()
        page.wait_for_function(
            "() => { const cy = document.querySelector('.hookviz-widget').cy;"
            " return cy.getElementById('group:(loss)').data('tree') === true"
            " && cy.nodes().every(n => n.data('isGroup')); }",
            timeout=10_000,
        )
        root.locator(".hv-view-ops").click()
        page.wait_for_function(
            "() => document.querySelector('.hookviz-widget').cy.getElementById('SubBackward0_0').nonempty()",
            timeout=10_000,
        )

        # Reset: the graph and the leaf table still show the edited run until Re-run, and say so.
        root.locator(".hv-reset").click()
        root.locator(".hv-rerun.hv-pending").wait_for(timeout=30_000)
        assert "edited run: press Re-run" in root.locator(".hv-edits").inner_text()
        assert "[1777792, 1777764]" in _leaf_text(page, "x")
        root.locator(".hv-rerun").click()
        page.wait_for_function(
            "() => document.querySelector('.hookviz-widget tr[data-leaf=\"x\"] .hv-leaf-after')?.textContent === '[16, -12]'",
            timeout=30_000,
        )
        assert root.locator(".hv-rerun.hv-pending").count() == 0


def _data(page, node_id: str, key: str):
    return page.evaluate(
        "([id, key]) => document.querySelector('.hookviz-widget').cy.getElementById(id).data(key)",
        [node_id, key],
    )


def _color(page, node_id: str) -> str:
    return _data(page, node_id, "color")


def test_diagnosis_banner_and_watch_view(lab):
    ARTIFACTS.mkdir(exist_ok=True)
    with harness.chromium_page() as page, harness.diagnostics(page, ARTIFACTS / "failure_watch.png"):
        harness.open_notebook(page, lab, "vanishing.ipynb")
        harness.run_cell(page, 0)
        root = harness.widget_root(page)
        banner = root.locator(".hv-banner")
        banner.wait_for(state="visible", timeout=60_000)
        assert "vanishing" in banner.locator(".hv-banner-head").inner_text()
        first = banner.locator(".hv-finding").first
        node = first.get_attribute("data-node")
        assert node and node.endswith(".weight")
        harness.wait_painted(page, 1)
        page.evaluate("() => document.querySelector('.hookviz-widget').cy.pan({x: 5000, y: 5000})")
        first.click()
        page.wait_for_function(
            "(node) => document.querySelector('.hookviz-widget .hv-inspector')?.textContent.includes(node)",
            arg=node,
            timeout=30_000,
        )
        # The finding's node, in a box the click opened, is brought into view.
        page.wait_for_function(
            "(id) => { const cy = document.querySelector('.hookviz-widget').cy; const n = cy.getElementById(id);"
            " if (n.empty() || cy.animated()) return false; const b = n.renderedBoundingBox();"
            " return b.x1 >= 0 && b.y1 >= 0 && b.x2 <= cy.width() && b.y2 <= cy.height(); }",
            arg=node,
            timeout=30_000,
        )
        page.wait_for_function(
            "() => Number(document.querySelector('.hookviz-widget').dataset.painted || 0) >= 1",
            timeout=60_000,
        )

        # The watch view: slider, heatmap, graph coloured by step 0's norms (what loss_fn built, which
        # is no module of the model, in the "not watched" colour, not the "no grad" grey).
        harness.run_cell(page, 1)
        root.locator(".hv-watch").wait_for(state="visible", timeout=30_000)
        root.locator(".hv-heatmap .main-svg").first.wait_for(state="visible", timeout=30_000)
        assert "0 (1/3 kept)" in root.locator(".hv-watch-step").inner_text()
        assert "Watch step 0" in banner.inner_text()
        page.wait_for_function(
            "() => document.querySelector('.hookviz-widget').cy.getElementById('group:(loss)').data('color') === '"
            + NOT_WATCHED_COLOR
            + "'",
            timeout=10_000,
        )
        assert _color(page, "group:0") != NO_GRAD_COLOR
        assert _color(page, "30.weight") != NO_GRAD_COLOR  # opened by the finding's click
        # optimizer=: under the heatmap, a row of the total gradient norm before and after clipping,
        # one of each layer's update ratio and one of the learning rate, drawn by plotly with the
        # colours Python sent; the notes say what a step is
        rows = page.evaluate(
            "() => document.querySelector('.hookviz-widget .hv-heatmap').data"
            ".filter((t) => t.yaxis === 'y9').map((t) => [t.name, t.marker.color.length])"
        )
        ratio_rows = [name for name, _ in rows if name.startswith("‖Δw‖/‖w‖ of ")]
        assert rows[0] == ["‖grad‖ total", 3] and len(ratio_rows) == 20 and rows[-1] == ["lr SGD", 3]
        assert len(rows) == 22 and all(cells == 3 for _, cells in rows)
        assert root.locator(".hv-heatmap .scatterlayer .point").count() == 22 * 3
        assert "optimizer.step() of SGD" in root.locator(".hv-watch-notes").inner_text()
        root.locator(".hv-watch-slider").fill("2")
        page.wait_for_function(
            "() => document.querySelector('.hookviz-widget .hv-watch-step').textContent.startsWith('2 (3/3')",
            timeout=10_000,
        )
        assert _color(page, "group:0") != NO_GRAD_COLOR
        page.wait_for_timeout(500)
        root.screenshot(path=str(ARTIFACTS / "watch.png"))
        root.locator(".hv-heatmap").scroll_into_view_if_needed()
        root.locator(".hv-heatmap").screenshot(path=str(ARTIFACTS / "watch_heatmap.png"))
        assert root.locator(".hv-error:not(:empty)").count() == 0

        root.locator(".hv-watch-close").click()
        root.locator(".hv-watch").wait_for(state="hidden", timeout=10_000)
        assert "This run" in banner.inner_text()
