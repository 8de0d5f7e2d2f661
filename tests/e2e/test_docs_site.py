"""The documentation site's live examples work in a browser with no kernel.

The site is built with ``mkdocs build`` (or taken from ``HOOKVIZ_DOCS_SITE``, a folder a build
wrote), served from 127.0.0.1 by ``http.server`` and opened in headless Chromium. On each page that
embeds an example (the saved page of a real run, ``docs/live_examples.py``, or a notebook's widget
as its saved page): the widget in the ``<iframe>`` paints its graph (nodes drawn, pixels on the
canvas), and a click on a node, at the place it is drawn, selects it and its inspector shows it.
No request leaves 127.0.0.1.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import harness  # noqa: E402

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

ARTIFACTS = harness.REPO / "build" / "e2e"
# page -> the saved page it embeds, from the site's root: the guides' examples, and a notebook's
# widget (its saved page, made by the build from the state committed in docs/rendered/)
EMBEDDED = {
    "guides/editing/index.html": "examples/canonical_edit.html",
    "guides/widget/index.html": "examples/gpt2.html",
    "guides/watching/index.html": "examples/watch.html",
    "notebooks/01_module_hooks/index.html": "notebooks/pages/01_module_hooks-1.html",
}
# Any attribute order: a notebook's page is written by nbconvert, which sorts them.
IFRAME = re.compile(r"<iframe\b(?=[^>]*\bclass=\"hookviz-example\")[^>]*\bsrc=\"([^\"]+)\"")

# Pixels the graph's canvases hold that are not transparent: a graph that paints nothing has 0.
_PAINTED_PIXELS = """() => {
    const root = document.querySelector('.hookviz-widget');
    let count = 0;
    for (const canvas of root.cy.container().querySelectorAll('canvas')) {
        if (!canvas.width || !canvas.height) continue;
        const data = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
        for (let i = 3; i < data.length; i += 4) if (data[i] !== 0) count++;
    }
    return count;
}"""

# The nodes to click, best first, with where each is drawn in the frame: ops and leaves that are
# not selected yet, then closed module boxes; only those drawn inside the graph's box.
_TARGETS = """() => {
    const cy = document.querySelector('.hookviz-widget').cy;
    const r = cy.container().getBoundingClientRect();
    const drawn = cy.nodes(':visible').filter((n) => !n.isParent() && !n.selected());
    const op = drawn.filter((n) => !n.id().startsWith('group:'));
    // Only nodes inside the graph's box: a tall graph is fitted from its top, the rest lies below.
    const inside = (n) => { const p = n.renderedPosition(); return p.x > 0 && p.y > 0 && p.x < cy.width() && p.y < cy.height(); };
    return op.union(drawn.difference(op)).filter(inside).map((n) => {
        const p = n.renderedPosition();
        return {id: n.id(), module: n.data('module') || null, x: r.left + p.x, y: r.top + p.y};
    });
}"""


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # the test's output, not a request log
        pass


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    reused = os.environ.get("HOOKVIZ_DOCS_SITE")
    if reused:
        return Path(reused)
    pytest.importorskip("mkdocs")
    folder = tmp_path_factory.mktemp("docs") / "site"
    # Not --strict: CI's strict build is its own step; this test is about the pages in a browser.
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--site-dir", str(folder)],
        cwd=harness.REPO,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return folder


@pytest.fixture(scope="module")
def served(site):
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(site)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def test_the_guides_embed_the_examples(site):
    found = {}
    for page in EMBEDDED:
        sources = IFRAME.findall((site / page).read_text(encoding="utf-8"))
        targets = [(site / page).parent.joinpath(src).resolve() for src in sources]
        assert all(target.is_file() for target in targets), sources
        found[page] = [target.relative_to(site.resolve()).as_posix() for target in targets]
    assert found == {page: [example] for page, example in EMBEDDED.items()}


@pytest.mark.parametrize("page_path", list(EMBEDDED), ids=[Path(p).parent.name for p in EMBEDDED])
def test_an_embedded_example_paints_and_answers_a_click(served, page_path):
    harness.require_browser()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    name = Path(page_path).parent.name
    with (
        harness.chromium_page(width=1300, height=1000) as page,
        harness.diagnostics(page, ARTIFACTS / f"docs_{name}_failure.png") as console,
    ):
        requests = []
        page.on("request", lambda request: requests.append(request.url))
        page.goto(f"{served}/{page_path}")
        iframe = page.locator("iframe.hookviz-example")
        assert iframe.count() == 1
        iframe.scroll_into_view_if_needed()
        frame = iframe.element_handle().content_frame()
        assert frame is not None
        # a lazily loaded frame starts loading once scrolled into view: wait for it to arrive
        frame.wait_for_url(f"**/{EMBEDDED[page_path]}", timeout=30_000)
        assert frame.url.endswith("/" + EMBEDDED[page_path]), frame
        harness.wait_painted(frame, 1, timeout=120_000)
        drawn = frame.evaluate("() => document.querySelector('.hookviz-widget').cy.nodes(':visible').length")
        assert drawn > 0
        assert frame.evaluate(_PAINTED_PIXELS) > 0, "the graph's canvas holds no pixel"

        # The graph in the middle of the frame's view, the frame in the middle of the page's.
        frame.evaluate(
            "() => document.querySelector('.hookviz-widget .hv-cy').scrollIntoView({block: 'center'})"
        )
        iframe.evaluate("(el) => el.scrollIntoView({block: 'center'})")
        frame.wait_for_function(
            "() => { const cy = document.querySelector('.hookviz-widget').cy;"
            " return !cy.animated() && !cy.nodes().some((n) => n.animated()); }",
            timeout=10_000,
        )
        box = iframe.evaluate(
            "(el) => { const r = el.getBoundingClientRect();"
            " return {x: r.left + el.clientLeft, y: r.top + el.clientTop, w: el.clientWidth, h: el.clientHeight}; }"
        )
        viewport = page.viewport_size
        # A node drawn where a click reaches it: inside the frame's view and the page's.
        targets = [
            t
            for t in frame.evaluate(_TARGETS)
            if 0 < t["x"] < box["w"]
            and 0 < t["y"] < box["h"]
            and 0 < box["x"] + t["x"] < viewport["width"]
            and 0 < box["y"] + t["y"] < viewport["height"]
        ]
        assert targets, "no node is drawn where a click can reach it"
        target = targets[0]
        page.mouse.click(box["x"] + target["x"], box["y"] + target["y"])
        frame.wait_for_function(
            "(id) => { const s = document.querySelector('.hookviz-widget').cy.$(':selected');"
            " return s.length === 1 && s[0].id() === id; }",
            arg=target["id"],
            timeout=10_000,
        )
        title = frame.locator(".hookviz-widget .hv-inspector .hv-title")
        title.wait_for(state="visible", timeout=10_000)
        if target["id"].startswith("group:"):
            frame.wait_for_function(
                "(t) => document.querySelector('.hookviz-widget .hv-inspector .hv-title')?.textContent.includes(t)",
                arg=target["module"],  # its box label, or its full name below it
                timeout=10_000,
            )
        else:
            frame.wait_for_function(
                "(id) => document.querySelector('.hookviz-widget .hv-inspector')?.innerText.includes(id)",
                arg=target["id"],
                timeout=10_000,
            )
        assert title.inner_text().strip()
        assert all(url.startswith((served, "blob:", "data:")) for url in requests), [
            url for url in requests if not url.startswith((served, "blob:", "data:"))
        ]
        assert not [line for line in console if line.startswith("pageerror")]
        page.screenshot(path=str(ARTIFACTS / f"docs_{name}.png"))
