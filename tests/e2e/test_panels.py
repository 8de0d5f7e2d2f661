"""The panels around the graph on real models, in a real JupyterLab and headless Chromium.

- The gradient-flow chart of GPT-2 (6 layers x 128, from its config) keeps at least 200 px of
  height inside the widget's rectangle on first show, after the window is resized, and after
  entering and leaving the widget's full screen; the plot is as wide as its box each time.
- Contrast, from computed styles (rgba composited over the backgrounds really behind the text):
  every text of the widget >= 4.5 and every module box title (cytoscape's label colour against
  the canvas, or against the box it sits in) >= 3, in JupyterLab Light, then Dark for the widget
  drawn before the switch and for one drawn after it.
- Replay: an explicit switch that says "off" until turned on, the bar marked while on, and the
  Module tree view drawn with no faded box.
- The leaf table of a 60-layer MLP (120 parameters, more than two pages): every leaf reached by
  paging, the columns inside the panel, and "most changed first" ordered by Python's own
  |log10(norm / baseline norm)|.
- The diagnosis banner of a 20-layer sigmoid MLP: one line for the run of vanishing layers; the
  inspector of an op inside GPT-2's scaled_dot_product_attention says why it has no forward value.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import harness  # noqa: E402

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

ARTIFACTS = Path(__file__).parent / "artifacts"


# An op of scaled_dot_product_attention's math path: autograd made it inside that one call.
INSIDE_ATTENTION = """\
inside = next(n for n in w.run.nodes if n.startswith("SafeSoftmaxBackward0"))
print("INSIDE", json.dumps([inside, w.run.nodes[inside].output is None]))
w.select(inside)"""


FINDINGS = """\
import json
print("FINDINGS", json.dumps([[f.kind, list(f.modules), f.message] for f in hookviz.diagnose(w.run)]))"""

# 60 Linear layers (tanh, whose gradients stay far from underflow): 120 parameter leaves. Two
# edits change them by different factors: x 0.001 at the gradient leaving tanh '61' (every leaf
# below it), x 100 more at tanh '21'.
DEEP = """\
import torch, torch.nn.functional as F, hookviz
from hookviz.examples import sigmoid_mlp
torch.manual_seed(0)
model = sigmoid_mlp(depth=60, width=16, inputs=8, classes=3, activation=torch.nn.Tanh)
x, labels = torch.randn(16, 8), torch.randint(0, 3, (16,))
w = hookviz.show(model, (x,), loss_fn=lambda out: F.cross_entropy(out, labels))
w"""

DEEP_EDIT = """\
import json, math
def sigmoid_of(module):
    return next(n for n, d in w.run.graph.nodes(data=True) if d["module"] == module)
assert w.apply_edit(sigmoid_of("61"), "grad_inputs[0]", "grad * 0.001"), w.errors
assert w.apply_edit(sigmoid_of("21"), "grad_inputs[0]", "grad * 100"), w.errors
assert w.rerun()
def norm(run, name):
    g = run.leaf_grad(name)
    return None if g is None else torch.linalg.vector_norm(g.double()).item()
change = {}
for name in w.run.leaf_grads:
    now, then = norm(w.run, name), norm(w.baseline, name)
    if now is None or then is None:
        continue
    change[name] = 0.0 if now == then else math.inf if 0 in (now, then) else abs(math.log10(now / then))
