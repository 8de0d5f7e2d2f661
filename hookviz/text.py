"""How hookviz writes numbers and module names for people: the one home of every number format.

The findings' messages and the widget's page show the same numbers; both take their text from here
(the page draws the text the payload carries, it formats nothing itself), so a percentage or a
norm reads the same in a message, in the inspector and in the leaf table.
"""

from __future__ import annotations

import math

# What a missing number (None: not recorded, no gradient) shows as.
MISSING = "–"
# What a statistic the watch did not read at a step shows as (``stats_every``: only norms then),
# apart from a real NaN ("NaN") and from a name that got no gradient (NO_GRADIENT).
NOT_MEASURED = "—"
NO_GRADIENT = "no grad"
# What the root module is called in views, after its class: "Canonical (root)".
ROOT_MARK = "(root)"


def module_name(module: str, root_type: str = "") -> str:
    """The one name a module has in every view and message: its qualified name (``"fc1"``,
    ``"h.0.attn"``); the root module, whose name in the API is ``""`` (as ``named_modules()``
    gives it), by its class with ``"(root)"``: ``"Canonical (root)"`` (``"(root)"`` when the
    class is unknown). ``root_type``: the root module's class name."""
    if module:
        return module
    return f"{root_type} {ROOT_MARK}" if root_type else ROOT_MARK


def as_number(value) -> float | None:
    """A number as JSON carries it (a float, or ``"nan"``, ``"inf"``, ``"-inf"``: see
    :func:`hookviz.data.tensors.json_float`) as a float; None and text that is no number as None."""
    if value is None or isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def number(value, extra: int = 0) -> str:
    """A number in short: whole numbers below 1e9 as they are (``1777792``), 4 significant digits
    from 1e-3 up to 1e5 (``0.5``, ``12.35``), else 3 in exponent form (``1.00e-7``, ``2.50e+6``);
    ``"NaN"``, ``"inf"``, ``"-inf"``; None as ``"–"``. ``value``: a float or JSON's form of one;
    ``extra``: significant digits more (:func:`apart` asks for them to tell numbers apart)."""
    n = as_number(value)
    if n is None:
        return MISSING
    if math.isnan(n):
        return "NaN"
    if math.isinf(n):
        return "inf" if n > 0 else "-inf"
    if n == 0:
        return "0"
    if n.is_integer() and abs(n) < 1e9:
        return str(int(n))
    if abs(n) >= 1e5 or abs(n) < 1e-3:
        return _exponent(n, extra)
    return format(float(f"{n:.{4 + extra}g}"), "g")


def apart(values, form=None) -> list[str]:
    """Numbers written by ``form`` (:func:`number` by default, or :func:`column`, which take
    ``extra``) with as few more significant digits as tell every two different numbers apart:
    ``apart([1777792.4, 1777764.1])`` is ``["1.77779e+6", "1.77776e+6"]``, never two equal
    ``1.78e+6``. Equal numbers keep equal texts; at most 17 digits (a float's all)."""
    form = form or (lambda vs, extra: [number(v, extra) for v in vs])
    numbers = [as_number(v) for v in values]
    for extra in range(0, 15):
        texts = form(values, extra)
        seen: dict[str, float] = {}
        if all(n is None or math.isnan(n) or seen.setdefault(t, n) == n for t, n in zip(texts, numbers)):
            return texts
    return texts


def value(values) -> str:
    """A tensor's values (a number or nested lists of them, as JSON carries them) as text:
    ``[[1, 2], [3, 4]]``, each number by :func:`number`; a complex number's text as it is."""
    if isinstance(values, list):
        return "[" + ", ".join(value(v) for v in values) + "]"
    if isinstance(values, str) and as_number(values) is None:
        return values  # a complex number, written as text ("0.5-1.2j")
    return number(values)


