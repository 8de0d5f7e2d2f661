"""A real JupyterLab server and a headless Debian Chromium for the widget's browser tests and benchmark.

Setup facts: Chromium is ``/usr/bin/chromium`` from Debian (never ``playwright install``); JupyterLab
is started on 127.0.0.1 with a fixed token, a free port, a temporary root folder, its own settings
and workspaces folders, and no calls out (news, update checks).

The browser tests share one server per test session (``SharedLab``, started by the ``lab_folder``
fixture of ``tests/conftest.py``): each test gets its own folder under the server's root
(``Lab``), writes its notebooks there, and at its end its kernels are shut down and the server's
settings are put back, so no test sees another's kernel, tabs or theme.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import warnings
from contextlib import contextmanager
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TOKEN = "hookviz-e2e-token"
REPO = Path(__file__).resolve().parents[2]

# A GPT-2 (6 layers x 128, built from its config) and the 20-layer sigmoid MLP, each shown as the
# only cell of a notebook: the models the browser tests of the graph and its panels share.
GPT2 = """\
import torch, hookviz
from transformers import GPT2Config, GPT2LMHeadModel
from transformers.utils import logging; logging.set_verbosity_error()
torch.manual_seed(0)
config = GPT2Config(n_layer=6, n_embd=128, n_head=4, vocab_size=1000)
ids = torch.randint(0, 1000, (2, 32))
w = hookviz.show(GPT2LMHeadModel(config), (), kwargs={"input_ids": ids, "labels": ids},
                 loss_fn=lambda out: out.loss)
w"""

MLP = """\
import torch, torch.nn.functional as F, hookviz
from hookviz.examples import sigmoid_mlp
torch.manual_seed(0)
model = sigmoid_mlp(depth=20, width=64, inputs=8, classes=3)
x, labels = torch.randn(16, 8), torch.randint(0, 3, (16,))
w = hookviz.show(model, (x,), loss_fn=lambda out: F.cross_entropy(out, labels))
w"""

CANONICAL = """\
import torch, torch.nn as nn, torch.nn.functional as F, hookviz
class Canonical(nn.Module):
    def forward(self, x, y, z):
        return 2*x + 3*y - 5*z
