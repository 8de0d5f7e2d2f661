"""Every picture of the README and the site, made from real runs in headless Chromium.

Each picture is a screenshot of a saved page (``save_html``) that ``docs/live_examples.py`` writes
from a real run, the same pages the guides embed, drawn by the widget's current bundle: no picture
can show an old layout once this has run. Run it by hand after a change to the page, and commit
the pictures:

    python docs/pictures.py            # writes docs/widget.png

It needs the dev extra (playwright's Python API) and ``/usr/bin/chromium`` (never
``playwright install``), the set-up the browser tests use (``tests/e2e/harness.py``).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "docs"))
sys.path.insert(0, str(ROOT / "tests" / "e2e"))
import harness  # noqa: E402  (the Chromium binary and flags, one home)
import live_examples  # noqa: E402

# picture -> (the example page it shows, the viewport: width, height)
PICTURES = {
    "widget.png": ("canonical_edit", (1200, 880)),
}


def take(out: Path = ROOT / "docs") -> list[Path]:
    """Write every picture of :data:`PICTURES` to ``out``; returns their paths."""
    written = []
    with tempfile.TemporaryDirectory() as folder:
        examples = sorted({example for example, _ in PICTURES.values()})
        pages = {path.stem: path for path in live_examples.write(Path(folder), examples)}
        for picture, (example, (width, height)) in PICTURES.items():
            with harness.chromium_page(width=width, height=height) as page:
                errors: list[str] = []
                page.on("pageerror", lambda error, errors=errors: errors.append(str(error)))
                page.goto(pages[example].as_uri())
                harness.wait_painted(page, 1, timeout=120_000)
                page.wait_for_function(
                    "() => { const cy = document.querySelector('.hookviz-widget').cy;"
                    " return !cy.animated() && !cy.nodes().some((n) => n.animated()); }",
                    timeout=10_000,
                )
                if errors:
                    raise RuntimeError(f"{example}: the page raised {errors}")
                page.screenshot(path=str(out / picture))
            written.append(out / picture)
    return written


if __name__ == "__main__":
    for path in take():
        print(path)
