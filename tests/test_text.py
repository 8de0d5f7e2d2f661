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


def test_sizes_read_in_the_notebooks_binary_units():
    sizes = [0, 512, 12 * 1024, 1572864, 2.25 * 2**30, None]
    assert [text.size(n) for n in sizes] == ["0 B", "512 B", "12 KiB", "1.5 MiB", "2.25 GiB", "–"]


def test_a_column_of_numbers_has_one_format():
    # the leaf table's max column once read 2.51e+6 over 5499721
    assert text.column([2.51e6, 5499721, None, math.nan, 0]) == ["2.51e+6", "5.50e+6", "–", "NaN", "0"]
    assert text.column([0.5, 12.3456, 3, -7]) == ["0.5", "12.35", "3", "-7"]  # all in [1e-3, 1e5)
    assert text.column([1e-7, 0.25]) == ["1.00e-7", "2.50e-1"]
    assert text.column([]) == []


def test_heatmaps_have_no_red_but_for_nan():
    assert colors.HEATMAP_COLORS["nan"] == colors.NAN_COLOR
    others = {k: v for k, v in colors.HEATMAP_COLORS.items() if k != "nan"}
    assert len(others) == 3 and colors.NAN_COLOR not in others.values()
    for hex_color in others.values():  # no red-dominated colour: red exceeds neither green nor blue by much
        r, g, b = (int(hex_color[i : i + 2], 16) for i in (1, 3, 5))
        assert r - max(g, b) < 80, hex_color