def percent(fraction) -> str:
    """A fraction in [0, 1] as a percentage that never rounds a part to all or nothing.

    ``0.37 -> "37%"``, ``0.995 -> "99.5%"``, ``0.99998 -> "> 99.99%"``, ``2e-5 -> "< 0.01%"``;
    only exactly 0 and 1 give ``"0%"`` and ``"100%"`` (64 non-zero elements of 3.2 million are
    not "100% zero"). Halves round to even (``0.125 -> "12%"``, ``0.005 -> "0.5%"``); None is
    ``"–"``.
    """
    f = as_number(fraction)
    if f is None:
        return MISSING
    if math.isnan(f):
        return "NaN%"
    if f <= 0:
        return "0%"
    if f >= 1:
        return "100%"
    for digits in (0, 1, 2):
        shown = round(100 * f, digits)
        if 0 < shown < 100:
            return f"{shown:.{digits}f}%"
    return "< 0.01%" if f < 0.5 else "> 99.99%"


def norm(value, nan: bool = False) -> str:
    """A gradient norm as a node, a module box or a parameter shows it: ``"NaN/Inf"`` when the
    gradient holds NaN or Inf (``nan``, or a norm that is not finite), else :func:`number`."""
    n = as_number(value)
    if nan or (n is not None and not math.isfinite(n)):
        return "NaN/Inf"
    return number(n)


def ratio(value) -> str:
    """A ratio of two norms (this run / the baseline) as ``"1.5×"``; None as ``"–"``."""
    return MISSING if as_number(value) is None else f"{number(value)}×"


def size(nbytes) -> str:
    """A size in bytes in binary units, as the notebooks speak of memory: ``512 B``, ``12 KiB``,
    ``1.5 MiB``, ``2.25 GiB`` (3 significant digits); None as ``"–"``."""
    n = as_number(nbytes)
    if n is None:
        return MISSING
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} B" if unit == "B" else f"{format(float(f'{n:.3g}'), 'g')} {unit}"
        n /= 1024
    raise AssertionError("unreachable")  # the loop returns at GiB


def _exponent(n: float, extra: int = 0) -> str:
    mantissa, exponent = f"{n:.{2 + extra}e}".split("e")
    return f"{mantissa}e{int(exponent):+d}"


def column(values, extra: int = 0) -> list[str]:
    """The numbers of one table column (floats, JSON's forms of them, None) in one format: each
    as :func:`number` writes it when every finite non-zero one lies in [1e-3, 1e5), else each in
    exponent form (``2.51e+6`` and ``5.50e+6``, never ``2.51e+6`` over ``5499721``); 0, NaN,
    inf and None as :func:`number` writes them. ``extra``: significant digits more."""
    numbers = [as_number(v) for v in values]
    finite = [n for n in numbers if n is not None and math.isfinite(n) and n != 0]
    if all(1e-3 <= abs(n) < 1e5 for n in finite):
        return [number(n, extra) for n in numbers]
    return [
        _exponent(n, extra) if n is not None and math.isfinite(n) and n != 0 else number(n) for n in numbers
    ]


def plotted(value) -> float | None:
    """A positive value as a log axis's coordinate: rounded to 4 significant digits (a drawn
    position needs no more; its text comes from :func:`number`), None (a gap) for NaN, inf, 0 and
    negatives."""
    n = as_number(value)
    if n is None or not math.isfinite(n) or n <= 0:
        return None
    return float(f"{n:.4g}")


def log_ticks(values) -> dict:
    """A plotly log axis's ticks written by :func:`number`: ``{"tickvals", "ticktext"}`` at the
    powers of ten that span the finite positive ``values`` (``1.00e-5``, ``0.001``, ``1``,
    ``1000``), so an axis reads as every other number on the page; ``{}`` when none is positive."""
    positive = [n for n in (as_number(v) for v in values) if n is not None and math.isfinite(n) and n > 0]
    if not positive:
        return {}
    lo, hi = math.floor(math.log10(min(positive))), math.ceil(math.log10(max(positive)))
    step = max(1, math.ceil((hi - lo + 1) / 8))  # at most about 8 ticks
    powers = [10.0**k for k in range(lo, hi + 1, step)]
    return {"tickmode": "array", "tickvals": powers, "ticktext": [number(p) for p in powers]}
