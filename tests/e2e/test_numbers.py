"""Colours and numbers of the widget in a real JupyterLab and headless Chromium.

- Red (hookviz.colors.NAN_COLOR, and the error colour) appears only on NaN/Inf elements and
  error text: checked over every element's computed colours and every cytoscape node's style of a
  widget that shows a NaN run and a failed search. The failed search's error goes with the next
  click.
- The leaf table: one number format per column, and no value split inside a number.
- ``w.select`` in the cell that makes the widget opens the boxes around the node it selects.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import harness  # noqa: E402

from hookviz.colors import NAN_COLOR  # noqa: E402

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

ARTIFACTS = Path(__file__).parent / "artifacts"

# The canonical example, then a NaN: an edit multiplies x's gradient by nan; y is edited into
# whole numbers of seven digits beside z's fractions, for the leaf table's columns.
NAN_RUN = """\
w.apply_edit("MulBackward0_0", "grad_inputs[0]", "grad * nan")
w.apply_edit("MulBackward0_1", "grad_inputs[0]", "grad * 1234567.3")
w.apply_edit("SubBackward0_0", "grad_inputs[1]", "grad - 5499721")
w.rerun()"""

# A 40-block residual stack: its first view draws `blocks` as one closed box.
SELECTED = """\
import torch, hookviz
from hookviz.examples import ResidualStack
torch.manual_seed(0)
deep = hookviz.Widget(hookviz.Session(ResidualStack(40, width=4), (torch.randn(3, 4),)))
inside = next(n for n, r in deep.run.nodes.items() if r.module == "blocks.7.fc" and r.kind == "op")
deep.select(inside)
print("INSIDE", inside)
deep"""


@pytest.fixture
def lab(lab_folder):
    harness.write_notebook(lab_folder.root / "numbers.ipynb", [harness.CANONICAL, NAN_RUN, SELECTED])
    return lab_folder


def _rgb(hex_color: str) -> str:
    r, g, b = (int(hex_color[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgb({r}, {g}, {b})"


# Every element of the widget whose colour, background or border is red, and why it may be.
RED_ELEMENTS = """([index, reds]) => {
  const root = document.querySelectorAll('.hookviz-widget')[index];
  const out = [];
  for (const el of root.querySelectorAll('*')) {
    const css = getComputedStyle(el);
    if (css.display === 'none' || css.visibility === 'hidden' || !el.getClientRects().length) continue;
    const colours = [css.color, css.backgroundColor, css.borderTopColor, css.borderLeftColor];
    const red = colours.some((c) => reds.includes(c));
    if (!red) continue;
    // What may be red: error text, NaN values, the NaN/Inf finding, the legend's NaN/Inf key.
    const error = el.closest('.hv-error') && !el.closest('.hv-static-note') && el.textContent.trim();
    const nan = el.closest('.hv-bad, .hv-finding-nan');
    const key = el.closest('.hv-sw') && el.closest('.hv-sw').textContent.trim() === 'NaN/Inf';
    out.push({tag: el.tagName, cls: String(el.className), text: el.textContent.slice(0, 60),
              allowed: !!(error || nan || key), error: !!error, nan: !!nan, key: !!key});
  }
  return out;
}"""

# The ids of the graph payload's nodes and boxes that hold NaN/Inf (Python's `nan` flag).
NAN_IDS = """const root = document.querySelectorAll('.hookviz-widget')[index];
  const raw = root.hookviz.model.get('graph');
  const bytes = raw instanceof ArrayBuffer || ArrayBuffer.isView(raw);
  const graph = bytes ? JSON.parse(new TextDecoder().decode(raw)) : raw;
  const nanIds = new Set([...graph.nodes, ...graph.groups].filter((x) => x.nan).map((x) => x.id));"""

HAS_NAN = "(index) => { " + NAN_IDS + " return nanIds.size > 0; }"

# Every cytoscape element whose fill or border is NaN's red, and whether it holds NaN/Inf.
RED_NODES = (
    """([index, red]) => { """
    + NAN_IDS
    + r"""
  const cy = root.cy;
  const out = {red: [], nan: 0, all: cy.nodes().length};
  for (const n of cy.nodes()) {
    const nan = nanIds.has(n.id());
    if (nan) out.nan += 1;
    // cytoscape writes "rgb(229,57,53)", computed styles "rgb(229, 57, 53)"
    const fill = n.style('background-color').replace(/\s/g, '');
    const border = n.style('border-color').replace(/\s/g, '');
    if (fill === red.replace(/\s/g, '') || border === red.replace(/\s/g, '')) out.red.push({id: n.id(), nan, fill, border});
  }
  return out;
}"""
)

# For each value in the leaf table and the inspector: the numbers whose text spans two lines.
SPLIT_NUMBERS = """(index) => {
  const root = document.querySelectorAll('.hookviz-widget')[index];
  const split = [];
  let numbers = 0;
  for (const el of root.querySelectorAll('.hv-leaves-table code, .hv-inspector .hv-value')) {
    const node = el.firstChild;
    if (!node || node.nodeType !== Node.TEXT_NODE) continue;
    const re = /-?[0-9][0-9.e+\\-]*|NaN|-?inf/g;
    let m;
    while ((m = re.exec(node.data))) {
      const range = document.createRange();
      range.setStart(node, m.index);
      range.setEnd(node, m.index + m[0].length);
      const tops = new Set([...range.getClientRects()].map((r) => Math.round(r.top)));
      numbers += 1;
      if (tops.size > 1) split.push(m[0]);
    }
  }
  return {numbers, split};
}"""


def test_red_only_on_nan_and_errors_one_format_per_column_and_select_opens_boxes(lab):
    ARTIFACTS.mkdir(exist_ok=True)
    nan_red, error_reds = _rgb(NAN_COLOR), [_rgb("#c62828"), _rgb("#ff8a80")]
    with harness.chromium_page() as page, harness.diagnostics(page, ARTIFACTS / "numbers_failure.png"):
        harness.open_notebook(page, lab, "numbers.ipynb")
        harness.run_cell(page, 0)
        root = harness.widget_root(page)
        harness.wait_painted(page, 1)
        harness.run_cell(page, 1)
        page.wait_for_function(HAS_NAN, arg=0, timeout=60_000)
        harness.wait_painted(page, 2)
        # A failed search: its error is red, and the only red text besides NaN's.
        search = root.locator(".hv-search")
        search.fill("no such thing")
        search.press("Enter")
        page.wait_for_function(
            "() => document.querySelector('.hookviz-widget .hv-toolbar .hv-error')?.textContent.includes('nothing')",
            timeout=10_000,
        )
        # A click on the NaN finding selects its node, whose inspector shows NaN values.
        root.locator(".hv-finding-nan.hv-clickable").first.click()
        page.wait_for_function(
            "() => document.querySelector('.hookviz-widget .hv-inspector .hv-bad') !== null", timeout=30_000
        )
        # The click took the search's error away.
        assert root.locator(".hv-toolbar .hv-error").first.inner_text() == ""
        search.fill("still nothing")
        search.press("Enter")
        page.wait_for_function(
            "() => document.querySelector('.hookviz-widget .hv-toolbar .hv-error')?.textContent.includes('still')",
            timeout=10_000,
        )
        root.screenshot(path=str(ARTIFACTS / "numbers_nan_run.png"))

        reds = page.evaluate(RED_ELEMENTS, [0, [nan_red, *error_reds]])
        assert [r for r in reds if not r["allowed"]] == []
        assert any(r["error"] for r in reds) and any(r["nan"] for r in reds) and any(r["key"] for r in reds)
        nodes = page.evaluate(RED_NODES, [0, nan_red])
        assert nodes["nan"] > 0 and nodes["all"] > nodes["nan"]
        assert [n for n in nodes["red"] if not n["nan"]] == []
        assert len([n for n in nodes["red"] if n["nan"]]) == nodes["nan"]

        # The leaf table: one number format per column (plain or exponent), no number split.
        cells = page.evaluate(
            """() => Object.fromEntries(['norm', 'min', 'max', 'ratio'].map((c) => [c,
                 [...document.querySelectorAll(`.hookviz-widget .hv-leaves-table td[data-column="${c}"]`)]
                   .map((td) => td.textContent)]))"""
        )
        compared = 0
        exponent = re.compile(r"^-?\d\.\d\de[+-]\d+×?$")
        for column, texts in cells.items():
            assert len(texts) == 3, column
            numbers = [t for t in texts if t not in ("–", "0", "NaN", "NaN/Inf", "inf", "-inf")]
            forms = {bool(exponent.match(t)) for t in numbers}
            assert len(forms) <= 1, (column, texts)
            compared += len(numbers)
        assert compared >= 6
        # Narrow the panel until the values must wrap: they wrap between numbers only.
        page.set_viewport_size({"width": 700, "height": 1400})
        split = page.evaluate(SPLIT_NUMBERS, 0)
        assert split["numbers"] >= 6 and split["split"] == [], split
        page.set_viewport_size({"width": 1500, "height": 1400})

        # w.select before the widget is drawn: the boxes around the node open in the first view.
        harness.run_cell(page, 2)
        harness.widget_root(page, 1)
        harness.wait_painted(page, 1, index=1)
        inside = page.wait_for_function(
            "() => [...document.querySelectorAll('.jp-OutputArea-output')].map((o) => o.textContent)"
            ".join('\\n').match(/INSIDE (\\S+)/)?.[1]",
            timeout=60_000,
        ).json_value()
        page.wait_for_function(
            "(id) => document.querySelectorAll('.hookviz-widget')[1].cy.getElementById(id).nonempty()",
            arg=inside,
            timeout=30_000,
        )
        harness.widget_root(page, 1).screenshot(path=str(ARTIFACTS / "numbers_selected.png"))
