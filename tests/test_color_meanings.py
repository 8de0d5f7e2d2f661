"""One meaning per colour: the colours that mean something on the page (NaN/Inf, edited,
exploding/warning, not measured, selection, and the other marks) are each far from every other
colour the page draws, and the page's own copies are hookviz.colors'."""

from __future__ import annotations

import itertools
import math
import re
from pathlib import Path

from hookviz import colors

REPO = Path(__file__).resolve().parents[1]
# Two colours closer than this (Euclidean distance in 0-255 RGB) read as one.
APART = 50


def _rgb(color: str) -> tuple[int, ...]:
    return tuple(int(color[i : i + 2], 16) for i in (1, 3, 5))


def _distance(a: str, b: str) -> float:
    return math.dist(_rgb(a), _rgb(b))


def test_the_five_meanings_have_five_colours():
    meanings = colors.MEANINGS
    for name in ("NaN/Inf", "edited", "exploding / warning", "not measured", "selection"):
        assert name in meanings
    pairs = list(itertools.combinations(meanings.items(), 2))
    close = [(a, b) for (a, ca), (b, cb) in pairs if _distance(ca, cb) < APART]
    assert pairs and not close, close


def test_no_other_colour_drawn_reads_as_a_meaning():
    others = {
        **{f"line {c}": c for c in colors.LINE_COLORS},
        **{f"heatmap {k}": c for k, c in colors.HEATMAP_COLORS.items() if c != colors.NAN_COLOR},
        **{f"norm scale {i}": "#{:02x}{:02x}{:02x}".format(*rgb) for i, rgb in enumerate(colors.VIRIDIS)},
        "skipped step": colors.SKIPPED_COLOR,
        "step on screen": colors.STEP_COLOR,
        "chart: this run": colors.RUN_LINE_COLOR,
    }
    compared = [(m, o) for m, cm in colors.MEANINGS.items() for o, co in others.items()]
    close = [(m, o) for m, o in compared if _distance(colors.MEANINGS[m], others[o]) < APART]
    assert len(compared) > 100 and not close, close


def test_the_page_draws_the_marks_in_hookviz_colours():
    source = (REPO / "js" / "src" / "colors.js").read_text()
    found = dict(re.findall(r'export const (\w+_COLOR) = "(#[0-9a-f]{6})";', source))
    assert found == {
        "EDIT_COLOR": colors.EDIT_COLOR,
        "HOOK_COLOR": colors.HOOK_COLOR,
        "SELECTION_COLOR": colors.SELECTION_COLOR,
    }
    legend = (REPO / "js" / "src" / "legend.js").read_text()
    # the graph's legend keys every mark it draws: edited, edit not yet run, user hook, selected
    for mark in ("EDIT_COLOR", "HOOK_COLOR", "SELECTION_COLOR"):
        assert f"${{{mark}}}" in legend or f"sw({mark}" in legend, mark