x = torch.tensor([2., 3.], requires_grad=True); y = torch.tensor([6., 4.], requires_grad=True); z = torch.tensor([1., 5.], requires_grad=True)
target = torch.tensor([9., -1.])
w = hookviz.show(Canonical(), (x, y, z), loss_fn=lambda out: F.mse_loss(out, target))
w"""


def require_browser() -> None:
    """Skip when Debian chromium or playwright is missing here; in CI (CI=true) fail instead, so a
    missing install step cannot turn the browser tests green by skipping them."""
    missing = None
    if not Path(CHROMIUM).exists():
        missing = "Debian chromium is not installed (apt-get install -y chromium)"
    else:
        try:
            import playwright  # noqa: F401
        except ImportError:
            missing = "playwright is not installed (pip install -e '.[dev]')"
    if missing and os.environ.get("CI"):
        pytest.fail(f"{missing}; CI must install it (.ci/run)")
    if missing:
        pytest.skip(missing)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_notebook(path: Path, cells: list[str]) -> None:
    """A notebook with a python3 kernelspec (without one, Lab opens a kernel dialog that eats clicks)."""
    notebook = {
        "cells": [
            {
                "cell_type": "code",
                "execution_count": None,
                "metadata": {},
                "outputs": [],
                "source": source,
            }
            for source in cells
        ],
        "metadata": {
            "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
            "language_info": {"name": "python"},
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    path.write_text(json.dumps(notebook))


@contextmanager
def jupyter_lab(
    root: Path,
    timeout: float = 90.0,
    app: str = "lab",
    settings: Path | None = None,
    workspaces: Path | None = None,
    log: Path | None = None,
):
    """Start ``jupyter lab`` (or ``app="notebook"``: Notebook 7) serving ``root``; yields its base
    URL; stops it on exit. ``settings`` and ``workspaces``: JupyterLab's user settings and
    workspaces folders (default: the user's own); ``log``: where its output goes (default
    ``root / "jupyter.log"``)."""
    with _jupyter_process(root, timeout, app, settings, workspaces, log) as (base, _process):
        yield base


@contextmanager
def _jupyter_process(root, timeout, app, settings, workspaces, log):
    port = free_port()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.setdefault("JUPYTER_PLATFORM_DIRS", "1")
    log = log or root / "jupyter.log"
    lab_options = [
        "--LabApp.news_url=None",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        *([f"--LabApp.user_settings_dir={settings}"] if settings else []),
        *([f"--LabApp.workspaces_dir={workspaces}"] if workspaces else []),
    ]
    output = open(log, "wb")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyter",
            app,
            "--no-browser",
            "--allow-root",
            "--ip=127.0.0.1",
            f"--port={port}",
            f"--IdentityProvider.token={TOKEN}",
            f"--ServerApp.root_dir={root}",
            *(lab_options if app == "lab" else []),
        ],
        cwd=root,
        env=env,
        stdout=output,
        stderr=subprocess.STDOUT,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + timeout
        while True:
            if process.poll() is not None:
                raise RuntimeError(
                    f"jupyter {app} exited with {process.returncode}: {log.read_text()[-3000:]}"
                )
            try:
                with urllib.request.urlopen(f"{base}/api/status?token={TOKEN}", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"jupyter {app} did not answer in {timeout:.0f} s: {log.read_text()[-3000:]}"
                )
            time.sleep(0.3)
        yield base, process
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        output.close()


class Lab:
    """One browser test's folder in the shared JupyterLab (``SharedLab.folder``).

    Attributes:
        base: the server's URL (``http://127.0.0.1:<port>``).
        root: the folder on disk: the test writes its notebooks here; a kernel started for a
            notebook here runs in it.
        path: the same folder relative to the server's root, as it appears in URLs and in the
            server's sessions.
    """

    def __init__(self, base: str, root: Path, path: str):
        self.base, self.root, self.path = base, root, path

    def __repr__(self) -> str:
        return f"Lab({self.base}/tree/{self.path})"


class SharedLab:
    """One ``jupyter lab`` for every browser test of a session (Notebook 7's pages too: the
    ``notebook`` server extension serves ``/notebooks/...`` from the same process).

    Every cell of a notebook is in the page: JupyterLab 4 draws only the cells near the viewport
    ("windowing"), so a widget far down a notebook would not be there until scrolled to; windowing
    is turned off in this server's own settings folder. The settings and workspaces folders are
    this server's alone: a test that switches the theme writes there, not into the user's.
    """

    # JupyterLab's settings as every test starts with them: windowing off (see the class docstring).
    SETTINGS = {"@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"}}

    def __init__(self, folder: Path):
        self.root = folder / "root"
        self.settings = folder / "settings"
        self.workspaces = folder / "workspaces"
        self.log = folder / "jupyter.log"
        for path in (self.root, self.settings, self.workspaces):
            path.mkdir(parents=True, exist_ok=True)
        self.base: str | None = None
        self.process: subprocess.Popen | None = None
        self._count = 0
        self._shutdowns: list[threading.Thread] = []
        self.shutdown_errors: list[str] = []

    @contextmanager
    def running(self):
        """Start the server; stop it (and so its kernels) on exit."""
        self.reset_settings()
        with _jupyter_process(self.root, 120.0, "lab", self.settings, self.workspaces, self.log) as (
            base,
            process,
        ):
            self.base, self.process = base, process
            try:
                yield self
            finally:
                for thread in self._shutdowns:
                    thread.join(timeout=60)
                self.base = self.process = None
        if self.shutdown_errors:
            warnings.warn(
                "kernels left to the server's stop: " + "; ".join(self.shutdown_errors), stacklevel=1
            )

    def reset_settings(self) -> None:
        """Put the user settings back to ``SETTINGS`` (a theme switched by a test goes)."""
        shutil.rmtree(self.settings)
        for name, values in self.SETTINGS.items():
            (self.settings / name).parent.mkdir(parents=True, exist_ok=True)
            (self.settings / name).write_text(json.dumps(values))

    def alive(self) -> None:
        """Raise with the end of the server's log when it is not running any more."""
        if self.process is None or self.process.poll() is not None:
            code = None if self.process is None else self.process.returncode
            raise RuntimeError(f"the shared jupyter lab is not running (exit {code}): {self.log_tail()}")

    def log_tail(self, start: int = 0, limit: int = 6000) -> str:
        """The server's log from byte ``start`` on, its last ``limit`` characters."""
        with open(self.log, "rb") as f:
            f.seek(start)
            return f.read().decode(errors="replace")[-limit:]

    @contextmanager
    def folder(self, name: str):
        """A new folder under the server's root for one test (``Lab``); on exit, the kernels of
        every notebook in it are shut down and the settings are put back."""
        self.alive()
        self._count += 1
        path = f"{self._count:02d}-{re.sub(r'[^A-Za-z0-9_-]+', '-', name)[:60]}"
        (self.root / path).mkdir()
        try:
            yield Lab(self.base, self.root / path, path)
        finally:
            self.alive()
            self.shutdown_kernels(path)
            self.reset_settings()

    def _api(self, method: str, route: str):
        request = urllib.request.Request(f"{self.base}/api/{route}?token={TOKEN}", method=method)
        with urllib.request.urlopen(request, timeout=60) as response:
            body = response.read()
        return json.loads(body) if body else None

    def shutdown_kernels(self, path: str) -> None:
        """Shut down the kernel of every notebook session under ``path`` (relative to the root), in
        a thread: a kernel takes seconds to exit, and the next test need not wait for it."""
        ids = [s["id"] for s in self._api("GET", "sessions") if s["path"].startswith(path + "/")]

        def shutdown() -> None:
            for session in ids:
                try:
                    self._api("DELETE", f"sessions/{session}")
                except OSError as error:  # the server's stop shuts it down in any case
                    self.shutdown_errors.append(f"{path}: {error}")

        thread = threading.Thread(target=shutdown, name=f"shutdown {path}", daemon=True)
        thread.start()
        self._shutdowns.append(thread)


