"""Notebook 06 from a folder outside the repository, and its distributed view following the picker.

``notebooks/06_distributed.ipynb`` is copied alone into a temporary folder (no ``examples/`` beside
it: the notebook writes the DDP script it starts) and run top to bottom in a real JupyterLab: a
``torchrun`` job of 2 gloo ranks, its gathered history, and the widget on rank 0's run. One cell is
added at the end of the copy: it prints, from the kernel, where ``hookviz`` was imported from and
the numbers the kernel holds for every rank and step (``history.local`` / ``history.reduced``, the
findings of each rank at each step). Then the rank picker and the step slider are used in the
page, and every part of the view is checked against those numbers: the watch bar's words, the
graph's colours, the chart, the heatmap (its rows, title and step marker), the banner's findings,
the legend, and the leaf table.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import nbformat
import pytest

sys.path.insert(0, str(Path(__file__).parent))
import harness  # noqa: E402

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

ARTIFACTS = Path(__file__).parent / "artifacts"
NOTEBOOK = harness.REPO / "notebooks" / "06_distributed.ipynb"
MARK = "HOOKVIZ-E2E-NUMBERS "

# Added at the end of the copy: the kernel's own numbers, for every picker state, as one JSON line.
KERNEL_NUMBERS = """\
import json, math, os
from hookviz.colors import norm_color
from hookviz.watching.plots import color_range
from hookviz.watching.rank_view import RankView

_numbers = {"hookviz": hookviz.__file__, "cwd": os.getcwd(), "files": sorted(os.listdir(".")), "states": {}}
_parameters = [c for c, k in enumerate(history.kinds) if k == "parameter"]
for _rank in [None, *history.ranks]:
    _table = history.reduced if _rank is None else history.local[history.ranks.index(_rank)]
    _scale = color_range(history.history(_rank))
    for _i, _step in enumerate(history.steps):
        _stats = {history.names[c]: _table[_i, c].tolist() for c in _parameters}
        _layers = {}
        for _name, _s in _stats.items():
            _layers.setdefault(_name.rsplit(".", 1)[0], []).append(_s[0])
        _layers = {m: math.sqrt(sum(v * v for v in vs)) for m, vs in _layers.items()}
        # DDP's wrapped module and the root (DDP itself) hold every parameter
        _layers["module"] = _layers[""] = math.sqrt(sum(s[0] ** 2 for s in _stats.values()))
        _numbers["states"][f"{'reduced' if _rank is None else _rank}/{_step}"] = {
            "stats": _stats,
            "layers": _layers,
            "colors": {f"group:{m}": norm_color(v, _scale) for m, v in _layers.items()},
            "findings": [f.message for f in RankView(history, _rank).diagnose(_step)],
        }
print("HOOKVIZ-E2E-NUMBERS " + json.dumps(_numbers))"""

# What the page shows of the watch view now, read from the DOM, plotly's divs and cytoscape.
PAGE_STATE = """() => {
    const root = document.querySelector('.hookviz-widget');
    const text = (sel) => root.querySelector(sel)?.textContent ?? null;
    const leaves = {};
    for (const row of root.querySelectorAll('.hv-leaves tr[data-leaf]')) {
        leaves[row.dataset.leaf] = Object.fromEntries([...row.querySelectorAll('td[data-column]')]
            .map((td) => [td.dataset.column, td.textContent]));
    }
    const chart = root.querySelector('.hv-chart');
    const heat = root.querySelector('.hv-heatmap');
    const colors = {};
    root.cy.nodes('[?isGroup]').forEach((n) => { colors[n.id()] = n.data('color'); });
    return {
        rank: root.querySelector('.hv-watch-rank').value,
        step: text('.hv-watch-step'),
        title: text('.hv-watch b'),
        parts: [...root.querySelectorAll('.hv-watch-parts li')].map((li) => li.textContent),
        leavesHidden: root.querySelector('.hv-leaves').hidden,
        leavesTitle: text('.hv-leaves h4'),
        leaves,
        chartTitle: chart?.layout?.title?.text ?? null,
        chartX: chart?.data?.[0]?.x ?? null,
        chartY: chart?.data?.[0]?.y ?? null,
        heatTitle: heat?.layout?.title?.text ?? null,
        heatX: heat?.data?.[0]?.x ?? null,
        heatY: heat?.data?.[0]?.y ?? null,
        heatZ: heat?.data?.[0]?.z ?? null,
        heatShapes: (heat?.layout?.shapes ?? []).map((s) => ({x: s.x0, dash: s.line?.dash ?? null})),
        legend: text('.hv-legend-title'),
        bannerHead: [...root.querySelectorAll('.hv-banner .hv-banner-head')].map((e) => e.textContent),
        banner: text('.hv-banner'),
        colors,
    };
}"""


@pytest.fixture
def lab(lab_folder):
    root = lab_folder.root
    assert not root.resolve().is_relative_to(harness.REPO), "the copy must sit outside the repository"
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    # nothing reached by a path into the repository: the notebook writes the script it starts
    assert not [c.source for c in notebook.cells if c.cell_type == "code" and "../" in c.source]
    notebook.cells.append(nbformat.v4.new_code_cell(KERNEL_NUMBERS))
    nbformat.write(notebook, root / NOTEBOOK.name)
    return lab_folder


def _words(rank: str) -> str:
    """How the view names a picker state's norms (hookviz.widget.watch_view.watch_label)."""
    return "reduced gradient norms" if rank == "reduced" else f"rank {rank}'s local gradient norms"


