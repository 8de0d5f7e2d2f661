"""In JupyterLab + headless Chromium: the page owns the view.

1. A container box that was never called itself (GPT-2's ``transformer.h``, BERT's
   ``encoder.layer``: ModuleLists) opens on a click, and the inspector says what it is (its child
   modules, its parameters' gradient norms), with no error text anywhere in the widget.
2. Open/close and search answer while the kernel process is stopped (SIGSTOP; a cell that only
   sleeps is no proof: ipykernel answers comm messages meanwhile): the page needs no round trip
   for them; the kernel's answer (tensor values) comes once it runs again.
3. ``w.select(...)`` from Python moves the page's selection and opens the boxes around it.
4. A refused edit's red error does not come back when the page is reloaded.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import harness  # noqa: E402

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

ARTIFACTS = Path(__file__).parent / "artifacts"

GPT2 = """
import torch, transformers, hookviz
config = transformers.GPT2Config(n_layer=6, n_embd=64, n_head=2, vocab_size=100)
torch.manual_seed(0)
ids = torch.randint(0, 100, (1, 8))
w = hookviz.show(transformers.GPT2LMHeadModel(config), (), kwargs={"input_ids": ids, "labels": ids},
                 loss_fn=lambda out: out.loss)
w"""

BERT = """
import torch, transformers, hookviz
config = transformers.BertConfig(hidden_size=64, num_hidden_layers=4, num_attention_heads=2,
                                 intermediate_size=128, vocab_size=100)
torch.manual_seed(0)
ids = torch.randint(0, 100, (1, 8))
w = hookviz.show(transformers.BertForMaskedLM(config), (), kwargs={"input_ids": ids, "labels": ids},
                 loss_fn=lambda out: out.loss)
w"""


@pytest.fixture
def lab(lab_folder):
    pytest.importorskip("transformers")
    root = lab_folder.root
    harness.write_notebook(
        root / "gpt2.ipynb",
        [GPT2, 'w.select("transformer.h.2.mlp")', "import os\nos.getpid()"],
    )
    harness.write_notebook(root / "bert.ipynb", [BERT])
    harness.write_notebook(root / "canonical.ipynb", [harness.CANONICAL])
    return lab_folder


def _open(page, base, name):
    harness.open_notebook(page, base, name)
    harness.run_cell(page, 0)
    root = harness.widget_root(page)
    harness.wait_painted(page, timeout=120_000)
    return root


def _drawn(page, element_id: str) -> bool:
    return page.evaluate(
        "(id) => { const n = document.querySelector('.hookviz-widget').cy.getElementById(id);"
        " return !n.empty() && n.visible(); }",
        element_id,
    )


def _selected(page) -> str | None:
    return page.evaluate(
        "() => document.querySelector('.hookviz-widget').cy.$(':selected').map(n => n.id())[0]"
    )


def _click_when_drawn(page, element_id: str, timeout: float = 30_000) -> None:
    page.wait_for_function(
        "(id) => { const n = document.querySelector('.hookviz-widget').cy.getElementById(id);"
        " return !n.empty() && n.visible() && !n.animated(); }",
        arg=element_id,
        timeout=timeout,
    )
    page.wait_for_timeout(600)  # the layout's animation moves boxes: click where it ends
    harness.click_node(page, element_id)


def _error_texts(root) -> list[str]:
    """Every red error line in the widget that has text (what a user sees as an error)."""
    return [t for t in root.locator(".hv-error").all_inner_texts() if t.strip()]


def _open_container(page, root, chain: list[str], container: str, children: list[str], shot: str) -> str:
    """Collapse all, open ``chain`` box by box, then click ``container``: it opens, and the
    inspector lists its children and its parameters' gradient norms with no error."""
    root.locator(".hv-collapse-all").click()
    for module in chain:
        _click_when_drawn(page, f"group:{module}")
    _click_when_drawn(page, f"group:{container}")
    page.wait_for_function(
        "(id) => document.querySelector('.hookviz-widget').cy.getElementById(id).children().length > 0",
        arg=f"group:{container}",
        timeout=30_000,
    )
    inspector = root.locator(".hv-inspector")
    inspector.locator(".hv-children").wait_for(state="visible", timeout=10_000)
    text = inspector.inner_text()
    # the id row names the module in full (the title is the box's short label and type until the
    # kernel's answer comes)
    assert f"module:{container}" in text
    # Read the cells in one call: the inspector is drawn again when the kernel's answer comes, and
    # a row read across that redraw would be a detached one.
    tables = inspector.evaluate(
        """(el) => ['.hv-children tr', '.hv-parameters tr'].map((rows) =>
            Array.from(el.querySelectorAll(rows), (tr) => Array.from(tr.cells, (c) => c.textContent.trim())))"""
    )
    rows, norms = tables
    assert len(rows) == len(children) + 1, rows  # a header row, one per child
    assert [row[0] for row in rows[1:]] == children, rows
    assert len(norms) > 0
    assert all(float(row[-1]) > 0 for row in norms), norms
    assert _error_texts(root) == []
    root.screenshot(path=str(ARTIFACTS / shot))
    return text


