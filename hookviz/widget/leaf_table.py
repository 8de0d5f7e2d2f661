"""Run -> the leaf table's payload: every leaf's gradient summarised, now and in the baseline."""

from __future__ import annotations

import math

from hookviz import text
from hookviz.data.diff import leaf_diffs
from hookviz.data.run import Run
from hookviz.data.stats_batch import StatsBatch
from hookviz.widget.payload import json_float, tensor_json

LEAF_VALUE_LIMIT = 16
# What the leaf table shows of a leaf's gradient (``value`` only up to LEAF_VALUE_LIMIT elements).
LEAF_FIELDS = ("shape", "dtype", "numel", "norm", "min", "max", "nan_count", "inf_count", "value")


def _summaries(tensors: dict) -> dict[str, dict | None]:
    """Leaf-table summaries of many tensors by name, reduced in one batch: the fields of
    :data:`LEAF_FIELDS`, the value only of a tensor of at most :data:`LEAF_VALUE_LIMIT` elements
    (no histogram: the table draws none)."""
    batch = StatsBatch(full_limit=LEAF_VALUE_LIMIT, histogram_bins=0)
    keys = {name: batch.add(t.detach()) for name, t in tensors.items() if t is not None}
    records = batch.compute()
    return {
        name: (tensor_json(records[keys[name]], LEAF_FIELDS) if name in keys else None) for name in tensors
    }


def leaf_summary_json(
    run: Run, baseline: Run | None = None, baseline_summaries: dict | None = None
) -> list[dict]:
    """Every leaf's grad in the baseline and in ``run``: ``[{name, before, after, changed, ratio,
    text}]``; ``ratio``: ‖grad‖ in ``run`` over ‖grad‖ in the baseline (None when either is
    missing or zero), ``text``: the table's cells ``{"norm", "min", "max", "ratio"}`` of this run,
    each column in one number format (:func:`hookviz.text.column`; ratio as ``"1.5×"``).

    ``baseline_summaries`` (from :func:`leaf_summaries`) skips summarising the baseline again;
    a leaf whose gradient did not change reuses the baseline's summary.
    """
    base = baseline if baseline is not None else run
    leaves = leaf_diffs(base, run)
    before = baseline_summaries if baseline_summaries is not None else leaf_summaries(base)
    after = _summaries({name: leaf.after for name, leaf in leaves.items() if leaf.changed})
    rows = []
    for name, leaf in leaves.items():
        now = after[name] if leaf.changed else before.get(name)
        ratio = _ratio(now, before.get(name))
        rows.append(
            {
                "name": name,
                "before": before.get(name),
                "after": now,
                "changed": bool(leaf.changed),
                "ratio": json_float(ratio),
            }
        )
    _column_texts(rows)
    return rows


# The leaf table's numeric columns: the summary field each shows (ratio: the row's own).
LEAF_COLUMNS = ("norm", "min", "max")


def _column_texts(rows: list[dict]) -> None:
    """Give each row its ``text``: the cells of :data:`LEAF_COLUMNS` and the ratio, one number
    format per column over every row (a column never mixes ``2.51e+6`` with ``5499721``)."""
    values = {name: [(row["after"] or {}).get(name) for row in rows] for name in LEAF_COLUMNS}
    columns = {name: text.column(values[name]) for name in LEAF_COLUMNS}
    # a row's min and max that differ never read equal: more digits in both columns until not
    for extra in range(1, 15):
        if all(
            a != b or text.as_number(lo) == text.as_number(hi)
            for a, b, lo, hi in zip(columns["min"], columns["max"], values["min"], values["max"])
        ):
            break
        columns["min"], columns["max"] = (text.column(values[name], extra) for name in ("min", "max"))
    ratios = text.column([row["ratio"] for row in rows])
    for i, row in enumerate(rows):
        row["text"] = {name: columns[name][i] for name in LEAF_COLUMNS}
        finite = text.as_number(row["ratio"]) is not None and math.isfinite(text.as_number(row["ratio"]))
        row["text"]["ratio"] = f"{ratios[i]}×" if finite else ratios[i]


def _ratio(now: dict | None, then: dict | None) -> float | None:
    """‖grad‖ now over ‖grad‖ then, from two summaries; None when either is missing or zero."""
    now_norm = text.as_number((now or {}).get("norm"))
    then_norm = text.as_number((then or {}).get("norm"))
    if now_norm is None or then_norm is None or then_norm == 0:
        return None
    return now_norm / then_norm


def leaf_summaries(run: Run) -> dict[str, dict | None]:
    """The leaf-table summary of every leaf's grad in ``run`` (see :func:`_summaries`), by leaf name."""
    return _summaries({name: run.leaf_grad(name) for name in run.leaf_names})