# The process's one headless Chromium (Playwright and the browser), started by the first
# chromium_page and stopped by close_browser (the test session's end: tests/conftest.py; atexit for
# a script). Each page gets a context of its own, so no page sees another's cookies, storage or cache.
_browser: list = []


def _shared_browser():
    if _browser and not _browser[1].is_connected():  # a crashed browser: start a new one
        close_browser()
    if not _browser:
        from playwright.sync_api import sync_playwright

        playwright = sync_playwright().start()
        try:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        except BaseException:
            playwright.stop()
            raise
        if not _browser_atexit:
            atexit.register(close_browser)
            _browser_atexit.append(True)
        _browser.extend((playwright, browser))
    return _browser[1]


_browser_atexit: list = []


def close_browser() -> None:
    """Stop the shared Chromium (if started) and its Playwright driver."""
    if not _browser:
        return
    playwright, browser = _browser
    _browser.clear()
    try:
        browser.close()
    finally:
        playwright.stop()


@contextmanager
def chromium_page(width: int = 1500, height: int = 1400):
    """A headless Debian Chromium page (Playwright sync API) in a fresh browser context (its own
    cookies, storage and cache) of the process's one Chromium; the context is closed on exit."""
    context = _shared_browser().new_context(viewport={"width": width, "height": height})
    try:
        yield context.new_page()
    finally:
        context.close()