def test_gpt2_container_opens_and_the_page_answers_with_the_kernel_stopped(lab):
    with (
        harness.chromium_page(width=1400, height=1100) as page,
        harness.diagnostics(page, ARTIFACTS / "page_state_gpt2_failure.png") as console,
    ):
        root = _open(page, lab, "gpt2.ipynb")
        _open_container(
            page,
            root,
            ["transformer"],
            "transformer.h",
            [f"h.{i}" for i in range(6)],
            "page_state_gpt2_container.png",
        )
        # The kernel's answer for the container comes too, and says what it is.
        root.locator(".hv-explanation").wait_for(state="visible", timeout=30_000)
        assert "is a container" in root.locator(".hv-explanation").inner_text()
        assert _error_texts(root) == []

        # w.select from Python: the page's selection moves, the boxes around it open.
        harness.run_cell(page, 1)
        page.wait_for_function(
            "() => document.querySelector('.hookviz-widget').cy.$(':selected').map(n => n.id())[0]"
            " === 'group:transformer.h.2.mlp'",
            timeout=60_000,
        )
        assert _drawn(page, "group:transformer.h.2.mlp")
        # titled by its box label, with its full name below
        assert "full name transformer.h.2.mlp" in root.locator(".hv-inspector .hv-title").inner_text()
        assert _error_texts(root) == []

        # The kernel stops (SIGSTOP: not one of its threads runs). Open, close and search answer.
        harness.run_cell(page, 2)
        output = page.locator(".jp-Notebook .jp-Cell").nth(2).locator(".jp-OutputArea-output")
        output.wait_for(state="visible", timeout=30_000)
        kernel = int(output.inner_text().strip())
        os.kill(kernel, signal.SIGSTOP)
        try:
            started = time.monotonic()
            root.locator(".hv-collapse-all").click()
            page.wait_for_function(
                "() => { const cy = document.querySelector('.hookviz-widget').cy;"
                " const n = cy.getElementById('group:transformer.h'); return n.empty() || !n.visible(); }",
                timeout=10_000,
            )
            _click_when_drawn(page, "group:transformer")
            _click_when_drawn(page, "group:transformer.h")
            assert _drawn(page, "group:transformer.h.0")
            search = root.locator(".hv-search")
            search.fill("h.3.attn")
            search.press("Enter")
            page.wait_for_function(
                "() => document.querySelector('.hookviz-widget').cy.$(':selected').map(n => n.id())[0]"
                " === 'group:transformer.h.3.attn'",
                timeout=10_000,
            )
            # The inspector says what the graph knows, and that the values wait for the kernel.
            inspector = root.locator(".hv-inspector").inner_text()
            # The title names the box as drawn and its type; the id row the module's full name.
            assert "module h.3.attn · GPT2Attention" in inspector
            assert "module:transformer.h.3.attn" in inspector and "child modules (3)" in inspector
            assert "asking the kernel" in inspector
            print(
                f"open, close and search answered in {time.monotonic() - started:.1f} s with the kernel stopped"
            )
            root.screenshot(path=str(ARTIFACTS / "page_state_gpt2_kernel_stopped.png"))
        finally:
            os.kill(kernel, signal.SIGCONT)
        # Once the kernel runs again, it answers with the module's tensors.
        root.locator(".hv-inspector .hv-tensor").first.wait_for(state="visible", timeout=60_000)
        assert "asking the kernel" not in root.locator(".hv-inspector").inner_text()
        assert _error_texts(root) == []
        assert not [line for line in console if line.startswith("pageerror")]


def test_bert_encoder_layer_opens_and_says_what_it_is(lab):
    with (
        harness.chromium_page(width=1400, height=1100) as page,
        harness.diagnostics(page, ARTIFACTS / "page_state_bert_failure.png") as console,
    ):
        root = _open(page, lab, "bert.ipynb")
        _open_container(
            page,
            root,
            ["bert", "bert.encoder"],
            "bert.encoder.layer",
            [f"layer.{i}" for i in range(4)],
            "page_state_bert_container.png",
        )
        assert not [line for line in console if line.startswith("pageerror")]


def test_a_refused_edit_error_does_not_come_back_after_a_reload(lab):
    with (
        harness.chromium_page(width=1400, height=1100) as page,
        harness.diagnostics(page, ARTIFACTS / "page_state_reload_failure.png"),
    ):
        root = _open(page, lab, "canonical.ipynb")
        _click_when_drawn(page, "SubBackward0_0")
        expression = root.locator(".hv-editor .hv-expr")
        expression.fill("__import__('os')")
        expression.press("Enter")
        error = root.locator(".hv-editor .hv-error")
        page.wait_for_function(  # the editor is drawn anew with each answer: find it each time
            "() => document.querySelector('.hookviz-widget .hv-editor .hv-error')?.textContent.trim()",
            timeout=30_000,
        )
        assert "__import__" in error.inner_text() or "not allowed" in error.inner_text().lower()
        page.keyboard.press("Control+s")
        page.wait_for_timeout(1500)

        page.reload()
        page.wait_for_selector(".jp-Notebook", state="visible", timeout=60_000)
        root = harness.widget_root(page)
        harness.wait_painted(page, timeout=120_000)
        # The selection is the page's state and comes back; the old request's error does not.
        root.locator(".hv-editor .hv-expr").wait_for(state="visible", timeout=30_000)
        assert _selected(page) == "SubBackward0_0"
        page.wait_for_timeout(1000)
        assert _error_texts(root) == []
        root.screenshot(path=str(ARTIFACTS / "page_state_after_reload.png"))
