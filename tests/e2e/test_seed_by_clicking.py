"""The seed experiment rebuilt from the README by clicking only, in JupyterLab and headless Chromium.

The canonical ``2*x + 3*y - 5*z`` module has no submodules: its own box, ``Canonical (root)``, is
where its module hooks live. Click the box (in Overview and in Module tree, and find it by search):
the inspector shows the legacy hook's 2 gradients beside the full hook's 3. Edit the module's
``grad_input[2]`` (z's) and ``SubBackward0``'s ``grad_inputs[0]`` by clicking, re-run, and the leaf
gradients on the page are those plain PyTorch computes with the same two hooks (computed here).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).parent))
import harness  # noqa: E402

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

ARTIFACTS = Path(__file__).parent / "artifacts"
TITLE = ".hookviz-widget .hv-inspector .hv-title"


class Canonical(nn.Module):
    def forward(self, x, y, z):
        return 2 * x + 3 * y - 5 * z


def plain_pytorch_grads() -> dict[str, list[float]]:
    """x, y, z grads with a full backward hook doubling z's grad_input and a post-hook on the Sub
    Node adding 888888 to its grad_inputs[0]: the two edits the test makes by clicking."""
    model = Canonical()
    handle = model.register_full_backward_hook(lambda module, gi, go: (gi[0], gi[1], gi[2] * 2))
    x = torch.tensor([2.0, 3.0], requires_grad=True)
    y = torch.tensor([6.0, 4.0], requires_grad=True)
    z = torch.tensor([1.0, 5.0], requires_grad=True)
    out = model(x, y, z)
    node = out.grad_fn  # the full hook's BackwardHookFunction; the module's Sub is behind it
    while type(node).__name__ != "SubBackward0":
        node = node.next_functions[0][0]
    node.register_hook(lambda grad_inputs, grad_outputs: (grad_inputs[0] + 888888, grad_inputs[1]))
    F.mse_loss(out, torch.tensor([9.0, -1.0])).backward()
    handle.remove()
    return {name: t.grad.tolist() for name, t in zip("xyz", (x, y, z))}


def _numbers(values: list[float]) -> str:
    """How the leaf table writes a small integer vector: ``[1777792, 1777764]``."""
    return "[" + ", ".join(str(int(v)) if float(v).is_integer() else str(v) for v in values) + "]"


def _click_box(page, group_id: str) -> None:
    """Click a module box inside its border, just below its top edge: an open box's middle is
    covered by the ops it holds."""
    harness.wait_at_rest(page)
    point = page.evaluate(
        """(id) => {
            const root = document.querySelector('.hookviz-widget');
            const box = root.cy.getElementById(id);
            if (box.empty()) return null;
            const b = box.renderedBoundingBox({ includeLabels: false });
            const r = root.cy.container().getBoundingClientRect();
            const inside = box.isParent() ? Math.min(6, b.h / 4) : b.h / 2;
            return { x: r.left + (b.x1 + b.x2) / 2, y: r.top + b.y1 + inside };
        }""",
        group_id,
    )
    if point is None:
        raise AssertionError(f"box {group_id!r} is not drawn")
    page.mouse.click(point["x"], point["y"])


def _wait_title(page, text: str) -> None:
    page.wait_for_function(
        "([selector, text]) => document.querySelector(selector)?.textContent.includes(text)",
        arg=[TITLE, text],
        timeout=30_000,
    )


def _wait_values(page) -> None:
    """The kernel's inspector (tensor values) has come: the side-by-side hook views are drawn."""
    page.wait_for_selector(".hookviz-widget .hv-hook-views .hv-hook-legacy", timeout=30_000)


def _slots(root, column: str) -> list[str]:
    """The slot cells of the grad_input table in one hook view (``full`` or ``legacy``)."""
    section = root.locator(f".hv-hook-{column} .hv-section").first
    return [text.strip() for text in section.locator("td.hv-slot").all_inner_texts()]


def _leaf_text(page, name: str) -> str:
    return page.locator(f'.hookviz-widget tr[data-leaf="{name}"] .hv-leaf-after').inner_text()


@pytest.fixture
def lab(lab_folder):
    harness.write_notebook(lab_folder.root / "seed.ipynb", [harness.CANONICAL])
    return lab_folder