def open_notebook(page, lab: Lab | str, name: str) -> None:
    """Open notebook ``name`` of ``lab`` (a test's ``Lab``, or a server's base URL and a name
    relative to its root) alone in its own workspace (no tabs restored from an earlier page)."""
    base, path = (lab.base, f"{lab.path}/{name}") if isinstance(lab, Lab) else (lab, name)
    workspace = re.sub(r"[^A-Za-z0-9_-]+", "-", str(Path(path).with_suffix("")))
    page.goto(f"{base}/lab/workspaces/{workspace}/tree/{path}?token={TOKEN}")
    page.wait_for_selector(".jp-Notebook", state="visible", timeout=60_000)
    page.wait_for_selector(".jp-Notebook .jp-Cell", state="visible", timeout=60_000)
    # Lab's "official Jupyter news?" toast would sit over the widget in screenshots.
    page.add_style_tag(content=".Toastify { display: none !important; }")
    # A cell run before the kernel is connected is dropped: wait for "Idle" in the status bar.
    page.get_by_text("| Idle").first.wait_for(state="visible", timeout=90_000)


def run_all_cells(page) -> None:
    """Run > Run All Cells from JupyterLab's menu, as a person runs a notebook top to bottom."""
    page.locator(".jp-Notebook .jp-Cell").first.click()
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Run All Cells$")).click()


def run_cell(page, index: int) -> None:
    """Click cell ``index`` and run it with Shift+Enter."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

    cell = page.locator(".jp-Notebook .jp-Cell").nth(index)
    # The prompt turns from "[ ]:" to "[*]:" then "[1]:" once the kernel took the cell. A key press
    # that lands while the front end is still wiring the notebook's shared model ("Not same Y.Doc")
    # is dropped without a trace: press again, up to three times, when the prompt never moved.
    taken = cell.locator(".jp-InputPrompt").filter(has_text="[").filter(has_not_text="[ ]")
    for attempt in range(3):
        cell.locator(".jp-InputArea-editor").click()
        page.keyboard.press("Shift+Enter")
        try:
            taken.wait_for(timeout=20_000 if attempt < 2 else 60_000)
            return
        except PlaywrightTimeoutError:
            if attempt == 2:
                raise


def widget_root(page, index: int = 0):
    """The widget's root element (``.hookviz-widget``) once it is drawn."""
    locator = page.locator(".hookviz-widget").nth(index)
    locator.wait_for(state="visible", timeout=120_000)
    return locator


def apply_edit(root, page, slot: str, expression: str, edits: int) -> None:
    """Apply ``expression`` at ``slot`` of the node in the inspector by clicking, and wait until
    the edits list holds ``edits`` entries."""
    root.locator(".hv-site").select_option(slot)
    root.locator(".hv-expr").fill(expression)
    root.locator(".hv-apply").click()
    page.wait_for_function(
        f"() => document.querySelectorAll('.hookviz-widget .hv-edits-list li').length === {edits}",
        timeout=30_000,
    )


def wait_at_rest(page, index: int = 0) -> None:
    """Wait until widget ``index``'s graph and every node in it have stopped moving (opening a box
    or fitting the view animates them): what is drawn is where a click lands."""
    page.wait_for_function(
        "(i) => { const cy = document.querySelectorAll('.hookviz-widget')[i].cy;"
        " return !cy.animated() && !cy.nodes().some((n) => n.animated()); }",
        arg=index,
        timeout=10_000,
    )


def click_node(page, node_id: str, index: int = 0) -> None:
    """Click a cytoscape node where it is drawn: renderedPosition + the container's page position."""
    page.locator(".hookviz-widget").nth(index).locator(".hv-cy").scroll_into_view_if_needed()
    # Where it is drawn at rest: opening a box moves the view to it for 300 ms.
    wait_at_rest(page, index)
    point = page.evaluate(
        """([id, index]) => {
            const root = document.querySelectorAll('.hookviz-widget')[index];
            const node = root.cy.getElementById(id);
            if (node.empty()) return null;
            const p = node.renderedPosition();
            const r = root.cy.container().getBoundingClientRect();
            return {x: r.left + p.x, y: r.top + p.y};
        }""",
        [node_id, index],
    )
    if point is None:
        raise AssertionError(f"node {node_id!r} is not drawn")
    page.mouse.click(point["x"], point["y"])


