"""Run -> JSON: the values every payload the widget's page draws is written with.

The payloads are plain JSON-safe dicts and lists made by pure functions of a :class:`hookviz.Run`
(and the baseline run to compare with), one module per thing the page draws: :mod:`.graph`,
:mod:`.inspector`, :mod:`.leaf_table`, :mod:`.chart`, :mod:`.replay`, :mod:`.diagnosis` and
:mod:`.watch_json`; no traitlets there, so they are tested and timed on their own. Numbers that
JSON cannot hold (NaN, Inf) become the strings ``"nan"``, ``"inf"``, ``"-inf"``, as
:meth:`TensorRecord.to_dict` writes them.
"""

from __future__ import annotations

import math


def json_float(value: float | None) -> float | str | None:
    """A float JSON can hold: NaN/Inf as "nan"/"inf"/"-inf", None stays None."""
    if value is None:
        return None
    value = float(value)
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return value


def tensor_json(record) -> dict | None:
    """A TensorRecord (or None) as JSON."""
    return None if record is None else record.to_dict()


def tensors_json(records) -> list | None:
    """A tuple of TensorRecords as a JSON list (None stays None)."""
    return None if records is None else [tensor_json(r) for r in records]