print("CHANGE", json.dumps(change))"""


@pytest.fixture
def lab(lab_folder):
    pytest.importorskip("transformers")
    root = lab_folder.root
    harness.write_notebook(root / "gpt2.ipynb", [harness.GPT2, "import json\n" + INSIDE_ATTENTION])
    harness.write_notebook(root / "mlp.ipynb", [harness.MLP, FINDINGS, 'w.toggle_group("0")', harness.MLP])
    harness.write_notebook(root / "deep.ipynb", [DEEP, DEEP_EDIT])
    # The theme switch writes the shared server's user settings; they are put back after the test.
    return lab_folder


def printed(page, marker: str, cell: int):
    """The JSON a cell printed after ``marker``."""
    output = page.locator(".jp-Notebook .jp-Cell").nth(cell).locator(".jp-OutputArea-output")
    output.filter(has_text=marker).first.wait_for(timeout=120_000)
    text = output.filter(has_text=marker).first.inner_text()
    return json.loads(text.split(marker, 1)[1].strip())


# ----- the gradient-flow chart ------------------------------------------------------------------


def test_chart_keeps_its_height_on_first_show_resize_and_full_screen(lab):
    ARTIFACTS.mkdir(exist_ok=True)
    with harness.chromium_page() as page, harness.diagnostics(page, ARTIFACTS / "panels_chart_failure.png"):
        harness.open_notebook(page, lab, "gpt2.ipynb")
        harness.run_cell(page, 0)
        root = harness.widget_root(page)
        harness.wait_painted(page, 1, timeout=180_000)
        root.locator(".hv-chart .main-svg").first.wait_for(state="visible", timeout=120_000)
        first = harness.assert_chart_fits(page, "first show")
        root.locator(".hv-chart").screenshot(path=str(ARTIFACTS / "panels_chart_first.png"))

        page.set_viewport_size({"width": 900, "height": 1000})
        narrow = harness.assert_chart_fits(page, "after a resize to 900 px")
        assert narrow["plot"]["width"] < first["plot"]["width"] - 100  # it really followed the box
        page.set_viewport_size({"width": 1500, "height": 1400})
        harness.assert_chart_fits(page, "after a resize back to 1500 px")

        root.locator(".hv-fullscreen").click()
        page.wait_for_function("() => !!document.fullscreenElement", timeout=10_000)
        # Full screen, the widget is the screen and scrolls its own content: the chart is below.
        page.evaluate("() => document.querySelector('.hookviz-widget .hv-chart').scrollIntoView()")
        full = harness.assert_chart_fits(page, "in full screen")
        assert full["fullscreen"]
        page.screenshot(path=str(ARTIFACTS / "panels_chart_fullscreen.png"))
        page.evaluate("() => document.exitFullscreen()")
        page.wait_for_function("() => !document.fullscreenElement", timeout=10_000)
        harness.assert_chart_fits(page, "after leaving full screen")
        root.locator(".hv-chart").scroll_into_view_if_needed()
        root.locator(".hv-chart").screenshot(path=str(ARTIFACTS / "panels_chart_after_fullscreen.png"))

        # An op inside scaled_dot_product_attention has no forward value: the inspector says why.
        harness.run_cell(page, 1)
        inside, missing = printed(page, "INSIDE", 1)
        assert missing  # what hookviz recorded: no forward value for it
        page.wait_for_function(
            "(id) => document.querySelector('.hookviz-widget .hv-inspector .hv-meta')?.textContent.includes(id)",
            arg=inside,
            timeout=30_000,
        )
        note = root.locator(".hv-inspector .hv-not-seen").inner_text()
        assert note.startswith(
            "None: SafeSoftmaxBackward0 is a step autograd made inside one torch call from Python"
        )
        root.locator(".hv-side").screenshot(path=str(ARTIFACTS / "panels_inspector_inside_attention.png"))


# ----- contrast in Light and Dark -----------------------------------------------------------------


def test_findings_replay_and_contrast_in_light_and_dark(lab):
    ARTIFACTS.mkdir(exist_ok=True)
    with harness.chromium_page() as page, harness.diagnostics(page, ARTIFACTS / "panels_theme_failure.png"):
        harness.open_notebook(page, lab, "mlp.ipynb")
        assert page.evaluate("() => document.body.dataset.jpThemeLight") == "true"
        harness.run_cell(page, 0)
        root = harness.widget_root(page)
        harness.wait_painted(page, 1)

        # Findings: the 20-layer sigmoid MLP's vanishing layers are one run, one line in the banner.
        harness.run_cell(page, 1)
        findings = printed(page, "FINDINGS", 1)
        vanishing = [f for f in findings if f[0] == "vanishing"]
        assert len(vanishing) == 1 and len(vanishing[0][1]) >= 10, findings
        banner = root.locator(".hv-banner")
        banner.wait_for(state="visible", timeout=30_000)
        lines = banner.locator(".hv-findings > li")
        assert lines.count() == len(findings)
        text = banner.inner_text()
        assert f"vanishes from module '{vanishing[0][1][0]}' down to module '0'" in text
        assert "more" not in text  # nothing behind a "+ N more" toggle

        # Replay: off until turned on; on, the bar says so and what is not run yet is faded.
        switch = root.locator(".hv-replay-toggle")
        assert switch.inner_text() == "Replay: off" and switch.get_attribute("aria-pressed") == "false"
        faded = "() => document.querySelector('.hookviz-widget').cy.nodes().filter(n => Number(n.style('opacity')) < 1).length"
        assert page.evaluate(faded) == 0
        switch.click()
        assert switch.inner_text() == "Replay: on" and switch.get_attribute("aria-pressed") == "true"
        assert "hv-replay-on" in root.locator(".hv-replay").get_attribute("class")
        assert "Replay on" in root.locator(".hv-replay-state").inner_text()
        page.wait_for_function(faded.replace("() =>", "() => 0 <"), timeout=10_000)
        root.locator(".hv-replay").screenshot(path=str(ARTIFACTS / "panels_replay_on.png"))
        painted = harness.paint_count(page)
        root.locator(".hv-view-modules").click()
        harness.wait_painted(page, painted + 1)
        page.wait_for_timeout(600)
        assert switch.inner_text() == "Replay: off"
        assert page.evaluate(faded) == 0, "the Module tree view shows faded boxes"
        assert page.evaluate("() => document.querySelector('.hookviz-widget').cy.nodes().length") > 20
        root.screenshot(path=str(ARTIFACTS / "panels_module_tree_after_replay.png"))
        painted = harness.paint_count(page)
        root.locator(".hv-view-ops").click()
        harness.wait_painted(page, painted + 1)

        # Contrast, Light: an open box (its title over the canvas), the inspector, the leaf table.
        painted = harness.paint_count(page)
        harness.run_cell(page, 2)
        harness.wait_painted(page, painted + 1, kind="layout")
        harness.click_node(page, "0.weight")
        page.wait_for_selector(".hookviz-widget .hv-apply", timeout=30_000)
        root.locator(".hv-chart .main-svg").first.wait_for(state="visible", timeout=30_000)
        light = harness.assert_contrast(page, 0, "JupyterLab Light", ARTIFACTS / "panels_light.png")
        assert any(t["open"] for t in light["titles"]), "no open box: its title was not measured"

        # Dark: the widget drawn before the switch reads the new theme; so does one drawn after it.
        harness.switch_theme(page, "JupyterLab Dark")
        dark = harness.assert_contrast(
            page, 0, "JupyterLab Dark, drawn before the switch", ARTIFACTS / "panels_dark_before.png"
        )
        assert {t["text"] for t in dark["titles"]} == {t["text"] for t in light["titles"]}
        harness.run_cell(page, 3)
        harness.widget_root(page, 1)
        harness.wait_painted(page, 1, index=1)
        page.locator(".hookviz-widget").nth(1).locator(".hv-chart .main-svg").first.wait_for(
            state="visible", timeout=30_000
        )
        harness.assert_contrast(
            page, 1, "JupyterLab Dark, drawn after the switch", ARTIFACTS / "panels_dark_after.png"
        )
        harness.switch_theme(page, "JupyterLab Light")


# ----- the leaf table ---------------------------------------------------------------------------


def test_every_leaf_is_reachable_and_most_changed_comes_first(lab):
    ARTIFACTS.mkdir(exist_ok=True)
    with harness.chromium_page() as page, harness.diagnostics(page, ARTIFACTS / "panels_leaves_failure.png"):
        harness.open_notebook(page, lab, "deep.ipynb")
        harness.run_cell(page, 0)
        root = harness.widget_root(page)
        harness.wait_painted(page, 1)
        harness.run_cell(page, 1)
        change = printed(page, "CHANGE", 1)
        assert len(change) == 120  # 60 Linear layers' weights and biases
        table = root.locator(".hv-leaves")
        page.wait_for_function(
            "() => document.querySelector('.hookviz-widget .hv-leaves tr.hv-changed') !== null",
            timeout=60_000,
        )
        table.locator(".hv-most-changed").click()
        assert table.locator(".hv-most-changed").get_attribute("aria-pressed") == "true"

        # Columns fit the panel at the default width.
        fit = table.evaluate(
            "(el) => { const t = el.querySelector('table'), r = el.getBoundingClientRect();"
            " return {scroll: el.scrollWidth, client: el.clientWidth,"
            " outside: [...t.querySelectorAll('th')].filter(th => th.getBoundingClientRect().right > r.right + 0.5)"
            ".map(th => th.textContent)}; }"
        )
        assert fit["scroll"] <= fit["client"] and fit["outside"] == [], fit
        table.screenshot(path=str(ARTIFACTS / "panels_leaves_most_changed.png"))

        # Page through: every leaf once, in Python's order of |log10(norm / baseline norm)|.
        seen: list[str] = []
        pages = 0
        while True:
            seen += table.locator("tr[data-leaf]").evaluate_all("(rows) => rows.map(r => r.dataset.leaf)")
            pages += 1
            following = table.locator(".hv-page-next")
            if following.is_disabled():
                break
            following.click()
        assert pages == 3 and len(seen) == len(set(seen)) == len(change), (pages, len(seen))
        assert set(seen) == set(change)
        values = [change[name] for name in seen]
        compared = 0
        for earlier, later in zip(values, values[1:]):
            # the page sorts the run's float32 statistics, Python recomputes in float64: equal
            # factors (x 0.001 on 40 leaves) differ in the 8th digit
            assert earlier >= later - 1e-6, (earlier, later)
            compared += 1
        assert compared == len(change) - 1
        # The largest decrease (x 0.001, |log10| = 3) leads; it does not sort last.
        assert math.isclose(values[0], 3, abs_tol=1e-6) and values[-1] == 0
        assert "leaves 101–120 of 120" in table.inner_text()