@contextmanager
def diagnostics(page, picture: Path):
    """On failure, save a screenshot of the page and add the browser console to the error."""
    console: list[str] = []
    page.on("console", lambda message: console.append(f"{message.type}: {message.text}"))
    page.on("pageerror", lambda error: console.append(f"pageerror: {error}"))
    try:
        yield console
    except Exception as error:
        try:
            picture.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(picture), full_page=True)
        except Exception:
            pass
        raise AssertionError(f"{error}\n--- browser console ---\n" + "\n".join(console[-40:])) from error


# What a person sees of the graph, measured from cytoscape's rendered bounding boxes (pixels in
# the graph's box): which drawn elements lie outside the box, the smallest label drawn, and every
# pair of overlapping node bodies, labels or sibling boxes.
_VIEW_REPORT = """(index) => {
    const root = document.querySelectorAll('.hookviz-widget')[index];
    const cy = root.cy;
    const width = cy.width(), height = cy.height(), zoom = cy.zoom();
    const box = (b) => ({x1: b.x1, y1: b.y1, x2: b.x2, y2: b.y2});
    const overlap = (a, b) => Math.min(a.x2, b.x2) - Math.max(a.x1, b.x1) > 0.5 &&
        Math.min(a.y2, b.y2) - Math.max(a.y1, b.y1) > 0.5;
    const nodes = cy.nodes().filter((n) => n.visible());
    const outside = nodes.filter((n) => {
        const b = n.renderedBoundingBox({includeLabels: true, includeOverlays: false});
        return b.x1 < -0.5 || b.y1 < -0.5 || b.x2 > width + 0.5 || b.y2 > height + 0.5;
    }).map((n) => n.id());
    // A label is drawn when its size on screen reaches the style's min-zoomed-font-size.
    const labels = [];
    let smallest = Infinity, hidden = 0;
    nodes.forEach((n) => {
        if (!n.data('label')) return;
        const px = parseFloat(n.style('font-size')) * zoom;
        if (px < parseFloat(n.style('min-zoomed-font-size'))) { hidden++; return; }
        smallest = Math.min(smallest, px);
        labels.push([n, box(n.renderedBoundingBox({includeNodes: false, includeEdges: false,
            includeLabels: true, includeOverlays: false}))]);
    });
    const bodies = nodes.filter((n) => !n.isParent()).map((n) =>
        [n, box(n.renderedBoundingBox({includeLabels: false, includeOverlays: false}))]);
    const boxes = nodes.filter((n) => n.isParent()).map((n) =>
        [n, box(n.renderedBoundingBox({includeLabels: false, includeOverlays: false}))]);
    const overlaps = [];
    const pairs = (list, kind, skip) => {
        for (let i = 0; i < list.length; i++) for (let j = i + 1; j < list.length; j++) {
            const [a, ba] = list[i], [b, bb] = list[j];
            if (skip && skip(a, b)) continue;
            if (overlap(ba, bb)) overlaps.push(`${kind}: ${a.id()} / ${b.id()}`);
        }
    };
    pairs(bodies, 'bodies');
    // Labels inside their own node are not a collision; a box's title against what is inside it is.
    pairs(labels, 'labels', (a, b) => a.same(b));
    pairs(boxes, 'sibling boxes', (a, b) => a.parent().id() !== b.parent().id());
    for (const [a, la] of labels) for (const [b, bb] of bodies)
        if (!a.same(b) && a.isParent() && overlap(la, bb)) overlaps.push(`box title / body: ${a.id()} / ${b.id()}`);
    for (const [a, la] of labels) for (const [b, bb] of boxes)
        if (!a.same(b) && !b.ancestors().contains(a) && !a.ancestors().contains(b) && a.isParent() && overlap(la, bb))
            overlaps.push(`box title / box: ${a.id()} / ${b.id()}`);
    return {width, height, zoom, drawn: nodes.length, outside, smallest_label_px: smallest,
            hidden_labels: hidden, overlaps};
}"""


def view_report(page, index: int = 0) -> dict:
    """Fit, label sizes and overlaps of the graph as drawn now (see ``_VIEW_REPORT``)."""
    return page.evaluate(_VIEW_REPORT, index)


