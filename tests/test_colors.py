"""The page's text colours are readable: WCAG AA contrast (>= 4.5:1 for normal text) against the
widget's light backgrounds, for the fallbacks style.css uses outside JupyterLab's themes (the
exported HTML, other front ends) and for hookviz.colors' step marker, which is the muted grey."""

from __future__ import annotations

import re
from pathlib import Path

from hookviz.colors import STEP_COLOR

STYLE = Path(__file__).resolve().parents[1] / "js" / "src" / "style.css"


def relative_luminance(color: str) -> float:
    """WCAG 2.x relative luminance of ``#rgb`` or ``#rrggbb``
    (https://www.w3.org/TR/WCAG21/#dfn-relative-luminance)."""
    digits = color[1:] if len(color) == 7 else "".join(c * 2 for c in color[1:])
    channels = [int(digits[i : i + 2], 16) / 255 for i in (0, 2, 4)]
    linear = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def contrast(a: str, b: str) -> float:
    """WCAG 2.x contrast ratio of two colours, (L1 + 0.05) / (L2 + 0.05) with L1 the lighter."""
    high, low = sorted((relative_luminance(a), relative_luminance(b)), reverse=True)
    return (high + 0.05) / (low + 0.05)


def fallbacks() -> dict[str, str]:
    """The light fallback of each ``--hv-*`` colour in style.css's first ``.hookviz-widget`` block
    (``var(--jp-..., #fallback)`` or a plain colour; the dark theme's overrides come later)."""
    light = STYLE.read_text().split(".hookviz-widget {", 1)[1].split("}", 1)[0]
    pattern = r"(--hv-[\w-]+):\s*(?:var\(--jp-[\w-]+,\s*)?(#[0-9a-fA-F]{6}|#[0-9a-fA-F]{3})\b"
    return dict(re.findall(pattern, light))


def test_the_formula_matches_wcags_known_ratios():
    assert contrast("#000000", "#ffffff") == 21.0
    assert contrast("#ffffff", "#ffffff") == 1.0
    assert round(contrast("#767676", "#ffffff"), 2) == 4.54  # the lightest grey that passes AA on white


def test_text_colours_pass_wcag_aa_on_the_light_backgrounds():
    colors = fallbacks()
    texts = ["--hv-fg", "--hv-muted", "--hv-error", "--hv-warn", "--hv-hook"]
    backgrounds = ["--hv-bg", "--hv-bg2"]
    pairs = [(t, b) for t in texts for b in backgrounds]
    assert len(pairs) == 10 and all(c in colors for c in texts + backgrounds), colors
    low = [(t, b, round(contrast(colors[t], colors[b]), 2)) for t, b in pairs]
    assert [entry for entry in low if entry[2] < 4.5] == [], low
    assert colors["--hv-muted"].lower() == STEP_COLOR.lower()
    assert contrast(STEP_COLOR, "#ffffff") >= 4.5
