"""What ``hookviz report FILE`` says, as plain JSON-safe values: the widget banner's findings and
onsets, the per-layer gradient norms at the last and at the worst kept step, the skipped steps.

The *worst* step of a watch is chosen by one rule, said in ``worst_reason``: the first step with
NaN/Inf in a gradient (the NaN onset); else, when a norm passed ``exploding_norm`` (the exploding
onset), the step with the largest gradient norm of all layers together; else the step whose layer
norms lie furthest apart (the largest norm over the smallest non-zero one: where the gradient
vanishes most).
"""

from __future__ import annotations

import math

from hookviz.analysis.compare import LayerNorms, layer_norms
from hookviz.analysis.gradient_stats import gradient_stats
from hookviz.stats.reduce import combined_norm
from hookviz.widget.diagnosis import FINDING_KINDS, findings_json
from hookviz.widget.payload import json_float
from hookviz.widget.sources import Source

# What --fail-on may name: a finding's kind, a gathered history's cross-rank kinds, or any.
FAIL_KINDS = (*FINDING_KINDS, "diverging", "unused")


def _json(findings: list) -> list[dict]:
    """Findings as the banner's JSON, with the rank of a gathered history's cross-rank ones."""
    return [{**item, "rank": f.rank} for item, f in zip(findings_json(findings), findings)]


def report(source: Source) -> dict:
    """The report of an opened file, run or watch (:func:`hookviz.widget.sources.open_source`).

    Returns:
        a dict of JSON-safe values (NaN/Inf as ``"nan"``/``"inf"``): ``file``, ``label``, ``kind``
        (``"run"`` or ``"watch"``), ``findings`` (a list of sections ``{title, step, findings}``, each
        finding as the widget's banner has it), ``onsets``, ``layers`` (``{columns, rows}``: one
        row per layer, input side first), ``kinds`` (every kind found), and for a watch ``steps``,
        ``last_step``, ``worst_step``, ``worst_reason``, ``skipped_steps``, ``rank``, ``ranks``,
        ``gathered``, ``notes``.

    Raises:
        HookvizError: a run whose details cannot be read (:func:`hookviz.diagnose`).
    """
    head = {"file": str(source.path) if source.path else None, "label": source.label, "kind": source.kind}
    if source.history is None:
        return {**head, **_run_report(source)}
    history = source.history
    if not history.steps:
        return {
            **head,
            "steps": 0,
            "findings": [],
            "onsets": [],
            "layers": {"columns": [], "rows": []},
            "kinds": [],
            "skipped_steps": [],
            "notes": source.notes,
        }
    onsets = source.onsets()
    last = history.steps[-1]
    norms = layer_norms(history)
    worst, reason = worst_step(norms, onsets)
    sections = [
        {"title": f"Findings at step {last} (the last kept)", "step": last, "findings": source.findings(last)}
    ]
    if worst != last:
        sections.append(
            {
                "title": f"Findings at step {worst} (the worst: {reason})",
                "step": worst,
                "findings": source.findings(worst),
            }
        )
    if source.gathered:
        sections.append(
            {"title": "Across ranks (every kept step)", "step": None, "findings": source.cross_rank()}
        )
    shown = [(last, "last")] + ([(worst, "worst")] if worst != last else [])
    rows = []
    for position, layer in enumerate(norms.layers):
        row = {"layer": layer}
        for step, name in shown:
            index = norms.steps.index(step)
            row[name] = json_float(norms.norm[index, position].item())
            row[f"{name}_nonfinite"] = int(norms.nonfinite[index, position].item())
        rows.append(row)
    found = [f for section in sections for f in section["findings"]] + onsets
    return {
        **head,
        "steps": len(history.steps),
        "first_step": history.steps[0],
        "last_step": last,
        "worst_step": worst,
        "worst_reason": reason,
        "rank": source.rank,
        "ranks": source.ranks,
        "gathered": source.gathered,
        "onsets": _json(onsets),
        "findings": [{**section, "findings": _json(section["findings"])} for section in sections],
        "layers": {"columns": [f"step {step} ({name})" for step, name in shown], "rows": rows},
        "kinds": sorted({f.kind for f in found}),
        "skipped_steps": source.skipped_steps,
        "notes": source.notes,
    }


def _run_report(source: Source) -> dict:
    """A run's report: its findings and each layer's gradient norm (one step, no onset)."""
    found = source.findings()
    layers = [s for s in gradient_stats(source.run, source.run.model) if s.kind == "layer"]
    return {
        "findings": [{"title": "Findings of the run", "step": None, "findings": _json(found)}],
        "onsets": [],
        "layers": {
            "columns": ["gradient norm", "× the layer nearest the loss"],
            "rows": [
                {"layer": s.name, "norm": json_float(s.grad_norm), "ratio": json_float(s.ratio_to_nearest)}
                for s in sorted(layers, key=lambda s: -(s.order if s.order is not None else -1))
            ],
        },
        "kinds": sorted({f.kind for f in found}),
    }


def worst_step(norms: LayerNorms, onsets: list) -> tuple[int, str]:
    """The worst kept step of a watch and why it is (the rule: see the module docstring).

    Args:
        norms: the watch's per-layer norms (:func:`hookviz.analysis.compare.layer_norms`).
        onsets: its onsets (:func:`hookviz.analysis.onset.onsets`).
    """
    by_kind = {f.kind: f for f in onsets}
    if "nan" in by_kind:
        return by_kind["nan"].step, "the first step with NaN/Inf in a gradient"
    rows = norms.norm.tolist()
    if "exploding" in by_kind:
        totals = [combined_norm(v for v in row if not math.isnan(v)) or 0.0 for row in rows]
        index = max(range(len(rows)), key=lambda i: totals[i])
        return norms.steps[index], "the largest gradient norm of all layers together"
    spreads = []
    for row in rows:
        positive = [v for v in row if math.isfinite(v) and v > 0]
        spreads.append(max(positive) / min(positive) if positive else 1.0)
    index = max(range(len(rows)), key=lambda i: spreads[i])
    return norms.steps[index], "the layer norms furthest apart (largest over smallest)"