def wait_painted(
    page, count: int = 1, index: int = 0, timeout: float = 60_000, kind: str | None = None
) -> None:
    """Wait until the graph has been painted ``count`` times (its layouts and recolours); with
    ``kind`` ("layout", "recolour"), until its ``count``-th paint or a later one is of that kind."""
    page.wait_for_function(
        "([i, n, kind]) => { const r = document.querySelectorAll('.hookviz-widget')[i];"
        " if (!r || Number(r.dataset.painted || 0) < n) return false;"
        " return !kind || r.hookviz.paints.slice(n - 1).some(p => p.kind === kind); }",
        arg=[index, count, kind],
        timeout=timeout,
        # Every 50 ms, not every animation frame: a 60 Hz poll takes CPU from the kernel being
        # measured on a 2-core machine.
        polling=50,
    )


def paint_count(page, index: int = 0) -> int:
    return page.evaluate(
        "(i) => Number(document.querySelectorAll('.hookviz-widget')[i].dataset.painted || 0)", index
    )


# ----- what a person sees of the panels: the chart's size, contrast, the theme ----------------------

# The chart's box, its plot and the widget, in page pixels.
_CHART = """() => {
    const root = document.querySelector('.hookviz-widget');
    const chart = root.querySelector('.hv-chart');
    const svg = chart.querySelector('.main-svg');
    const r = (el) => { const b = el.getBoundingClientRect(); return {top: b.top, bottom: b.bottom,
        left: b.left, right: b.right, width: b.width, height: b.height}; };
    return {root: r(root), chart: r(chart), plot: svg ? r(svg) : null,
            fullscreen: document.fullscreenElement === root};
}"""


def assert_chart_fits(page, what: str) -> dict:
    """The plot is >= 200 px high, as wide as its box, and inside the widget's rectangle."""
    page.wait_for_timeout(400)  # the ResizeObserver's frame and plotly's relayout
    m = page.evaluate(_CHART)
    chart, plot, root = m["chart"], m["plot"], m["root"]
    assert plot is not None, f"{what}: no plot drawn"
    assert chart["height"] >= 200 and plot["height"] >= 200, f"{what}: {m}"
    assert abs(plot["width"] - chart["width"]) <= 2, f"{what}: the plot does not follow its box: {m}"
    assert root["top"] - 0.5 <= chart["top"] and chart["bottom"] <= root["bottom"] + 0.5, f"{what}: {m}"
    assert root["left"] - 0.5 <= plot["left"] and plot["right"] <= root["right"] + 0.5, f"{what}: {m}"
    return m


