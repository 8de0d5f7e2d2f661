"""Where NaN/Inf first appear in a run.

NaN/Inf origin (no threshold): in backward, the first node in backward order whose ``grad_inputs``
hold NaN/Inf while its ``grad_outputs`` do not; in forward, the first op whose output holds NaN/Inf
while the inputs it got from other recorded ops do not (or a model input that holds them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hookviz.analysis.findings import Finding, module_label
from hookviz.data.tensors import TensorRecord
from hookviz.text import number

if TYPE_CHECKING:  # for annotations only: the analysis needs no Run at import time
    import hookviz.data.run

# op -> (what it computes, why its gradient is infinite or undefined there)
_CAUSES = {
    "LogBackward0": ("log", "the gradient of log(x) is 1/x, infinite at x = 0; log(x) is NaN for x < 0"),
    "Log2Backward0": ("log2", "the gradient of log2(x) is 1/(x ln 2), infinite at x = 0"),
    "Log10Backward0": ("log10", "the gradient of log10(x) is 1/(x ln 10), infinite at x = 0"),
    "Log1pBackward0": ("log1p", "the gradient of log1p(x) is 1/(1 + x), infinite at x = -1"),
    "DivBackward0": ("division", "the gradient of a / b is 1/b and -a/b^2, infinite where b = 0"),
    "ReciprocalBackward0": ("reciprocal", "the gradient of 1/x is -1/x^2, infinite at x = 0"),
    "SqrtBackward0": ("sqrt", "the gradient of sqrt(x) is 1/(2 sqrt(x)), infinite at x = 0"),
    "RsqrtBackward0": ("rsqrt", "the gradient of x^-1/2 is -x^-3/2 / 2, infinite at x = 0"),
    "PowBackward0": ("pow", "the gradient of x^p is p x^(p-1), infinite at x = 0 when p < 1"),
    "PowBackward1": ("pow", "the gradient of a^b is b a^(b-1) and a^b ln a, infinite at a = 0"),
    "AcosBackward0": ("acos", "the gradient of acos(x) is -1/sqrt(1 - x^2), infinite at x = +-1"),
    "AsinBackward0": ("asin", "the gradient of asin(x) is 1/sqrt(1 - x^2), infinite at x = +-1"),
    "AtanhBackward0": ("atanh", "the gradient of atanh(x) is 1/(1 - x^2), infinite at x = +-1"),
    "NormBackward1": ("norm", "the gradient of a 2-norm is x/|x|, undefined (0/0) when all of x is 0"),
    "LinalgVectorNormBackward0": ("norm", "the gradient of a 2-norm is x/|x|, 0/0 when all of x is 0"),
}


def _describe(record: TensorRecord | None) -> str:
    if record is None:
        return "not recorded"
    if record.numel == 0:
        return "empty"
    parts = []
    zeros = round(record.zero_fraction * record.numel)
    if zeros:
        parts.append(f"{zeros} of {record.numel} values exactly 0")
    if record.nan_count:
        parts.append(f"{record.nan_count} NaN")
    if record.inf_count:
        parts.append(f"{record.inf_count} Inf")
    if record.min is not None:
        parts.append(f"min {number(record.min)}, max {number(record.max)}")
    return ", ".join(parts) or "no values"


def _nonfinite(records) -> int:
    return sum(r.nan_count + r.inf_count for r in records if r is not None)


def _forward_inputs(run: hookviz.data.run.Run, node_id: str) -> list[tuple[int, str, TensorRecord | None]]:
    """(slot, producer id, producer's forward output record) for each input of a node."""
    inputs = []
    for producer in run.graph.predecessors(node_id):
        slot = run.graph.edges[producer, node_id].get("slot", 0)
        inputs.append((slot, producer, run.nodes[producer].output))
    return sorted(inputs)


def _introduced_by_hooks(run: hookviz.data.run.Run, types: dict[str, str]) -> list[Finding]:
    """The first hookviz edit, and the first hook of the user's, whose output holds NaN/Inf that its
    input did not: there the edit or hook, not an op, brought them in."""
    found, kinds = [], set()
    for call in run.hook_calls:  # in the order they fired
        edit = call.kind == "edit"
        if edit in kinds or not call.after or _nonfinite(call.after) <= _nonfinite(call.before):
            continue
        kinds.add(edit)
        who = f"your edit {call.name!r}" if edit else f"your {call.kind} {call.name!r}"
        where = call.node or call.where
        module = run.nodes[call.node].module if call.node in run.nodes else call.where
        found.append(
            Finding(
                "nan",
                module,
                call.node,
                (
                    f"NaN/Inf enters backward at {where or '<root module>'}: {who} returned "
                    + ", ".join(_describe(r) for r in call.after if r is not None and not r.finite)
                    + " from finite gradients; the edit or hook caused it, not the model"
                ),
                float(_nonfinite(call.after)),
            )
        )
    return found


def nan_findings(run: hookviz.data.run.Run) -> list[Finding]:
    """Where NaN/Inf first appear: in forward (an op's output or a model input) and in backward."""
    found = []
    types = {c.module: c.type for c in run.calls}
    root_inputs = (run.calls[0].inputs or {}) if run.calls else {}  # {} while pending
    bad_inputs = [(n, r) for n, r in root_inputs.items() if isinstance(r, TensorRecord) and not r.finite]
    for name, record in bad_inputs:
        found.append(
            Finding(
                "nan",
                "",
                name if name in run.nodes else None,
                (
                    f"the model input {name!r} already holds NaN/Inf ({_describe(record)}): clean the data "
                    "before it reaches the model"
                ),
                float(record.nan_count + record.inf_count),
            )
        )
    ops = [r for r in run.nodes.values() if r.kind == "op" and r.order is not None]
    if not bad_inputs:
        # The engine runs a node only after all its consumers, so reversed backward order is a
        # forward (topological) order.
        for record in sorted(ops, key=lambda r: -r.order):
            if record.output is None or record.output.finite:
                continue
            inputs = _forward_inputs(run, record.id)
            if any(r is not None and not r.finite for _, _, r in inputs):
                continue
            what, why = _CAUSES.get(record.op, (record.op, ""))
            evidence = "; ".join(
                f"input {slot} (from {producer}): {_describe(r)}" for slot, producer, r in inputs
            )
            found.append(
                Finding(
                    "nan",
                    record.module,
                    record.id,
                    (
                        f"NaN/Inf first appears in forward at {record.id} ({what}) in "
                        f"{module_label(record.module, types)}: its output has {_describe(record.output)}"
                        + (f"; {evidence}" if evidence else "")
                        + (f". {why}" if why else "")
                    ),
                    float(record.output.nan_count + record.output.inf_count),
                )
            )
            break
    introduced = _introduced_by_hooks(run, types)
    found += introduced
    blamed = {f.node for f in introduced}
    for record in sorted(ops, key=lambda r: r.order):
        bad = _nonfinite(record.grad_inputs)
        if not bad or _nonfinite(record.grad_outputs) or record.id in blamed:
            continue
        what, why = _CAUSES.get(record.op, (record.op, ""))
        slots = [i for i, r in enumerate(record.grad_inputs) if r is not None and not r.finite]
        inputs = [(s, p, r) for s, p, r in _forward_inputs(run, record.id) if s in slots]
        evidence = "; ".join(
            f"forward input {slot} (from {producer}): {_describe(r)}" for slot, producer, r in inputs
        )
        if any(r is not None and not r.finite for _, _, r in inputs):
            why = "its forward input already held NaN/Inf: the cause is where they first appear in forward"
        found.append(
            Finding(
                "nan",
                record.module,
                record.id,
                (
                    f"NaN/Inf first appears in backward at {record.id} ({what}) in "
                    f"{module_label(record.module, types)}: its grad_outputs are finite but "
                    + ", ".join(f"grad_inputs[{i}] has {_describe(record.grad_inputs[i])}" for i in slots)
                    + (f"; {evidence}" if evidence else "")
                    + (f". {why}" if why else "")
                ),
                float(bad),
            )
        )
        break
    return found
