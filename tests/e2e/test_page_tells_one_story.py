"""What the page shows agrees with what Python sent, read in headless Chromium from saved pages
(``Widget.save_html``: the notebook's own bundle and state, no kernel) of a real ReLU network:

- every percentage drawn anywhere in the widget (inspector, banner, leaf table, watch bar,
  chart) is a string the payload carries, in the part of the payload that region draws;
- a module's inspector title is its box's label on the graph and its type, with its full name;
- with a watch shown on a run's graph, a box the watch did not record says "not watched" in the
  inspector, as its colour on the graph does, and a watched one its norm at the step;
- a failed search's error leaves the toolbar's height, the graph and every node where they were,
  and a click afterwards lands on the node under the pointer.
"""

from __future__ import annotations

import json
import re
import sys
from collections import OrderedDict
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).parent))
import harness  # noqa: E402

import hookviz  # noqa: E402
from hookviz.colors import NOT_WATCHED_COLOR  # noqa: E402

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

ARTIFACTS = Path(__file__).parent / "artifacts"
PERCENT = re.compile(r"(?:[<>] )?\d+(?:\.\d+)?%")


class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc, self.act, self.out = nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 3)

    def forward(self, x):
        return self.out(self.act(self.fc(x)))


def _model() -> nn.Module:
    torch.manual_seed(0)
    encoder = nn.Sequential(
        OrderedDict([("0", nn.Linear(8, 32)), ("1", nn.ReLU()), ("2", nn.Linear(32, 32)), ("3", nn.ReLU())])
    )
    return nn.Sequential(OrderedDict([("encoder", encoder), ("head", Head())]))


def _pages(folder: Path) -> tuple[Path, Path]:
    """The run's page, and the page of a 3-step watch of the same model drawn on that run's graph."""
    model = _model()
    x, y = torch.randn(32, 8), torch.randint(0, 3, (32,))
    loss_fn = lambda out: F.cross_entropy(out, y)  # noqa: E731
    run_page = hookviz.show(model, (x,), loss_fn=loss_fn).save_html(folder / "run.html")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with hookviz.watch(model) as w:
        for _ in range(3):
            optimizer.zero_grad()
            loss_fn(model(x)).backward()
            optimizer.step()
    run = hookviz.Session(model, (x,), loss_fn=loss_fn).run()
    watch_page = hookviz.show(w, on=run).save_html(folder / "watch.html")
    return run_page, watch_page


def _state(page_file: Path) -> dict:
    """The payload a saved page carries (its ``hookviz-state`` script)."""
    html = page_file.read_text(encoding="utf-8")
    start = html.index('<script type="application/json" id="hookviz-state">') + len(
        '<script type="application/json" id="hookviz-state">'
    )
    return json.loads(html[start : html.index("</script>", start)])