def _wait_for_state(page, rank: str, step: int) -> dict:
    """Poll the page until every labelled part shows ``rank`` and ``step``; the last state read."""
    words = _words(rank)
    state: dict = {}
    for _ in range(300):
        state = page.evaluate(PAGE_STATE)
        if (
            state["rank"] == rank
            and (state["step"] or "").startswith(f"{step} (")
            and (state["leavesTitle"] or "").endswith(f"step {step}")
            and words in (state["leavesTitle"] or "")
            and words in (state["chartTitle"] or "")
            and (state["chartTitle"] or "").endswith(f"step {step}")
            and any(s["x"] == step and s["dash"] is None for s in state["heatShapes"])
        ):
            return state
        page.wait_for_timeout(200)
    raise AssertionError(f"the page never showed {rank} at step {step}: {json.dumps(state)[:3000]}")


def _close(shown: str, expected: float, digits: int = 3) -> bool:
    """``shown`` (the page's text of a number) is ``expected`` to the digits it shows."""
    if not math.isfinite(expected):
        return shown.lower() in ("nan", "inf", "-inf")
    value = float(shown)
    return abs(value - expected) <= 0.6 * 10 ** (math.floor(math.log10(abs(expected) or 1)) - digits + 1)


def _check_state(page, numbers: dict, rank: str, step: int) -> int:
    """Every part of the view at ``rank`` / ``step`` against the kernel's numbers; how many values
    were compared."""
    state = _wait_for_state(page, rank, step)
    expected = numbers["states"][f"{rank}/{step}"]
    words = _words(rank)
    compared = 0
    # The watch bar: its title names the picker state, every part names what it shows and when.
    assert ("reduced" if rank == "reduced" else f"rank {rank}") in state["title"], state["title"]
    assert len(state["parts"]) == 4, state["parts"]
    for part in state["parts"]:
        when = "every kept step" if part.startswith("Heatmap") else f"step {step}"
        assert words in part and when in part, (words, when, part)
    assert words in state["legend"] and state["legend"].endswith(f"step {step}"), state["legend"]
    # The leaf table: shown, that rank's and step's statistics of every parameter.
    assert not state["leavesHidden"]
    assert set(state["leaves"]) == set(expected["stats"]), (state["leaves"], expected["stats"])
    for name, (norm, largest, nonfinite, _) in expected["stats"].items():
        cells = state["leaves"][name]
        assert _close(cells["norm"], norm), (rank, step, name, cells, norm)
        assert math.isnan(largest) or _close(cells["max_abs"], largest), (rank, step, name, cells, largest)
        assert cells["nonfinite"] == str(int(nonfinite)), (name, cells)
        compared += 3
    # The chart: each layer's norm at that rank and step.
    chart = dict(zip(state["chartX"], state["chartY"]))
    layers = {m: v for m, v in expected["layers"].items() if m not in ("", "module")}
    assert set(chart) == set(layers), (chart, layers)
    for module, norm in layers.items():
        assert chart[module] == pytest.approx(norm, rel=1e-6), (rank, step, module, chart[module], norm)
        compared += 1
    # The heatmap: that rank's (or the reduced) log10 norms, the shown step marked.
    assert ("reduced" if rank == "reduced" else f"rank {rank}") in state["heatTitle"], state["heatTitle"]
    column = state["heatX"].index(step)
    for row, name in enumerate(state["heatY"]):
        norm = expected["stats"][name][0]
        assert state["heatZ"][row][column] == pytest.approx(math.log10(norm), abs=2e-3), (name, norm)
        compared += 1
    assert len(state["heatY"]) == len(expected["stats"])
    # The graph: each drawn module box in that rank's and step's colour.
    drawn = {element: color for element, color in state["colors"].items() if element in expected["colors"]}
    assert drawn, f"no watched module box is drawn: {state['colors']}"
    for element, color in drawn.items():
        assert color == expected["colors"][element], (rank, step, element, color, expected["colors"][element])
        compared += 1
    # The banner: that rank's findings at that step, the head naming the step and the rank.
    picker = "all ranks (reduced)" if rank == "reduced" else f"rank {rank} (local)"
    if expected["findings"]:
        assert f"⚠ Watch step {step} ({picker}):" in " | ".join(state["bannerHead"]), state["bannerHead"]
    # the onsets (over every kept step) are the picked rank's too, and say so; rank 1 has one
    started = [head for head in state["bannerHead"] if head.startswith("⚠ When it started")]
    assert started in ([], [f"⚠ When it started, and where ({picker}):"]), state["bannerHead"]
    assert started or rank != "1", state["bannerHead"]
    for message in expected["findings"]:
        assert message in state["banner"], (rank, step, message, state["banner"])
        compared += 1
    return compared