def test_the_seed_experiment_by_clicking_only(lab):
    expected = plain_pytorch_grads()
    assert expected["z"] == [-80.0, 60.0] and expected["x"] == [1777792.0, 1777764.0]
    ARTIFACTS.mkdir(exist_ok=True)
    with (
        harness.chromium_page() as page,
        harness.diagnostics(page, ARTIFACTS / "seed_failure.png") as console,
    ):
        harness.open_notebook(page, lab, "seed.ipynb")
        harness.run_cell(page, 0)
        root = harness.widget_root(page)
        harness.wait_painted(page)
        labels = page.evaluate(
            "() => document.querySelector('.hookviz-widget').cy.nodes('[?isGroup]').map((n) => n.data('label'))"
        )
        assert sorted(labels) == ["(loss)", "Canonical (root)"]

        # Overview: the module's box around its ops; clicking it shows both hooks' views.
        _click_box(page, "group:")
        _wait_title(page, "Canonical (root)")
        _wait_values(page)
        assert _slots(root, "full") == ["grad_input[0] x", "grad_input[1] y", "grad_input[2] z"]
        legacy = _slots(root, "legacy")
        assert len(legacy) == 2, legacy
        assert legacy[0].startswith("grad_input[0] self") and "AddBackward0_0" in legacy[0]
        assert legacy[1].startswith("grad_input[1] other") and "MulBackward0_2" in legacy[1]
        full_text = root.locator(".hv-hook-full .hv-section").first.inner_text()
        legacy_text = root.locator(".hv-hook-legacy .hv-section").first.inner_text()
        for values in ("[16, -12]", "[24, -18]", "[-40, 30]"):
            assert values in full_text, (values, full_text)
        for values in ("[8, -6]", "[-8, 6]"):
            assert values in legacy_text, (values, legacy_text)

        # The Module tree has it too, and search finds it by the name it shows.
        painted = harness.paint_count(page)
        root.locator(".hv-view-modules").click()
        harness.wait_painted(page, painted + 1)
        tree = page.evaluate(
            "() => document.querySelector('.hookviz-widget').cy.nodes('[?tree]').map((n) => n.data('label'))"
        )
        assert sorted(tree) == ["(loss)", "Canonical (root)"], tree
        painted = harness.paint_count(page)
        root.locator(".hv-view-ops").click()
        harness.wait_painted(page, painted + 1)
        harness.click_node(page, "MulBackward0_0")  # select something else, then search
        _wait_title(page, "MulBackward0")
        root.locator(".hv-search").fill("(root)")
        root.locator(".hv-search").press("Enter")
        _wait_title(page, "Canonical (root)")
        _wait_values(page)

        # Edit the module's grad_input[2] (z's), by clicking: the header names the module.
        assert "Canonical (root)" in root.locator(".hv-editor h4").inner_text()
        harness.apply_edit(root, page, "grad_input[2]", "grad * 2", 1)
        assert (
            root.locator(".hv-edits-list li")
            .first.inner_text()
            .startswith("Canonical (root) · grad_input[2]")
        )

        # ... and SubBackward0's grad_inputs[0]; a second Apply at that site replaces, and says so.
        harness.click_node(page, "SubBackward0_0")
        _wait_title(page, "SubBackward0")
        harness.apply_edit(root, page, "grad_inputs[0]", "grad + 1", 2)
        root.locator(".hv-site").select_option("grad_inputs[0]")
        replaces = root.locator(".hv-replaces")
        assert replaces.inner_text() == "Apply replaces the edit grad + 1 at SubBackward0_0 · grad_inputs[0]"
        harness.apply_edit(root, page, "grad_inputs[0]", "grad + 888888", 2)
        listed = root.locator(".hv-edits-list li").all_inner_texts()
        assert [line.split(" ←")[0] for line in listed] == [
            "Canonical (root) · grad_input[2]",
            "SubBackward0_0 · grad_inputs[0]",
        ], listed

        root.locator(".hv-rerun").click()
        page.wait_for_function(
            "(text) => document.querySelector('.hookviz-widget tr[data-leaf=\"x\"] .hv-leaf-after')?.textContent.includes(text)",
            arg=_numbers(expected["x"])[1:-1],
            timeout=30_000,
        )
        compared = 0
        for name in "xyz":
            assert _numbers(expected[name]) in _leaf_text(page, name), (name, _leaf_text(page, name))
            compared += 1
        assert compared == 3
        assert root.locator(".hv-error:not(:empty)").count() == 0
        assert not [line for line in console if line.startswith("pageerror")]

        _click_box(page, "group:")
        _wait_title(page, "Canonical (root)")
        _wait_values(page)
        page.wait_for_timeout(300)
        root.screenshot(path=str(ARTIFACTS / "seed_by_clicking.png"))