def _strings(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def _percentages(value) -> set[str]:
    return {p for s in _strings(value) for p in PERCENT.findall(s)}


# Every text of the widget drawn now (own text of an element, or an SVG text), with the region it
# sits in and the selection on screen.
_TEXTS = """() => {
    const root = document.querySelector('.hookviz-widget');
    const regions = ['.hv-inspector', '.hv-editor', '.hv-banner', '.hv-leaves', '.hv-watch', '.hv-chart',
                     '.hv-heatmap', '.hv-legend', '.hv-toolbar', '.hv-replay', '.hv-edits'];
    const out = [];
    for (const el of root.querySelectorAll('*')) {
        if (el.getClientRects().length === 0) continue;
        const own = [...el.childNodes].filter((n) => n.nodeType === 3).map((n) => n.textContent).join('');
        if (!own.trim()) continue;
        const region = regions.find((r) => el.closest(r)) || 'other';
        out.push({region, text: own});
    }
    return {texts: out, selected: root.hookviz.model.get('selected') || ''};
}"""


def _region_payload(state: dict, region: str, selected: str):
    """The part of the payload a region of the page draws."""
    inspectors = state.get("__inspectors", {})
    return {
        ".hv-inspector": [inspectors.get(selected, {}), state["graph"]],
        ".hv-editor": [inspectors.get(selected, {}), state.get("edits")],
        ".hv-banner": state.get("diagnosis"),
        # the run's leaf table, or in the watch view the watch's (watch_view["leaves"])
        ".hv-leaves": [state.get("leaf_summary"), (state.get("watch_view") or {}).get("leaves")],
        ".hv-watch": state.get("watch_view"),
        ".hv-chart": state.get("chart"),
        ".hv-heatmap": state.get("watch_heatmap"),
        ".hv-legend": [state["graph"].get("legend"), state.get("watch_view")],
    }.get(region, state)


def _search(page, text: str) -> None:
    search = page.locator(".hookviz-widget .hv-search")
    search.fill(text)
    search.press("Enter")


def _compare_percentages(page, state: dict, what: str) -> int:
    """Every percentage drawn now is one the region's payload carries; returns how many were compared."""
    drawn = page.evaluate(_TEXTS)
    compared, missing = 0, []
    for item in drawn["texts"]:
        for shown in PERCENT.findall(item["text"]):
            compared += 1
            if shown not in _percentages(_region_payload(state, item["region"], drawn["selected"])):
                missing.append((item["region"], shown, item["text"][:120]))
    assert missing == [], f"{what}: percentages the payload does not carry: {missing}"
    return compared


def _selected_when(page, element: str) -> None:
    page.wait_for_function(
        "(id) => { const s = document.querySelector('.hookviz-widget').cy.$(':selected');"
        " return s.length === 1 && s[0].id() === id; }",
        arg=element,
        timeout=10_000,
    )


def _settle(page) -> None:
    page.wait_for_function(
        "() => { const cy = document.querySelector('.hookviz-widget').cy;"
        " return !cy.animated() && !cy.nodes().some(n => n.animated()); }",
        timeout=30_000,
    )
    page.wait_for_timeout(300)


def test_the_page_shows_python_s_numbers_names_and_watch(tmp_path):
    harness.require_browser()
    ARTIFACTS.mkdir(exist_ok=True)
    run_page, watch_page = _pages(tmp_path)
    state = _state(run_page)
    with (
        harness.chromium_page(width=1280, height=1000) as page,
        harness.diagnostics(page, ARTIFACTS / "one_story_failure.png") as console,
    ):
        page.goto(run_page.as_uri())
        harness.wait_painted(page, 1)
        _settle(page)

        # A failed search: the toolbar, the graph and its nodes stay where they were.
        where = """() => { const root = document.querySelector('.hookviz-widget');
            const r = root.cy.container().getBoundingClientRect();
            return {toolbar: root.querySelector('.hv-toolbar').getBoundingClientRect().height, top: r.top,
                    left: r.left, nodes: Object.fromEntries(root.cy.nodes().map((n) => {
                        const p = n.renderedPosition(); return [n.id(), [r.left + p.x, r.top + p.y]]; }))}; }"""
        before = page.evaluate(where)
        _search(page, "no such module here")
        error = page.locator(".hookviz-widget .hv-search-group .hv-error")
        error.wait_for(state="visible", timeout=10_000)
        assert "nothing is named like" in error.inner_text()
        page.wait_for_timeout(300)  # a frame for any ResizeObserver
        after = page.evaluate(where)
        assert abs(after["toolbar"] - before["toolbar"]) < 0.5, (before["toolbar"], after["toolbar"])
        assert abs(after["top"] - before["top"]) < 0.5 and abs(after["left"] - before["left"]) < 0.5
        moved = [
            n
            for n, p in before["nodes"].items()
            if abs(p[0] - after["nodes"][n][0]) > 0.5 or abs(p[1] - after["nodes"][n][1]) > 0.5
        ]
        assert len(before["nodes"]) >= 5 and moved == [], moved
        page.locator(".hookviz-widget").screenshot(path=str(ARTIFACTS / "one_story_failed_search.png"))
        # A click lands on the node under the pointer (cytoscape knows where the graph is).
        node = page.evaluate(
            "() => { const cy = document.querySelector('.hookviz-widget').cy;"
            " return cy.nodes().filter((n) => { const p = n.renderedPosition();"
            " return !n.isParent() && !n.data('isGroup') && p.x > 20 && p.y > 80"
            " && p.x < cy.width() - 20 && p.y < cy.height() - 20; })[0].id(); }"
        )
        harness.click_node(page, node)
        _selected_when(page, node)

        # A module's title: its box's label on the graph and its type, then its full name.
        _search(page, "head.fc")
        _selected_when(page, "group:head.fc")
        label = page.evaluate(
            "() => document.querySelector('.hookviz-widget').cy.getElementById('group:head.fc').data('label')"
        )
        title = page.locator(".hookviz-widget .hv-inspector .hv-title").inner_text()
        assert label == "fc" and title.startswith("module fc · Linear"), (label, title)
        assert "full name head.fc" in title, title

        # Every percentage the page draws, over several selections, is one Python sent.
        compared = _compare_percentages(page, state, "run page, head.fc selected")
        for name in ["encoder.1", "encoder.3", "head.act", "encoder.0", "head.out", "encoder.2.weight"]:
            _search(page, name)
            page.wait_for_function(
                "() => !!document.querySelector('.hookviz-widget .hv-inspector .hv-title')", timeout=10_000
            )
            _settle(page)
            compared += _compare_percentages(page, state, f"run page, {name} selected")
        print(f"run page: {compared} percentages compared")
        assert compared >= 10, compared
        assert not [line for line in console if line.startswith("pageerror")]

    watch_state = _state(watch_page)
    with (
        harness.chromium_page(width=1280, height=1000) as page,
        harness.diagnostics(page, ARTIFACTS / "one_story_watch_failure.png") as console,
    ):
        page.goto(watch_page.as_uri())
        harness.wait_painted(page, 1)
        _settle(page)
        for relu in ["encoder.1", "encoder.3", "head.act"]:
            _search(page, relu)
            _selected_when(page, f"group:{relu}")
            color = page.evaluate(
                "(id) => document.querySelector('.hookviz-widget').cy.getElementById(id).data('color')",
                f"group:{relu}",
            )
            note = page.locator(".hookviz-widget .hv-inspector .hv-watch-note").inner_text()
            assert color == NOT_WATCHED_COLOR, (relu, color)
            assert note.startswith("Not watched:") and "no grad" not in note and "None" not in note, note
        step = watch_state["watch_view"]["step"]
        _search(page, "head.fc")
        _selected_when(page, "group:head.fc")
        note = page.locator(".hookviz-widget .hv-inspector .hv-watch-note").inner_text()
        assert note.startswith(f"Watch, step {step}: ‖grad‖ "), note
        page.locator(".hookviz-widget").screenshot(path=str(ARTIFACTS / "one_story_watch.png"))
        compared = _compare_percentages(page, watch_state, "watch page")
        print(f"watch page: {compared} percentages compared")
        assert not [line for line in console if line.startswith("pageerror")]