def _pick_rank(root, rank: str) -> None:
    root.locator(".hv-watch-rank").select_option(rank)


def test_notebook_06_from_a_copied_folder_follows_the_picker(lab):
    folder = lab.root
    ARTIFACTS.mkdir(exist_ok=True)
    with (
        harness.chromium_page() as page,
        harness.diagnostics(page, ARTIFACTS / "notebook06_failure.png") as console,
    ):
        harness.open_notebook(page, lab, NOTEBOOK.name)
        harness.run_all_cells(page)
        printed = page.locator(".jp-OutputArea-output").filter(has_text=MARK)
        printed.wait_for(timeout=400_000)
        errors = page.locator(".jp-RenderedText[data-mime-type='application/vnd.jupyter.error']")
        assert errors.count() == 0, errors.all_inner_texts()
        numbers = json.loads(printed.inner_text().split(MARK, 1)[1].strip().splitlines()[0])
        # The kernel ran in the copied folder, on the package under test (PYTHONPATH), not on a
        # path the notebook reaches into the repository by.
        assert Path(numbers["cwd"]).resolve() == folder.resolve()
        assert Path(numbers["hookviz"]).resolve() == (harness.REPO / "hookviz" / "__init__.py").resolve()
        assert "examples" not in numbers["files"] and "ddp_watch.py" not in numbers["files"]
        assert len(numbers["states"]) == 3 * 12

        root = harness.widget_root(page)
        root.scroll_into_view_if_needed()
        harness.wait_painted(page)
        compared = {}
        # The notebook shows rank 1 at the bad step 6; then the picker: rank 0, the reduced
        # gradients, another step by the slider, and rank 1 at that step.
        compared["1/6"] = _check_state(page, numbers, "1", 6)
        _pick_rank(root, "0")
        compared["0/6"] = _check_state(page, numbers, "0", 6)
        _pick_rank(root, "reduced")
        compared["reduced/6"] = _check_state(page, numbers, "reduced", 6)
        root.locator(".hv-watch-slider").fill("3")
        compared["reduced/3"] = _check_state(page, numbers, "reduced", 3)
        _pick_rank(root, "1")
        compared["1/3"] = _check_state(page, numbers, "1", 3)
        # per state: 6 parameters x 3 leaf cells, 3 chart layers, 6 heatmap cells, the drawn
        # boxes, the findings
        assert all(count >= 6 * 3 + 3 + 6 + 1 for count in compared.values()), compared
        # the numbers differ between the states (the picker changes what is shown)
        norms = {key: numbers["states"][key]["stats"]["module.0.weight"][0] for key in compared}
        assert len({round(v, 6) for v in norms.values()}) == len(norms), norms
        assert not [line for line in console if line.startswith("pageerror")]
        page.wait_for_timeout(300)
        root.screenshot(path=str(ARTIFACTS / "notebook06_rank1_step3.png"))
