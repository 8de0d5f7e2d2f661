"""The one colour scale of gradient norms, and the colours that mean something on it.

The graph's nodes and module boxes, the watch's heatmaps and the gradient-flow chart's points all
colour a norm by :func:`norm_color` on a range from :func:`log_range`, and the widget's payload
carries the colours (the page draws them, it computes none), so one colour means one norm
wherever hookviz shows it. The scale is viridis: it has no red, so red always means NaN/Inf.
"""

from __future__ import annotations

import math

from hookviz.text import as_number, number

# Red: NaN/Inf only (graph, heatmaps, chart), and error text in the page.
NAN_COLOR = "#e53935"
NO_GRAD_COLOR = "#9e9e9e"  # no gradient reached it
ZERO_GRAD_COLOR = "#263238"  # a gradient of exact zeros (no place on a log scale)
NOT_WATCHED_COLOR = "#cfd8dc"  # the watch view: an element the watch recorded nothing for
WARNING_COLOR = "#fb8c00"  # the warning orange of the page (style.css --hv-warn-line): thresholds
EXPLODING_COLOR = WARNING_COLOR
# Too small (a vanishing gradient, an update too small for the weights): a deep blue, darker
# than the selection's; a healthy update: light green (off the norms' viridis).
TOO_SMALL_COLOR = "#0039cb"
HEALTHY_COLOR = "#a5d6a7"
# The page's marks (js/src/colors.js holds the same two, checked by tests/test_colors.py): an edit
# of hookviz's (magenta, a hue neither the norm scale nor a warning uses), a user's hook (brown).
EDIT_COLOR = "#d500f9"
HOOK_COLOR = "#795548"
# The selection: JupyterLab's brand colour (--jp-brand-color1), this its light theme's value; no
# chart line, heatmap or mark is blue (the scale's blues are darker and greener).
SELECTION_COLOR = "#1e88e5"
# "This run" in the gradient-flow chart: green, not the selection's blue nor zero's near-black.
RUN_LINE_COLOR = "#2ca02c"
# The step on screen, marked on a watch's figures (not a finding: no red); the page's muted text
# colour (style.css --hv-muted): 5.40:1 on white by WCAG 2.x's contrast ratio of relative
# luminances (https://www.w3.org/TR/WCAG21/#dfn-contrast-ratio), over AA's 4.5 for text.
STEP_COLOR = "#546e7a"
# Lines told apart (a watch's per-layer lines): Tableau 10 without the colours that mean
# something on the page: its red (NaN/Inf), orange (warning), blue (selection) and grey (not
# measured, no grad).
LINE_COLORS = (
    "#2ca02c",
    "#9467bd",
    "#393b79",
    "#e377c2",
    "#17becf",
    "#bcbd22",
)

# The inspector's heatmaps of a tensor's values: white at 0, shading to blue below and to brown
# above (ColorBrewer's BrBG ends: no red, which means NaN/Inf, drawn in NAN_COLOR). A block
# overview (root mean squares, never negative) shades from white to brown only.
HEATMAP_COLORS = {"negative": "#01665e", "zero": "#ffffff", "positive": "#8c510a", "nan": NAN_COLOR}

# Viridis at 10 evenly spaced stops (matplotlib's table), from the smallest norm to the largest.
VIRIDIS = (
    (68, 1, 84),
    (72, 40, 120),
    (62, 74, 137),
    (49, 104, 142),
    (38, 130, 142),
    (31, 158, 137),
    (53, 183, 121),
    (109, 205, 89),
    (180, 222, 44),
    (253, 231, 37),
)

# Each meaning the page draws in colour, and its one colour: no two meanings share one
# (tests/test_colors.py checks them pairwise apart, and apart from the norm scale's stops).
MEANINGS = {
    "NaN/Inf": NAN_COLOR,
    "edited": EDIT_COLOR,
    "exploding / warning": WARNING_COLOR,
    "not measured": NOT_WATCHED_COLOR,
    "selection": SELECTION_COLOR,
    "no grad": NO_GRAD_COLOR,
    "zero grad": ZERO_GRAD_COLOR,
    "user hook": HOOK_COLOR,
    "too small (vanishing, update)": TOO_SMALL_COLOR,
    "healthy update": HEALTHY_COLOR,
}

# The scale as plotly takes it (``colorscale``): [[fraction, colour], ...].
PLOTLY_COLORSCALE = [
    [i / (len(VIRIDIS) - 1), "#{:02x}{:02x}{:02x}".format(*rgb)] for i, rgb in enumerate(VIRIDIS)
]


