"""Widget speed in a real JupyterLab + headless Debian Chromium (prints figures; asserts nothing on time).

    python benchmarks/widget.py [--nodes 5000] [--repeat 5]

Measures, with the page's own clock (``performance.now()`` marks the widget keeps on its root):
1. first paint of a ~5,000-node graph: from the widget's ``render()`` to cytoscape's first frame
   (target < 2 s; the graph opens collapsed by module, only what is visible is laid out), plus
   the Python side (``hookviz.show``) and the wall time from Shift+Enter to the first frame;
2. click-to-inspector: a click on a node on the canvas to the inspector drawn (target < 100 ms);
3. edit -> re-run -> repaint on the canonical example: Apply clicked to the edit listed, then
   Re-run clicked to the recoloured graph's first frame (target < 300 ms for the whole).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "e2e"))
import harness  # noqa: E402

BIG = """\
import time, torch, hookviz
from hookviz.examples import ResidualStack as Deep
torch.manual_seed(0)
started = time.perf_counter()
session = hookviz.Session(Deep({depth}), (torch.randn(4, 8),))
session.run()
recorded = time.perf_counter()
big = hookviz.Widget(session)
done = time.perf_counter()
print(f"python: {{big.summary['nodes']}} nodes; Session.run {{recorded - started:.3f}} s, Widget (Run -> JSON) {{done - recorded:.3f}} s")
big"""


def marks(page, index: int) -> dict:
    return page.evaluate(
        "(i) => { const h = document.querySelectorAll('.hookviz-widget')[i].hookviz;"
        " return {marks: {...h.marks}, paints: h.paints.map(p => ({...p}))}; }",
        index,
    )


def _elk_paint(data: dict) -> float:
    """When the ELK-refined layout was first painted, in ms after render()."""
    return next(p["at"] for p in data["paints"] if p["kind"] == "layout") - data["marks"]["render"]


def wait_paints(page, index: int, count: int, timeout: float = 120_000) -> None:
    page.wait_for_function(
        "([i, n]) => { const r = document.querySelectorAll('.hookviz-widget')[i];"
        " return r && Number(r.dataset.painted || 0) >= n; }",
        arg=[index, count],
        timeout=timeout,
    )


def click_to_inspector(page, index: int, node_ids: list[str], repeat: int) -> list[float]:
    times = []
    for k in range(repeat):
        node = node_ids[k % len(node_ids)]
        before = marks(page, index)["marks"].get("inspector", 0)
        harness.click_node(page, node, index)
        page.wait_for_function(
            "([i, t]) => (document.querySelectorAll('.hookviz-widget')[i].hookviz.marks.inspector || 0) > t",
            arg=[index, before],
            timeout=30_000,
        )
        m = marks(page, index)["marks"]
        times.append(m["inspector"] - m["tap"])
    return times


def edit_rerun_repaint(page, repeat: int) -> tuple[list[float], list[float]]:
    root = page.locator(".hookviz-widget").nth(0)
    apply_times, rerun_times = [], []
    harness.click_node(page, "SubBackward0_0", 0)
    page.wait_for_function(
        "() => document.querySelector('.hookviz-widget .hv-inspector .hv-title')?.textContent.includes('SubBackward0')"
    )
    for k in range(repeat):
        before = marks(page, 0)["marks"].get("edits", 0)
        root.locator(".hv-site").select_option("grad_inputs[0]")
        root.locator(".hv-expr").fill(f"grad + {k + 1}")
        root.locator(".hv-apply").click()
        page.wait_for_function(
            "(t) => document.querySelector('.hookviz-widget').hookviz.marks.edits > t",
            arg=before,
            timeout=30_000,
        )
        m = marks(page, 0)["marks"]
        apply_times.append(m["edits"] - m["apply"])
        painted = marks(page, 0)["paints"]
        root.locator(".hv-rerun").click()
        wait_paints(page, 0, len(painted) + 1, timeout=30_000)
        data = marks(page, 0)
        rerun_times.append(data["paints"][-1]["at"] - data["marks"]["rerun"])
        root.locator(".hv-reset").click()
        page.wait_for_function(
            "() => document.querySelectorAll('.hookviz-widget .hv-edits-list li').length === 0"
        )
        page.wait_for_timeout(50)
    return apply_times, rerun_times


def summary(name: str, values: list[float], target: float | None = None) -> str:
    median = statistics.median(values)
    goal = (
        ""
        if target is None
        else f"  (target < {target:g} ms: {'ok' if median < target else 'MISSED'})"
    )
    return f"{name}: median {median:.0f} ms, min {min(values):.0f}, max {max(values):.0f} over {len(values)}{goal}"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--nodes", type=int, default=5000, help="about how many graph nodes the large model has"
    )
    parser.add_argument("--repeat", type=int, default=5)
    options = parser.parse_args()
    depth = max(1, options.nodes // 9 + 1)  # a Block makes 9 graph nodes

    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        # One notebook per widget: JupyterLab detaches cells scrolled out of view, which would
        # shuffle the widgets' order in the page.
        harness.write_notebook(root / "canonical.ipynb", [harness.CANONICAL])
        harness.write_notebook(root / "large.ipynb", [BIG.format(depth=depth)])
        with (
            harness.jupyter_lab(root) as base,
            harness.chromium_page() as page,
            harness.diagnostics(
                page, harness.REPO / "tests" / "e2e" / "artifacts" / "benchmark-failure.png"
            ),
        ):
            harness.open_notebook(page, base, "canonical.ipynb")
            harness.run_cell(page, 0)
            harness.widget_root(page, 0)
            wait_paints(page, 0, 1)
            page.wait_for_function(
                "() => document.querySelector('.hookviz-widget').hookviz.paints.some(p => p.kind === 'layout')"
            )
            data = marks(page, 0)
            print(
                f"canonical example: first paint {data['paints'][0]['at'] - data['marks']['render']:.0f} ms after render() "
                f"(preset layers), ELK layout painted at {_elk_paint(data):.0f} ms"
            )

            inspect = click_to_inspector(
                page, 0, ["SubBackward0_0", "x", "AddBackward0_0"], options.repeat
            )
            print(summary("click-to-inspector (canonical)", inspect, 100))
            apply_times, rerun_times = edit_rerun_repaint(page, options.repeat)
            print(summary("apply edit -> edit listed", apply_times))
            print(summary("re-run -> repainted graph", rerun_times))
            print(
                summary(
                    "edit -> re-run -> repaint (sum)",
                    [a + b for a, b in zip(apply_times, rerun_times)],
                    300,
                )
            )

            harness.open_notebook(page, base, "large.ipynb")
            started = time.perf_counter()
            harness.run_cell(page, 0)
            harness.widget_root(page, 0)
            wait_paints(page, 0, 1, timeout=300_000)
            wall = time.perf_counter() - started
            if (
                marks(page, 0)["paints"][0]["count"] <= 250
            ):  # small enough for ELK: wait for its layout
                page.wait_for_function(
                    "() => document.querySelector('.hookviz-widget').hookviz.paints.some(p => p.kind === 'layout')",
                    timeout=60_000,
                )
            data = marks(page, 0)
            first = data["paints"][0]
            output = (
                page.locator(".jp-Notebook .jp-Cell")
                .nth(0)
                .locator(".jp-OutputArea-output")
                .first.inner_text()
            )
            print(output.strip().splitlines()[0])
            print(
                f"large graph: first paint {first['at'] - data['marks']['render']:.0f} ms after render() "
                f"(target < 2000 ms; {first['count']} elements drawn from Python's layers, graph view {first['ms']:.0f} ms"
                f"{'' if not any(p['kind'] == 'layout' for p in data['paints']) else f'; ELK layout painted at {_elk_paint(data):.0f} ms'}); "
                f"{wall:.1f} s wall from Shift+Enter, kernel included"
            )
            visible = page.evaluate(
                "() => document.querySelectorAll('.hookviz-widget')[0].cy.nodes()"
                ".filter(n => !n.isParent() && !n.data('isGroup')).map(n => n.id())"
            )
            if visible:
                inspect = click_to_inspector(page, 0, visible[:3], options.repeat)
                print(summary("click-to-inspector (large graph)", inspect, 100))
            group = page.evaluate(
                "() => document.querySelectorAll('.hookviz-widget')[0].cy.nodes('[?collapsed]').map(n => n.id())"
            )
            if group:
                count = len(marks(page, 0)["paints"])
                started = time.perf_counter()
                harness.click_node(page, group[0], 0)
                wait_paints(page, 0, count + 1, timeout=300_000)
                last = marks(page, 0)["paints"][-1]
                print(
                    f"expand group {group[0]!r}: {last['count']} elements laid out and painted in {last['ms']:.0f} ms "
                    f"({time.perf_counter() - started:.2f} s from the click)"
                )


if __name__ == "__main__":
    main()
