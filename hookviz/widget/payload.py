"""Run -> JSON: the values every payload the widget's page draws is written with.

The payloads are plain JSON-safe dicts and lists made by pure functions of a :class:`hookviz.Run`
(and the baseline run to compare with), one module per thing the page draws:
:mod:`hookviz.widget.graph`, :mod:`hookviz.widget.inspector`, :mod:`hookviz.widget.leaf_table`,
:mod:`hookviz.widget.chart`, :mod:`hookviz.widget.replay`, :mod:`hookviz.widget.diagnosis` and
:mod:`hookviz.widget.watch_json`; no traitlets there, so they are tested and timed on their own.
Numbers that JSON cannot hold (NaN, Inf) become the strings ``"nan"``, ``"inf"``, ``"-inf"``, as
:meth:`hookviz.data.tensors.TensorRecord.to_dict` writes them.

Every number the page shows comes with its text, written here by :mod:`hookviz.text` (and every
colour by :mod:`hookviz.colors`): the page draws the text and formats nothing, so Python and the
page cannot disagree. A tensor's texts are its JSON's ``text`` (:func:`tensor_text`).
"""

from __future__ import annotations

from hookviz import text
from hookviz.data.tensors import json_float as json_float  # its one home; payloads import it here

# A tensor of at most this many elements shows its values (``text["value"]``); a larger one its
# statistics, histogram and heatmap.
SHOWN_ELEMENTS = 16


def tensor_text(data: dict) -> dict:
    """What the page shows of a tensor's JSON (:meth:`hookviz.data.tensors.TensorRecord.to_dict`, any
    subset of its fields), as text: ``norm``, ``mean``, ``min``, ``max``, ``abs_max`` (the larger of ``|min|``
    and ``|max|``), ``zeros`` (``zero_fraction`` as a percentage), ``value`` (only for a tensor of
    at most :data:`SHOWN_ELEMENTS` elements whose values are kept), ``histogram`` (its first and
    last edge, ``"lo … hi"``), ``overview_max`` (the largest block of its overview). Keys of
    fields the JSON lacks are left out."""
    out = {name: text.number(data[name]) for name in ("norm", "mean") if name in data}
    if "min" in data and "max" in data:  # never two equal texts for a min and a max that differ
        out["min"], out["max"] = text.apart([data["min"], data["max"]])
    out |= {name: text.number(data[name]) for name in ("min", "max") if name in data and name not in out}
    extremes = [text.as_number(data.get(name)) for name in ("min", "max")]
    if None not in extremes:
        out["abs_max"] = text.number(max(abs(v) for v in extremes))
    if "zero_fraction" in data:
        out["zeros"] = text.percent(data["zero_fraction"])
    kept = data.get("value")
    if kept is not None and (data.get("numel") or 0) <= SHOWN_ELEMENTS:
        out["value"] = text.value(kept)
    edges = (data.get("histogram") or {}).get("edges") or []
    if edges:
        out["histogram"] = f"{text.number(edges[0])} … {text.number(edges[-1])}"
    overview = data.get("overview")
    if overview:
        blocks = [text.as_number(v) for row in overview for v in row]
        out["overview_max"] = text.number(max((abs(v) for v in blocks if v is not None), default=None))
    return out


def tensor_json(record, fields=None) -> dict | None:
    """A TensorRecord (or None) as JSON (:meth:`hookviz.data.tensors.TensorRecord.to_dict` of
    ``fields``, default all), with the ``text`` the page shows of it (:func:`tensor_text`)."""
    if record is None:
        return None
    data = record.to_dict() if fields is None else record.to_dict(fields)
    data["text"] = tensor_text(data)
    return data


def tensors_json(records) -> list | None:
    """A tuple of TensorRecords as a JSON list (None stays None)."""
    return None if records is None else [tensor_json(r) for r in records]