def scale_color(fraction: float) -> str:
    """The colour ``"#rrggbb"`` at ``fraction`` of the scale (0: smallest, 1: largest; clamped,
    NaN as 0), interpolated linearly between the stops of :data:`VIRIDIS`."""
    t = 0.0 if not math.isfinite(fraction) else min(1.0, max(0.0, fraction))
    x = t * (len(VIRIDIS) - 1)
    i = min(len(VIRIDIS) - 2, math.floor(x))
    f = x - i
    a, b = VIRIDIS[i], VIRIDIS[i + 1]
    return "#" + "".join(f"{round(a[k] + (b[k] - a[k]) * f):02x}" for k in range(3))


def log_range(smallest: float | None, largest: float | None) -> dict:
    """The colour range ``{lo, hi}`` (whole decades, log10 units) around log10 norms from
    ``smallest`` to ``largest``; -1..1 when there is none."""
    if smallest is None:
        return {"lo": -1.0, "hi": 1.0}
    lo, hi = math.floor(smallest), math.ceil(largest)
    if hi <= lo:
        hi = lo + 1
    return {"lo": lo, "hi": hi}


def range_of(norms) -> dict:
    """The :func:`log_range` around the finite positive numbers of ``norms`` (floats, JSON's
    ``"nan"``/``"inf"`` or None; the others are left out)."""
    logs = [math.log10(n) for n in map(as_number, norms) if n is not None and math.isfinite(n) and n > 0]
    return log_range(min(logs), max(logs)) if logs else log_range(None, None)


def norm_color(norm, color_range: dict, nan: bool = False) -> str:
    """The colour of a gradient norm (a float or JSON's form of one) on ``color_range``
    (``{lo, hi}`` in log10 units): :data:`NAN_COLOR` for NaN/Inf (or ``nan``: the gradient holds
    some), :data:`NO_GRAD_COLOR` for None, :data:`ZERO_GRAD_COLOR` for 0, else the scale's colour
    (a norm outside the range takes the colour of its end: :func:`beyond_range`)."""
    n = as_number(norm)
    if nan or (n is not None and not math.isfinite(n)):
        return NAN_COLOR
    if n is None:
        return NO_GRAD_COLOR
    if n == 0:
        return ZERO_GRAD_COLOR
    lo, hi = color_range["lo"], color_range["hi"]
    return scale_color((math.log10(abs(n)) - lo) / (hi - lo if hi > lo else 1))


def beyond_range(norm, color_range: dict) -> bool:
    """Whether a finite non-zero norm lies outside ``color_range``: its colour saturates at the
    scale's end (the page marks it)."""
    n = as_number(norm)
    if n is None or not math.isfinite(n) or n == 0:
        return False
    log = math.log10(abs(n))
    return log < color_range["lo"] or log > color_range["hi"]


def legend(color_range: dict, title: str, stops: int = 5) -> dict:
    """What the page's legend shows for ``color_range``: ``{title, stops: [{color, text}] from
    lo to hi (text: the log10 norm), keys: [{color, text}]}`` (keys: the colours off the scale)."""
    lo, hi = color_range["lo"], color_range["hi"]
    return {
        "title": title,
        "stops": [
            {
                "color": scale_color(i / (stops - 1)),
                "text": number(round(lo + (hi - lo) * i / (stops - 1), 1)),
            }
            for i in range(stops)
        ],
        "keys": [
            {"color": NAN_COLOR, "text": "NaN/Inf"},
            {"color": ZERO_GRAD_COLOR, "text": "zero"},
            {"color": NO_GRAD_COLOR, "text": "no grad"},
        ],
    }


# The watch view's step rows (hookviz.widget.watch_rows), each off the norms' scale (no viridis):
# a step the GradScaler skipped, marked across the figure.
SKIPPED_COLOR = "#3949ab"
# An update-to-weight ratio in one of three categories, as the update findings judge a layer
# (hookviz.analysis.step_findings.update_flags: below update_ratio_low, between, above
# update_ratio_high): too small in blue, healthy in light green, too large in the warning orange.
UPDATE_RATIO_COLORS = {"small": TOO_SMALL_COLOR, "healthy": HEALTHY_COLOR, "large": WARNING_COLOR}
# A learning rate: light to dark blue-grey from the smallest to the largest of its row.
LEARNING_RATE_COLORS = ("#cfd8dc", "#455a64")


def _blend(a: str, b: str, fraction: float) -> str:
    """``"#rrggbb"`` at ``fraction`` (clamped to [0, 1]) of the way from colour ``a`` to ``b``."""
    t = min(1.0, max(0.0, fraction))
    pa = [int(a[i : i + 2], 16) for i in (1, 3, 5)]
    pb = [int(b[i : i + 2], 16) for i in (1, 3, 5)]
    return "#" + "".join(f"{round(x + (y - x) * t):02x}" for x, y in zip(pa, pb))


def learning_rate_color(fraction: float) -> str:
    """The colour of a learning rate at ``fraction`` (0: its row's smallest, 1: its largest, on a
    log scale) between :data:`LEARNING_RATE_COLORS`."""
    return _blend(*LEARNING_RATE_COLORS, fraction)
