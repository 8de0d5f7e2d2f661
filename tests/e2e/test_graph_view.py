"""The graph a person reads on real models, in a real JupyterLab and headless Chromium.

A Hugging Face GPT-2 built from its config (6 layers x 128, 2 x 32 tokens) and a 20-layer sigmoid
MLP (width 64). From cytoscape's rendered bounding boxes: the first view is fitted into the
graph's box, every label drawn is at least 8 px on screen (none is hidden at the first view), and
no two node bodies, labels or sibling boxes overlap; the same after a block is opened in place.
Search, ``/``, Esc and ``w.select`` open the boxes around a match and bring it into view. Then
the page ``w.save_html`` writes, opened from ``file://`` (the dark theme: test_panels.py).
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
def lab(lab_folder):
    pytest.importorskip("transformers")
    root = lab_folder.root
    harness.write_notebook(root / "gpt2.ipynb", [harness.GPT2, 'w.search("c_fc.weight")'])
    harness.write_notebook(root / "mlp.ipynb", [harness.MLP])
    # As a run past the cheap-details limit (GPT-2 small, a 20,000-Node graph) is shown: drawn from
    # its norms, its details recorded when the page asks after the first paint.
    harness.write_notebook(
        root / "mlp_large.ipynb",
        [
            "import hookviz.record.details\nhookviz.record.details.IN_FULL_NODES = 0\n" + harness.MLP,
            'print("pending", w.details_pending, w.run.details_pending, len(w.diagnosis["findings"]))',
            'from hookviz.widget.diagnosis import diagnosis_json\nw.diagnosis = diagnosis_json([], "run", pending=True)',
            'w.diagnosis = diagnosis_json([], "run")',
        ],
    )
    return lab_folder


def assert_readable(report: dict, what: str) -> None:
    assert report["overlaps"] == [], f"{what}: {report['overlaps'][:10]}"
    assert report["smallest_label_px"] >= 8, (
        f"{what}: a label is drawn at {report['smallest_label_px']:.1f} px"
    )


def wait_settled(page, painted_before: int, kind: str | None = None) -> dict:
    """Wait for the next paint (of ``kind``, e.g. "layout" after a box is opened: a click also
    selects, and that recolour may be painted first), then for every animation to end, and
    report the view."""
    harness.wait_painted(page, painted_before + 1, kind=kind)
    page.wait_for_function(
        "() => { const cy = document.querySelector('.hookviz-widget').cy;"
        " return !cy.animated() && !cy.nodes().some(n => n.animated()); }",
        timeout=30_000,
    )
    page.wait_for_timeout(150)
    return harness.view_report(page)


def open_model(page, lab, name: str):
    harness.open_notebook(page, lab, name)
    harness.run_cell(page, 0)
    root = harness.widget_root(page)
    root.scroll_into_view_if_needed()
    harness.wait_painted(page, 1, timeout=120_000)
    # A large run's details arrive after the cell; the banner that says so then goes and the graph
    # moves up. Wait for that, so that a click lands where the node is drawn.
    page.wait_for_function(
        "() => document.querySelector('.hookviz-widget').hookviz.model.get('details_pending') === false",
        timeout=120_000,
        polling=100,
    )
    page.wait_for_timeout(300)
    return root


def test_gpt2_opens_as_its_fitted_module_tree(lab):
    ARTIFACTS.mkdir(exist_ok=True)
    with (
        harness.chromium_page(width=1280, height=1100) as page,
        harness.diagnostics(page, ARTIFACTS / "gpt2_failure.png") as console,
    ):
        root = open_model(page, lab, "gpt2.ipynb")
        first = harness.view_report(page)
        root.screenshot(path=str(ARTIFACTS / "gpt2_first_view.png"))
        assert first["outside"] == [], f"not fitted: {first['outside']}"
        assert first["hidden_labels"] == 0
        assert_readable(first, "first view")
        # embeddings -> h (six block boxes) -> ln_f -> lm_head
        drawn = page.evaluate(
            "() => document.querySelector('.hookviz-widget').cy.nodes().map(n => [n.id(), !!n.data('collapsed'), n.data('label')])"
        )
        boxes = {node: (closed, label) for node, closed, label in drawn}
        for i in range(6):
            closed, label = boxes[f"group:transformer.h.{i}"]
            assert closed and label == f"h.{i} ≡"  # six identical blocks, marked alike
        assert {"group:transformer.wte", "group:transformer.ln_f", "group:lm_head"} <= set(boxes)
        # Top to bottom, the loss ops too: no edge runs back up the view (a wrapped layout's do).
        back = page.evaluate(
            "() => document.querySelector('.hookviz-widget').cy.edges()"
            ".filter(e => e.target().position('y') <= e.source().position('y')).map(e => e.id())"
        )
        assert back == [], f"edges drawn bottom to top: {back}"

        # Open a block in place: it and what it holds are in view, readable, and nothing overlaps.
        painted = harness.paint_count(page)
        harness.click_node(page, "group:transformer.h.3")
        page.wait_for_function(
            "() => document.querySelector('.hookviz-widget').cy.getElementById('group:transformer.h.3').isParent()",
            timeout=30_000,
        )
        opened = wait_settled(page, painted, kind="layout")
        root.screenshot(path=str(ARTIFACTS / "gpt2_h3_open.png"))
        assert_readable(opened, "after opening h.3")
        inside = page.evaluate(
            "() => document.querySelector('.hookviz-widget').cy.getElementById('group:transformer.h.3')"
            ".descendants().map(n => n.id())"
        )
        assert "group:transformer.h.3.attn" in inside and "group:transformer.h.3.mlp" in inside
        assert not set(opened["outside"]) & {"group:transformer.h.3", *inside}

        # Search: "/" focuses the box, Enter finds h.3.mlp's c_fc, Esc clears.
        page.locator(".hookviz-widget .hv-cy").click(position={"x": 5, "y": 5})
        page.wait_for_function("() => document.activeElement.classList.contains('hv-cy')")
        page.keyboard.press("/")
        assert page.evaluate("() => document.activeElement.classList.contains('hv-search')")
        painted = harness.paint_count(page)
        page.keyboard.type("h.3.mlp.c_fc")
        page.keyboard.press("Enter")
        page.wait_for_function(
            "() => document.querySelector('.hookviz-widget').cy.$(':selected').map(n => n.id())[0] === 'group:transformer.h.3.mlp.c_fc'",
            timeout=30_000,
        )
        found = wait_settled(page, painted)
        assert "group:transformer.h.3.mlp.c_fc" not in found["outside"]
        assert_readable(found, "after the search")
        page.keyboard.press("Escape")
        assert root.locator(".hv-search").input_value() == ""

        # w.select from Python: a parameter by the end of its name, in a block that was closed.
        painted = harness.paint_count(page)
        harness.run_cell(page, 1)
        page.wait_for_function(
            "() => document.querySelector('.hookviz-widget').cy.$(':selected').map(n => n.id())[0] === 'transformer.h.0.mlp.c_fc.weight'",
            timeout=60_000,
        )
        selected = wait_settled(page, painted)
        page.wait_for_timeout(400)
        selected = harness.view_report(page)
        assert "transformer.h.0.mlp.c_fc.weight" not in selected["outside"]
        assert "c_fc.weight" in root.locator(".hv-inspector").inner_text()
        root.locator(".hv-inspector .hv-tensor .hv-histwrap").first.wait_for(state="visible", timeout=30_000)
        # Its gradient, [128, 512], is past the full-tensor limit: statistics, a histogram of a
        # sample, a heatmap of its block overview, and a note that its values were not kept.
        tensor = root.locator(".hv-inspector .hv-tensor").first
        assert tensor.locator(".hv-hist rect").count() == 32
        assert "a fixed sample of 1024 of 65536 elements" in tensor.locator(".hv-histwrap").inner_text()
        assert "values not kept" in tensor.locator(".hv-not-kept").inner_text()
        assert tensor.locator("canvas.hv-heat").count() == 1
        assert "128×512 in 32×32 blocks" in tensor.locator(".hv-heatwrap").inner_text()
        root.screenshot(path=str(ARTIFACTS / "gpt2_selected.png"))

        # Closing the side panel gives the graph the whole width; a click brings it back.
        narrow = page.evaluate("() => document.querySelector('.hookviz-widget').cy.width()")
        root.locator(".hv-side-close").click()
        page.wait_for_function(
            "(w) => document.querySelector('.hookviz-widget').cy.width() > w + 200", arg=narrow
        )
        harness.click_node(page, "transformer.h.0.mlp.c_fc.weight")
        root.locator(".hv-side").wait_for(state="visible", timeout=10_000)
        assert not [line for line in console if line.startswith("pageerror")]


def test_gpt2_module_tree_view_is_a_readable_tree(lab):
    """The Module tree button draws the module tree as a tree diagram (no ops): fitted, readable,
    children in the order the forward runs them; a closed block opens in place."""
    with (
        harness.chromium_page(width=1280, height=1100) as page,
        harness.diagnostics(page, ARTIFACTS / "gpt2_tree_failure.png") as console,
    ):
        root = open_model(page, lab, "gpt2.ipynb")
        painted = harness.paint_count(page)
        root.locator(".hv-view-modules").click()
        tree = wait_settled(page, painted, kind="layout")
        root.screenshot(path=str(ARTIFACTS / "gpt2_module_tree.png"))
        assert tree["outside"] == [] and tree["hidden_labels"] == 0
        assert_readable(tree, "module tree")
        drawn = page.evaluate(
            "() => document.querySelector('.hookviz-widget').cy.nodes().map(n => [n.id(), n.data('isGroup'),"
            " n.position('y'), n.data('label')])"
        )
        assert drawn and all(is_group for _, is_group, _, _ in drawn), "the tree draws modules only"
        y = {node: top for node, _, top, _ in drawn}
        children = ["wte", "wpe", "drop", "h", "ln_f"]
        tops = [y[f"group:transformer.{c}"] for c in children]
        assert tops == sorted(tops), f"transformer's children out of forward order: {tops}"
        assert {f"group:transformer.h.{i}" for i in range(6)} <= set(y)
        edges = page.evaluate(
            "() => document.querySelector('.hookviz-widget').cy.edges().map(e => [e.source().id(), e.target().id()])"
        )
        assert ["group:transformer.h", "group:transformer.h.3"] in edges

        painted = harness.paint_count(page)
        harness.click_node(page, "group:transformer.h.3")
        opened = wait_settled(page, painted, kind="layout")
        assert_readable(opened, "module tree after opening h.3")
        for child in ("ln_1", "attn", "ln_2", "mlp"):
            node = f"group:transformer.h.3.{child}"
            assert node in page.evaluate(
                "() => document.querySelector('.hookviz-widget').cy.nodes().map(n => n.id())"
            )
            assert node not in opened["outside"]
        assert not [line for line in console if line.startswith("pageerror")]


def test_deep_mlp_first_view_is_fitted_and_readable(lab):
    ARTIFACTS.mkdir(exist_ok=True)
    with (
        harness.chromium_page(width=1280, height=1100) as page,
        harness.diagnostics(page, ARTIFACTS / "mlp_failure.png"),
    ):
        root = open_model(page, lab, "mlp.ipynb")
        report = harness.view_report(page)
        root.screenshot(path=str(ARTIFACTS / "mlp_first_view.png"))
        assert report["outside"] == [], f"not fitted: {report['outside']}"
        assert report["hidden_labels"] == 0
        assert_readable(report, "first view")
        ids = page.evaluate("() => document.querySelector('.hookviz-widget').cy.nodes().map(n => n.id())")
        assert {"group:0", "group:38", "group:(loss)"} <= set(ids)

        # Open the last Linear in place: its ops and parameters are drawn, nothing overlaps.
        painted = harness.paint_count(page)
        harness.click_node(page, "group:38")
        opened = wait_settled(page, painted, kind="layout")
        assert_readable(opened, "after opening 38")
        assert "38.weight" in page.evaluate(
            "() => document.querySelector('.hookviz-widget').cy.nodes().map(n => n.id())"
        )
        assert "38.weight" not in opened["outside"]
        root.screenshot(path=str(ARTIFACTS / "mlp_38_open.png"))

        # Its weight's gradient, [3, 64]: shape, statistics, an exact histogram and a heatmap, the
        # raw values behind a toggle, never a wall of numbers; the edit controls come first.
        harness.click_node(page, "38.weight")
        page.wait_for_function(
            "() => document.querySelector('.hookviz-widget .hv-inspector .hv-title')?.textContent.includes('AccumulateGrad')"
        )
        # The page draws what its graph says at once; the kernel's tensors come after.
        root.locator(".hv-inspector .hv-tensor .hv-stats").first.wait_for(state="visible", timeout=30_000)
        view = page.evaluate(
            """() => {
                const root = document.querySelector('.hookviz-widget');
                const tensor = root.querySelector('.hv-inspector .hv-tensor');
                const raw = tensor.querySelector('details.hv-raw');
                const editor = root.querySelector('.hv-editor .hv-expr');
                return {
                    head: tensor.querySelector('.hv-shape').textContent,
                    stats: tensor.querySelector('.hv-stats').textContent,
                    bars: tensor.querySelectorAll('.hv-hist rect').length,
                    caption: tensor.querySelector('.hv-histwrap .hv-muted').textContent,
                    heatmap: tensor.querySelector('canvas.hv-heat')?.width || 0,
                    raw_open: raw ? raw.open : null,
                    numbers_shown: [...tensor.querySelectorAll('code.hv-value')].filter(c => !c.closest('details') || c.textContent).length,
                    editor_first: !!editor && !!(editor.compareDocumentPosition(tensor) & Node.DOCUMENT_POSITION_FOLLOWING),
                };
            }"""
        )
        assert "[3, 64]" in view["head"] and "norm" in view["stats"], view
        assert view["bars"] == 32 and "sample" not in view["caption"], view
        assert view["heatmap"] > 0 and view["raw_open"] is False and view["numbers_shown"] == 0, view
        assert view["editor_first"], view
        root.locator(".hv-inspector details.hv-raw summary").first.click()
        page.wait_for_function(  # the values are formatted on the toggle event, after the click
            "() => !!document.querySelector('.hookviz-widget .hv-inspector details.hv-raw code.hv-value')?.textContent"
        )
        assert root.locator(".hv-inspector details.hv-raw code.hv-value").first.inner_text().count(",") >= 100


def _rect(page, selector: str) -> dict:
    return page.evaluate(
        "(s) => { const r = document.querySelector('.hookviz-widget ' + s).getBoundingClientRect();"
        " return {left: r.left, top: r.top, right: r.right, bottom: r.bottom, width: r.width}; }",
        selector,
    )


def _cy(page, expression: str):
    return page.evaluate(
        f"() => {{ const cy = document.querySelector('.hookviz-widget').cy; return {expression}; }}"
    )


def test_deep_mlp_space_resize_full_screen_hover_animation_and_following_a_click(lab):
    """The widget's space (full cell width, a legend beside the graph, not on it, a height the user
    drags, full screen), labels on hover once they are too small to draw, the animated opening
    of a box, and a click at an unreadable zoom that brings the node into a readable view."""
    with (
        harness.chromium_page(width=1280, height=1100) as page,
        harness.diagnostics(page, ARTIFACTS / "mlp_space_failure.png") as console,
    ):
        root = open_model(page, lab, "mlp.ipynb")
        graph, legend = _rect(page, ".hv-graph"), _rect(page, ".hv-legend")
        cell = page.evaluate(
            "() => document.querySelector('.hookviz-widget').closest('.jp-OutputArea-output')"
            ".getBoundingClientRect().width"
        )
        assert graph["width"] >= 0.95 * cell, (graph, cell)
        assert legend["top"] >= graph["bottom"] - 0.5, (legend, graph)

        # Drag the corner of the graph's box 200 px down: the graph grows and is fitted again.
        main = _rect(page, ".hv-main")
        height = _cy(page, "cy.height()")
        page.mouse.move(main["right"] - 3, main["bottom"] - 3)
        page.mouse.down()
        page.mouse.move(main["right"] - 3, main["bottom"] + 197, steps=8)
        page.mouse.up()
        page.wait_for_function(
            "(h) => document.querySelector('.hookviz-widget').cy.height() >= h + 150",
            arg=height,
            timeout=10_000,
        )
        page.wait_for_timeout(200)
        grown = harness.view_report(page)
        assert grown["outside"] == [] and grown["zoom"] > 0, grown
        assert _rect(page, ".hv-legend")["top"] >= _rect(page, ".hv-graph")["bottom"] - 0.5

        # Full screen and back: the graph takes the screen and is fitted in it.
        height = _cy(page, "cy.height()")
        root.locator(".hv-fullscreen").click()
        page.wait_for_function(
            "() => document.fullscreenElement === document.querySelector('.hookviz-widget')", timeout=10_000
        )
        page.wait_for_function(
            "(h) => document.querySelector('.hookviz-widget').cy.height() > h", arg=height, timeout=10_000
        )
        page.wait_for_timeout(200)
        full = harness.view_report(page)
        assert full["outside"] == [], full
        assert _rect(page, ".hv-legend")["top"] >= _rect(page, ".hv-graph")["bottom"] - 0.5
        root.locator(".hv-fullscreen").click()
        page.wait_for_function("() => document.fullscreenElement === null", timeout=10_000)
        page.wait_for_function(
            "(h) => document.querySelector('.hookviz-widget').cy.height() === h", arg=height, timeout=10_000
        )

        # Opening a box is animated: nodes and the view move over several frames.
        page.evaluate(
            "() => { const root = document.querySelector('.hookviz-widget'); root.hvFrames = [];"
            " root.cy.on('render', () => root.hvFrames.push(root.cy.animated()"
            " || root.cy.nodes().some((n) => n.animated()))); }"
        )
        painted = harness.paint_count(page)
        harness.click_node(page, "group:38")
        wait_settled(page, painted, kind="layout")
        frames = page.evaluate("() => document.querySelector('.hookviz-widget').hvFrames")
        # at least two painted frames mid-animation (a jump paints none): how many more a loaded
        # machine paints in the animation's time is not the page's behaviour
        assert sum(frames) >= 2, f"{sum(frames)} animated frames of {len(frames)}"

        # Zoomed out with the wheel until labels are too small to draw: they are hidden, and a
        # node's label shows when the pointer is on it.
        graph = _rect(page, ".hv-cy")
        page.mouse.move(graph["left"] + graph["width"] / 2, (graph["top"] + graph["bottom"]) / 2)
        for _ in range(30):
            if harness.view_report(page)["hidden_labels"]:
                break
            page.mouse.wheel(0, 400)
            page.wait_for_timeout(60)
        zoomed_out = harness.view_report(page)
        assert zoomed_out["hidden_labels"] > 0 and zoomed_out["smallest_label_px"] >= 8, zoomed_out
        assert "38.weight" not in zoomed_out["outside"]
        weight = page.evaluate(
            "() => { const root = document.querySelector('.hookviz-widget');"
            " const p = root.cy.getElementById('38.weight').renderedPosition();"
            " const r = root.cy.container().getBoundingClientRect(); return {x: r.left + p.x, y: r.top + p.y}; }"
        )
        page.mouse.move(weight["x"], weight["y"])
        tooltip = root.locator(".hv-tooltip")
        tooltip.wait_for(state="visible", timeout=5_000)
        assert tooltip.inner_text().startswith("weight")
        page.mouse.move(graph["left"] + 2, graph["top"] + 2)
        tooltip.wait_for(state="hidden", timeout=5_000)

        # A click on it at this zoom selects it and zooms so that its label can be read.
        painted = harness.paint_count(page)
        page.mouse.click(weight["x"], weight["y"])
        page.wait_for_function(
            "() => document.querySelector('.hookviz-widget .hv-inspector')?.textContent.includes('38.weight')",
            timeout=30_000,
        )
        page.wait_for_function(
            "() => { const cy = document.querySelector('.hookviz-widget').cy;"
            " return !cy.animated() && cy.zoom() * 12 >= 8; }",
            timeout=10_000,
        )
        page.wait_for_timeout(150)
        followed = harness.view_report(page)
        assert "38.weight" not in followed["outside"], followed
        assert not [line for line in console if line.startswith("pageerror")]


def test_a_large_run_is_painted_first_and_diagnosed_when_the_page_asks(lab):
    with (
        harness.chromium_page(width=1280, height=1100) as page,
        harness.diagnostics(page, ARTIFACTS / "mlp_large_failure.png") as console,
    ):
        root = open_model(page, lab, "mlp_large.ipynb")
        # The page asked for the details after its first paint: the banner then shows the findings.
        root.locator(".hv-banner .hv-banner-head").wait_for(state="visible", timeout=60_000)
        assert "vanishing" in root.locator(".hv-banner").inner_text()
        # The leaf table and the chart came with that request, before the details were recorded.
        assert root.locator(".hv-leaves tr[data-leaf]").count() > 0
        assert "Summarising" not in root.locator(".hv-leaves").inner_text()
        root.locator(".hv-chart .main-svg").first.wait_for(state="visible", timeout=30_000)
        assert (
            page.evaluate(
                "() => document.querySelector('.hookviz-widget').hookviz.model.get('details_pending')"
            )
            is False
        )
        harness.run_cell(page, 1)
        output = page.locator(".jp-Notebook .jp-Cell").nth(1).locator(".jp-OutputArea-output").first
        output.wait_for(state="visible", timeout=30_000)
        words = output.inner_text().split()
        assert words[:3] == ["pending", "False", "False"] and int(words[3]) > 0

        # While a diagnosis is pending the toolbar says so, not a banner above the graph, so a run
        # with nothing to report leaves the graph where it was drawn.
        graph_top = "() => document.querySelector('.hookviz-widget .hv-cy').getBoundingClientRect().top"
        harness.run_cell(page, 2)
        root.locator(".hv-diagnosing").wait_for(state="visible", timeout=30_000)
        assert root.locator(".hv-banner").is_hidden()
        pending_top = page.evaluate(graph_top)
        harness.run_cell(page, 3)
        root.locator(".hv-diagnosing").wait_for(state="hidden", timeout=30_000)
        assert root.locator(".hv-banner").is_hidden()
        assert page.evaluate(graph_top) == pending_top
        assert not [line for line in console if line.startswith("pageerror")]


def test_saved_page_opens_from_a_file_without_kernel(tmp_path):
    harness.require_browser()
    import torch
    import torch.nn.functional as F

    import hookviz
    from hookviz.examples import sigmoid_mlp

    torch.manual_seed(0)
    model = sigmoid_mlp(depth=6, width=16, inputs=8, classes=3)
    x, labels = torch.randn(16, 8), torch.randint(0, 3, (16,))
    widget = hookviz.show(model, (x,), loss_fn=lambda out: F.cross_entropy(out, labels))
    path = widget.save_html(tmp_path / "mlp.html")
    ARTIFACTS.mkdir(exist_ok=True)
    with (
        harness.chromium_page(width=1280, height=1000) as page,
        harness.diagnostics(page, ARTIFACTS / "saved_failure.png") as console,
    ):
        requests = []
        page.on("request", lambda request: requests.append(request.url))
        page.goto(path.as_uri())
        harness.wait_painted(page, 1)
        root = page.locator(".hookviz-widget")
        # A box opens in place and the inspector answers from the file.
        harness.click_node(page, "group:0")
        page.wait_for_function(
            "() => document.querySelector('.hookviz-widget .hv-inspector .hv-title')?.textContent.includes('module 0')",
            timeout=10_000,
        )
        page.wait_for_function(
            "() => document.querySelector('.hookviz-widget').cy.getElementById('group:0').isParent()",
            timeout=10_000,
        )
        # Click where the opened box's leaf ends up, not where its layout's animation passes.
        page.wait_for_function(
            "() => { const cy = document.querySelector('.hookviz-widget').cy;"
            " return !cy.animated() && !cy.nodes().some((n) => n.animated()); }",
            timeout=10_000,
        )
        harness.click_node(page, "0.weight")
        page.wait_for_function(
            "() => document.querySelector('.hookviz-widget .hv-inspector .hv-title')?.textContent.includes('AccumulateGrad')",
            timeout=10_000,
        )
        # Boxes open; search finds; replay steps; the chart is drawn.
        painted = harness.paint_count(page)
        root.locator(".hv-search").fill("4.weight")
        root.locator(".hv-search").press("Enter")
        page.wait_for_function(
            "() => document.querySelector('.hookviz-widget').cy.$(':selected').map(n => n.id())[0] === '4.weight'",
            timeout=10_000,
        )
        harness.wait_painted(page, painted + 1)
        root.locator(".hv-slider").fill("3")
        page.wait_for_function(
            "() => document.querySelector('.hookviz-widget').cy.nodes('.running').length === 1",
            timeout=10_000,
        )
        root.locator(".hv-chart .main-svg").first.wait_for(state="visible", timeout=10_000)
        # Edits and re-run need Python: off, and the page says why.
        assert root.locator(".hv-rerun").is_disabled()
        assert root.locator(".hv-apply").is_disabled()
        assert "no Python kernel" in root.inner_text()
        assert all(url.startswith(("file:", "blob:", "data:")) for url in requests), requests
        assert not [line for line in console if line.startswith("pageerror")]
        root.screenshot(path=str(ARTIFACTS / "saved_page.png"))