# WCAG contrast of every text of a widget against what is really behind it: colours parsed from
# computed styles (rgb, rgba and the color(srgb ...) that color-mix computes to), rgba composited
# over the backgrounds below it down to the first opaque one, opacity of the element and its
# ancestors applied to the text. Disabled controls are left out (WCAG exempts inactive controls).
# Box titles: the cytoscape label colour of each drawn module box against the canvas (the box's
# own colour when the title sits inside a filled box).
_CONTRAST = """(index) => {
    const root = document.querySelectorAll('.hookviz-widget')[index];
    const parse = (c) => {
        let m = /color\\(srgb ([\\d.e-]+) ([\\d.e-]+) ([\\d.e-]+)(?: \\/ ([\\d.e-]+))?\\)/.exec(c);
        if (m) return [m[1] * 255, m[2] * 255, m[3] * 255, m[4] === undefined ? 1 : Number(m[4])];
        m = /rgba?\\(([^)]+)\\)/.exec(c);
        if (!m) return null;
        const p = m[1].split(/[\\s,\\/]+/).filter(Boolean).map(Number);
        return [p[0], p[1], p[2], p.length > 3 ? p[3] : 1];
    };
    const over = (top, below) => [0, 1, 2].map((i) => top[i] * top[3] + below[i] * (1 - top[3])).concat(1);
    const luminance = ([r, g, b]) => {
        const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; };
        return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b);
    };
    const ratio = (a, b) => { const x = luminance(a), y = luminance(b);
        return (Math.max(x, y) + 0.05) / (Math.min(x, y) + 0.05); };
    const background = (el) => {
        const layers = [];
        for (let e = el; e; e = e.parentElement) {
            const c = parse(getComputedStyle(e).backgroundColor);
            if (c && c[3] > 0) { layers.push(c); if (c[3] >= 1) break; }
        }
        let bg = [255, 255, 255, 1];
        for (const c of layers.reverse()) bg = over(c, bg);
        return bg;
    };
    const opacity = (el) => { let o = 1; for (let e = el; e && e !== document.body; e = e.parentElement)
        o *= Number(getComputedStyle(e).opacity); return o; };
    const visible = (el) => el.getClientRects().length > 0 && getComputedStyle(el).visibility === 'visible';
    const texts = [];
    for (const el of root.querySelectorAll('*')) {
        if (el.closest('svg') && el.tagName.toLowerCase() !== 'text') continue;
        if (el.closest('button:disabled, select:disabled, input:disabled')) continue;
        const own = [...el.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim());
        const field = el.matches('select, input[type=text], input[type=search]');
        if (!(own || field) || !visible(el)) continue;
        const style = getComputedStyle(el);
        const svgText = el.tagName.toLowerCase() === 'text';
        const color = parse(svgText ? style.fill : style.color);
        if (!color) continue;
        color[3] *= opacity(el) * (svgText ? Number(style.fillOpacity || 1) : 1);
        const bg = background(svgText ? el.closest('.hv-chart, .hv-heatmap') : el);
        texts.push({text: (el.value || el.textContent).trim().slice(0, 50), cls: String(el.className?.baseVal ?? el.className),
                    ratio: ratio(over(color, bg), bg)});
    }
    const cy = root.cy;
    const canvas = background(cy.container());
    const titles = cy.nodes('[?isGroup]').filter((n) => n.visible()).map((n) => {
        const label = parse(n.style('color'));
        const fill = parse(n.style('background-color'));
        fill[3] = Number(n.style('background-opacity'));
        const inside = n.style('text-valign') === 'center';
        const bg = inside ? over(fill, canvas) : canvas;
        // An open box's title sits at its top edge: over the canvas and over its own tint.
        const worst = inside ? ratio(over(label, bg), bg) :
            Math.min(ratio(over(label, canvas), canvas), ratio(over(label, over(fill, canvas)), over(fill, canvas)));
        return {text: n.data('label'), ratio: worst, open: !n.data('collapsed')};
    });
    return {texts, titles, theme: document.body.dataset.jpThemeName};
}"""


def assert_contrast(page, index: int, what: str, picture: Path) -> dict:
    """Every text of the ``index``-th widget has WCAG contrast >= 4.5 against what is behind it and
    every module box title >= 3 (measured by ``_CONTRAST``); saves the widget to ``picture``."""
    report = page.evaluate(_CONTRAST, index)
    texts, titles = report["texts"], report["titles"]
    assert len(texts) >= 40, f"{what}: only {len(texts)} texts measured"
    assert titles, f"{what}: no module box drawn"
    low = [(t["text"], t["cls"], round(t["ratio"], 2)) for t in texts if t["ratio"] < 4.5]
    assert not low, f"{what}: text below WCAG AA 4.5: {low}"
    dim = [(t["text"], round(t["ratio"], 2)) for t in titles if t["ratio"] < 3]
    assert not dim, f"{what}: module box titles below 3: {dim}"
    page.locator(".hookviz-widget").nth(index).screenshot(path=str(picture))
    return report


def switch_theme(page, theme: str) -> None:
    """Settings > Theme > ``theme`` from JupyterLab's menu, as a person switches it."""
    page.locator(".lm-MenuBar-itemLabel", has_text="Settings").click()
    page.locator(".lm-Menu-itemLabel", has_text="Theme").first.hover()
    page.locator(".lm-Menu-itemLabel", has_text=theme).first.click()
    page.wait_for_function("(name) => document.body.dataset.jpThemeName === name", arg=theme, timeout=30_000)
    page.wait_for_timeout(500)  # the widget restyles on the next frame
