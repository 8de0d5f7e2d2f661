"""hookviz.text: the one home of how numbers read, and hookviz.colors: the one colour scale."""

from __future__ import annotations

import math

from hookviz import colors, text


def test_percentages_round_halves_to_even_and_say_what_is_missing():
    # all or nothing, as findings name them: tests/test_diagnose.py; these read JSON's forms too
    assert [text.percent(f) for f in (0.125, 0.005, 0.37, "nan", math.nan, None, 1 - 64 / 3.2e6)] == [
        "12%",  # the one rule (the page once said "13%" and "1%" for these two)
        "0.5%",
        "37%",
        "NaN%",
        "NaN%",
        "–",
        "> 99.99%",
    ]


def test_numbers_read_short_and_json_forms_are_read():
    values = [1777792, 0.5, 1e-7, 2.5e6 + 0.5, 12.3456, "nan", "inf", "-inf", None, 0.0, 3.0, "0.5-1.2j"]
    assert [text.number(v) for v in values] == [
        "1777792",
        "0.5",
        "1.00e-7",
        "2.50e+6",
        "12.35",
        "NaN",
        "inf",
        "-inf",
        "–",
        "0",
        "3",
        "–",
    ]
    assert text.value([[1, 2], [3, -4.5]]) == "[[1, 2], [3, -4.5]]"
    assert text.value(["0.5-1.2j", "nan"]) == "[0.5-1.2j, NaN]"
    assert (text.norm(2.0), text.norm(2.0, nan=True), text.norm("inf")) == ("2", "NaN/Inf", "NaN/Inf")
    assert (text.ratio(1.5), text.ratio(None)) == ("1.5×", "–")


def test_the_scale_runs_from_viridis_dark_to_light_and_saturates():
    assert colors.scale_color(0) == colors.scale_color(-5) == "#440154"
    assert colors.scale_color(1) == colors.scale_color(7) == "#fde725"
    assert colors.PLOTLY_COLORSCALE[0] == [0.0, "#440154"] and colors.PLOTLY_COLORSCALE[-1] == [
        1.0,
        "#fde725",
    ]
    assert len(colors.PLOTLY_COLORSCALE) == len(colors.VIRIDIS) == 10


def test_norms_colour_by_log10_on_the_range_and_off_the_scale_colours_mean_something():
    scale = {"lo": -2, "hi": 2}
    assert colors.norm_color(0.01, scale) == colors.scale_color(0)
    assert colors.norm_color(100, scale) == colors.scale_color(1)
    assert colors.norm_color(1, scale) == colors.scale_color(0.5)
    assert colors.norm_color("nan", scale) == colors.norm_color(1, scale, nan=True) == colors.NAN_COLOR
    assert colors.norm_color(0, scale) == colors.ZERO_GRAD_COLOR
    assert colors.norm_color(None, scale) == colors.NO_GRAD_COLOR
    assert [colors.beyond_range(n, scale) for n in (1e3, 1e-5, 1, 0, None)] == [
        True,
        True,
        False,
        False,
        False,
    ]


def test_the_range_is_whole_decades_around_the_finite_positive_norms():
    assert colors.range_of([0.05, 30.0, 0, None, "nan", "inf"]) == {"lo": -2, "hi": 2}
    assert colors.range_of([1.0]) == {"lo": 0, "hi": 1}
    assert colors.range_of([]) == {"lo": -1.0, "hi": 1.0}
    legend = colors.legend({"lo": -4, "hi": 4}, "t")
    assert [s["text"] for s in legend["stops"]] == ["-4", "-2", "0", "2", "4"]
    assert legend["stops"][0]["color"] == colors.scale_color(0)
