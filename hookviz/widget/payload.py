"""Run -> JSON: what the widget's page draws, as plain JSON-safe dicts and lists.

Pure functions of a :class:`hookviz.Run` (and the baseline run to compare with); no widget and no
traitlets here, so they are tested and timed on their own. Numbers that JSON cannot hold (NaN,
Inf) become the strings ``"nan"``, ``"inf"``, ``"-inf"``, as :meth:`TensorRecord.to_dict` writes them.

Module groups: every op node belongs to the innermost module that created it (its ``module``
attribute); a module ``"a.b"`` is drawn as a compound node inside ``"a"``. The root module ``""``
is not a group (it holds everything). Which groups are open, their labels and which siblings are
identical blocks are the page's job (``js/src/logic.js``); where things sit on screen too (ELK).
"""

from __future__ import annotations

import hashlib
import math
from collections import defaultdict

import torch

from hookviz.analysis.explain import explain
from hookviz.data.run import LOSS_MODULE, Run, leaf_diffs, records_equal
from hookviz.data.tensors import StatsBatch, combined_norm
from hookviz.errors import TargetError
from hookviz.widget.tree import (
    MODULE_PREFIX,
    group_id,
    mark_signatures,
    natural_key,
    parent_module,
)

# One rule for the chart's line and the diagnosis banner: a layer's gradient vanishes below this
# fraction of the gradient of the layer nearest the loss (hookviz.analysis.diagnose's default).
VANISHING_RATIO = 1e-3


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


def structure_key(run: Run) -> str:
    """A hash of the run's Node ids and edges: equal for re-runs of the same graph."""
    digest = hashlib.blake2b(digest_size=12)
    for node in run.nodes:
        digest.update(node.encode())
        digest.update(b"\0")
    digest.update(b"\1")
    for u, v, _ in run.edges:
        digest.update(f"{u}\0{v}\0".encode())
    return digest.hexdigest()


def node_norms(run: Run) -> dict[str, float | None]:
    """Each Node's colour norm: the combined 2-norm of the gradients that reached it (its
    ``grad_outputs``; see ``Run.graph``'s ``grad_norm``), by node id."""
    return {node_id: record.grad_norm for node_id, record in run.nodes.items()}


def _edges_json(run: Run) -> list[list]:
    """``[producer, consumer, slot]`` once per pair (the last slot, as ``Run.graph`` keeps it),
    grouped by producer in Node order."""
    succ: dict[str, dict[str, int]] = {}
    for u, v, slot in run.edges:
        succ.setdefault(u, {})[v] = slot
    return [[u, v, slot] for u in run.nodes for v, slot in succ.get(u, {}).items()]


def module_norms(run: Run) -> dict[str, float | None]:
    """Norm of the gradient into each module's inputs (what a full backward hook's ``grad_input``
    holds), over all its calls: ``sqrt(sum of squared norms)``; None when no input got a gradient."""
    norms: dict[str, list[float]] = {}
    for call in run.calls:
        for record in call.grad_input:
            if record is not None and record.norm is not None:
                norms.setdefault(call.module, []).append(float(record.norm))
    return {module: combined_norm(values) for module, values in norms.items()}


def _color_range(norms) -> dict:
    logs = [math.log10(n) for n in norms if n is not None and math.isfinite(n) and n > 0]
    return _log_range(min(logs), max(logs)) if logs else _log_range(None, None)


def _log_range(smallest: float | None, largest: float | None) -> dict:
    """The colour range ``{lo, hi}`` (whole decades) around log10 norms from ``smallest`` to
    ``largest``; -1..1 when there is none."""
    if smallest is None:
        return {"lo": -1.0, "hi": 1.0}
    lo, hi = math.floor(smallest), math.ceil(largest)
    if hi <= lo:
        hi = lo + 1
    return {"lo": lo, "hi": hi}


def graph_json(run: Run, baseline: Run | None = None, structure: str | None = None) -> dict:
    """The op graph and its module groups, as the page draws them (the page lays them out).

    Args:
        run: the run to show.
        baseline: the run whose norms fix the colour range, so that one colour means one norm in
            every run of a session (values outside saturate; the page marks them).
        structure: the :func:`structure_key` from an earlier call on the same graph, to skip
            recomputing it on a re-run.

    Returns:
        ``{"structure", "nodes", "edges", "groups", "color_range"}``. Node: ``{id, op, module,
        kind, order, norm, nan, edited, user_hooks, hint}`` (module: the box it is drawn in, the
        module that made it except for the loss ops of :func:`_box_the_loss_ops`; hint:
        :func:`operand_hint`); edge:
        ``[source, target, slot]`` in forward direction; group: ``{id, module, parent, type,
        size, norm, nan, edited, user_hooks, signature}`` (signature: see
        :func:`hookviz.widget.tree.mark_signatures`; the page adds labels and identical blocks).
    """
    key = structure if structure is not None else structure_key(run)
    edited_targets = {edit.target for edit in run.edits}
    edited_nodes = run.edited_nodes
    norms = node_norms(run)
    nodes = []
    by_module: dict[str, list[dict]] = defaultdict(list)
    for node_id, record in run.nodes.items():
        norm = norms[node_id]
        kind = record.kind
        item = {
            "id": node_id,
            "op": record.op,
            "module": record.module,
            "kind": kind,
            "order": record.order,
            "norm": json_float(norm),
            "nan": record.has_nan or (norm is not None and not math.isfinite(norm)),
            "edited": node_id in edited_nodes or node_id in edited_targets,
            "user_hooks": len(record.user_hooks),
            "hint": operand_hint(record) if kind == "op" else "",
        }
        nodes.append(item)
    edges = _edges_json(run)
    _box_the_loss_ops(nodes, edges)
    for item in nodes:
        by_module[item["module"]].append(item)

    boundary = module_norms(run)
    module_hooks = defaultdict(int)
    types = {}
    for call in run.calls:
        module_hooks[call.module] += len(call.user_hooks)
        types.setdefault(call.module, call.type)
    groups = _groups(by_module, boundary, edited_targets, module_hooks, types)
    mark_signatures(groups, nodes, _leaf_shapes(run))
    scale = baseline if baseline is not None else run
    scale_norms = list((norms if scale is run else node_norms(scale)).values())
    scale_norms += list(module_norms(scale).values()) if scale is not run else list(boundary.values())
    return {
        "structure": key,
        "nodes": nodes,
        "edges": edges,
        "groups": groups,
        "color_range": _color_range(scale_norms),
    }


def _box_the_loss_ops(nodes: list[dict], edges: list[list]) -> None:
    """Draw in the ``(loss)`` box, where ``loss_fn``'s ops go, the ops that the model's own forward
    runs after its last submodule: the loss a Hugging Face model computes inside ``forward``
    (GPT-2's ``View``, ``LogSoftmax``, ``NllLoss`` after ``lm_head``). Those are the root module's
    ops that no submodule's op follows and some submodule's op precedes. Only when ``loss_fn`` made
    no ops, and only the drawing: the run's records keep the module that made each Node (``""``).
    Changes ``nodes[i]["module"]`` in place."""
    if any(item["module"] == LOSS_MODULE for item in nodes):
        return
    inside = {item["id"] for item in nodes if item["module"] not in ("", LOSS_MODULE)}
    root_ops = [item for item in nodes if item["module"] == "" and item["kind"] == "op"]
    if not inside or not root_ops:
        return  # a model of root ops alone (the canonical example): nothing to set apart
    after, before = defaultdict(list), defaultdict(list)
    for source, target, _ in edges:
        after[source].append(target)
        before[target].append(source)

    def reaches_a_submodule(start: str, step, known: dict[str, bool]) -> bool:
        # Walked from each root op, not from every submodule op: a root op next to a submodule's
        # op stops at once. ``known`` keeps what earlier walks proved (in forward order, a chain
        # of loss ops is walked once per direction).
        seen, todo = {start}, [start]
        while todo:
            for other in step[todo.pop()]:
                if other in inside or known.get(other):
                    known[start] = True
                    return True
                if other not in seen and other not in known:
                    seen.add(other)
                    todo.append(other)
        known.update(dict.fromkeys(seen, False))  # nothing they reach is a submodule's op
        return False

    backward_known: dict[str, bool] = {}
    forward_known: dict[str, bool] = {}
    for item in root_ops:
        if reaches_a_submodule(item["id"], before, backward_known) and not reaches_a_submodule(
            item["id"], after, forward_known
        ):
            item["module"] = LOSS_MODULE


def operand_hint(record) -> str:
    """A short hint that tells ops of one kind apart, read from what the Node saved for backward.

    First its Python numbers (:attr:`~hookviz.data.run.NodeRecord.constants`): ``"×2"`` for the
    ``MulBackward0`` of ``2 * x``, ``"÷3"`` for ``x / 3``, ``"^2"`` for ``x ** 2``, ``"α=2"`` for
    ``torch.add(x, y, alpha=2)``, else up to two ``name=value`` pairs of numbers, leaving out
    defaults such as ``alpha=1``, flags and sizes (``"negative_slope=0.2"``, ``"max=1, min=-1"``,
    ``"dim=-1"``). Failing those, the leaves among its saved tensors
    (:attr:`~hookviz.data.run.SavedTensor.of`): ``"x×y"`` for the ``MulBackward0`` of ``x * y``,
    ``"x"`` for the ``AddmmBackward0`` of a ``Linear`` fed the input ``x``. The parameters of the
    Node's own module are left out (its box names them); another module's parameter is named
    by its last two parts (``"wte.weight"``).
    Empty when the Node saved neither."""
    if record is None:
        return ""
    return _number_hint(record) or _leaf_hint(record)


def _number_hint(record) -> str:
    if not record.constants:
        return ""
    constants = dict(record.constants)
    op = _op_kind(record.op)
    if op == "Mul" and "other" in constants:
        return f"×{_number(constants['other'])}"
    if op == "Div" and "other" in constants:
        return f"÷{_number(constants['other'])}"
    if op == "Pow" and "exponent" in constants:
        return f"^{_number(constants['exponent'])}"
    if "alpha" in constants and constants["alpha"] != 1 and op in ("Add", "Sub", "Rsub"):
        return f"α={_number(constants['alpha'])}"
    shown = [
        (name, value)
        for name, value in constants.items()
        # sizes (``self_sym_numel``), flags and default values tell nothing about the operands
        if "sym" not in name and not isinstance(value, bool) and (name, value) not in _DEFAULTS
    ][:2]
    return ", ".join(f"{name}={_number(value)}" for name, value in shown)


def _leaf_hint(record) -> str:
    own = record.module + "." if record.module else ""
    names = {}
    for saved in record.saved:
        if saved.of and not (own and saved.of.startswith(own)):
            names.setdefault(saved.name, ".".join(saved.of.split(".")[-2:]))
    op = _op_kind(record.op)
    sign = {"Mul": "×", "Div": "÷"}.get(op)
    if sign and ("self" in names or "other" in names):
        return f"{names.get('self', '')}{sign}{names.get('other', '')}"
    return ", ".join(list(dict.fromkeys(names.values()))[:2])


def _op_kind(op: str) -> str:
    """``"MulBackward0"`` -> ``"Mul"``."""
    return op.rstrip("0123456789").removesuffix("Backward")


_DEFAULTS = {("alpha", 1), ("beta", 1), ("padding_idx", -1)}


def _number(value) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def _leaf_shapes(run: Run) -> dict[str, tuple]:
    """Each leaf's shape, from the gradient its AccumulateGrad saw (leaves without one: left out)."""
    out = {}
    for name in run.leaf_names:
        record = run.nodes.get(name)
        grads = record.grad_outputs if record is not None else None
        if grads and grads[0] is not None:
            out[name] = tuple(grads[0].shape)
    return out


def _combine(norms) -> float | None:
    norm = combined_norm(norms)
    return math.inf if norm is not None and math.isnan(norm) else norm  # NaN is drawn red elsewhere


def _as_float(value) -> float | None:
    if value is None:
        return None
    if isinstance(value, str):
        return float(value)
    return float(value)


def _groups(by_module, boundary, edited_targets, module_hooks, types) -> list[dict]:
    """One group per non-root module that created nodes, plus every enclosing module; outer
    before inner, siblings in the order the forward first called them (``types`` is in call
    order), so the Module tree lists GPT-2's ``wte, wpe, drop, h, ln_f`` as the model runs them."""
    called: dict[str, int] = {}
    for module in types:  # a container never called itself (a ModuleList) ranks as its first child
        while module and module not in called:
            called[module] = len(called)
            module = parent_module(module)
    # Each module's own nodes summed once, then added to it and every enclosing module: a walk
    # up per module, not per node (20,000 nodes three modules deep).
    totals: dict[str, list] = {}  # module -> [size, op norms, nan, edited, user hooks]
    for module, items in by_module.items():
        norms = [_as_float(i["norm"]) for i in items if i["kind"] == "op"]
        nan, edited = any(i["nan"] for i in items), any(i["edited"] for i in items)
        hooks = sum(i["user_hooks"] for i in items)
        name = module
        while name:
            total = totals.get(name)
            if total is None:
                totals[name] = [len(items), list(norms), nan, edited, hooks]
            else:
                total[0] += len(items)
                total[1] += norms
                total[2], total[3], total[4] = total[2] or nan, total[3] or edited, total[4] + hooks
            name = parent_module(name)
    groups = []
    for module in sorted(totals, key=lambda m: (m.count("."), called.get(m, len(called)), natural_key(m))):
        size, norms, nan, edited, hooks = totals[module]
        norm = boundary.get(module)
        groups.append(
            {
                "id": group_id(module),
                "module": module,
                "parent": None if parent_module(module) is None else group_id(parent_module(module)),
                "type": types.get(module, ""),
                "size": size,
                "norm": json_float(norm if norm is not None else _combine(norms)),
                "nan": nan,
                "edited": module in edited_targets or edited,
                "user_hooks": module_hooks.get(module, 0) + hooks,
            }
        )
    return groups


def _hooks_json(run: Run, node_id: str, record) -> list[dict]:
    """The hooks at a node: the user's own, hookviz's recording hook, and the edits installed there."""
    hooks = [{"owner": "user", "kind": h.kind, "name": h.name, "where": h.where} for h in record.user_hooks]
    hooks.append(
        {
            "owner": "hookviz",
            "kind": "node post-hook",
            "name": "record grad_outputs / grad_inputs",
            "where": node_id,
        }
    )
    for edit in run.edits:
        if edit.target == node_id:
            hooks.append(
                {
                    "owner": "hookviz",
                    "kind": f"edit {edit.id}",
                    "name": f"{edit.slot} <- {edit.source}",
                    "where": node_id,
                }
            )
    for call in run.hooks_at(node_id):
        if call.kind != "edit":
            hooks.append(
                {
                    "owner": "user",
                    "kind": f"fired: {call.kind}",
                    "name": call.name,
                    "where": call.where,
                }
            )
    return hooks


def _changed(after, before) -> list[bool] | None:
    if after is None or before is None:
        return None
    out = []
    for i, a in enumerate(after):
        b = before[i] if i < len(before) else None
        out.append(_record_changed(a, b))
    return out


def _record_changed(a, b) -> bool:
    return not records_equal((a,), (b,))


# Friendlier words for schema arguments whose name hides their role (addmm's "self" is the bias).
_ARGUMENT_ROLES = {("addmm", "self"): "self/bias", ("addmv", "self"): "self/bias"}


def _snake(name: str) -> str:
    out = []
    for i, ch in enumerate(name):
        if ch.isupper() and i and not name[i - 1].isupper():
            out.append("_")
        out.append(ch.lower())
    return "".join(out)


def grad_input_names(op: str, count: int) -> list[str] | None:
    """The forward argument each of an autograd Node's ``grad_inputs`` belongs to, from PyTorch's
    op schema: ``AddmmBackward0`` with 3 -> ``["self/bias", "mat1", "mat2"]``. The overload whose
    tensor arguments number ``count`` is used; None when no schema matches (custom Functions,
    AccumulateGrad, ops whose backward is not one aten op)."""
    import re

    match = re.fullmatch(r"([A-Za-z0-9]+?)Backward\d*", op or "")
    if not match or count <= 0:
        return None
    name = _snake(match.group(1))
    try:
        schemas = torch._C._jit_get_schemas_for_operator(f"aten::{name}")
    except RuntimeError:
        return None
    for schema in schemas:
        tensors = [a.name for a in schema.arguments if str(a.type) in ("Tensor", "Optional[Tensor]")]
        if len(tensors) == count:
            return [_ARGUMENT_ROLES.get((name, t), t) for t in tensors]
    return None


def node_inspector_json(run: Run, node_id: str, baseline: Run | None = None) -> dict:
    """What the inspector shows for one node; raises TargetError for an unknown id.

    ``before`` holds the baseline run's ``grad_inputs`` / ``grad_outputs`` and ``changed`` which
    of them differ, when a baseline other than ``run`` is given and has the node.
    """
    record = run.node(node_id)
    out = {
        "id": node_id,
        "target": node_id,
        "kind": "node",
        "op": record.op,
        "module": record.module,
        "node_kind": record.kind,
        "order": record.order,
        "output": tensor_json(record.output),
        "pending": list(record.pending),  # what run.fill_details() adds; ``output`` is None meanwhile
        "grad_outputs": tensors_json(record.grad_outputs),
        "grad_inputs": tensors_json(record.grad_inputs),
        "grad_inputs_before_edit": tensors_json(record.grad_inputs_before_edit),
        "saved": [
            {"name": s.name, "shape": list(s.shape), "dtype": s.dtype, "nbytes": s.nbytes, "of": s.of}
            for s in record.saved
        ],
        "hooks": _hooks_json(run, node_id, record),
        "sites": list(record.sites),
        "grad_input_names": grad_input_names(
            record.op, len(record.grad_inputs) if record.grad_inputs is not None else 0
        ),
        "edited": any(edit.target == node_id for edit in run.edits),
        "before": None,
        "changed": None,
    }
    if record.order is None or not any(g is not None for g in record.grad_outputs):
        out["explanation"] = explain(run, node_id)  # why no hook fires here
    if node_id in run.asked_grads:
        out["asked_grad"] = True  # exists only because input_grads=True asked for it
    before = baseline.nodes.get(node_id) if baseline is not None and baseline is not run else None
    if before is not None:
        out["before"], out["changed"] = _against(record, before, ("grad_inputs", "grad_outputs"))
    return out


def _against(now, before, fields: tuple[str, ...]) -> tuple[dict, dict]:
    """``before`` values and per-tensor ``changed`` flags of ``fields`` of two records."""
    return (
        {name: tensors_json(getattr(before, name)) for name in fields},
        {name: _changed(getattr(now, name), getattr(before, name)) for name in fields},
    )


def module_inspector_json(run: Run, module: str, sites: list[str], baseline: Run | None = None) -> dict:
    """What the inspector shows for a module: forward inputs/output, full and legacy backward
    hook views (first call). Raises TargetError for a module that did not run."""
    call = run.module_io(module)
    out = {
        "id": MODULE_PREFIX + module,
        "target": module,
        "kind": "module",
        "op": call.type,
        "module": module,
        "node_kind": "module",
        "order": None,
        # None while the run's details are pending (``pending`` names what run.fill_details() adds)
        "inputs": None
        if call.inputs is None
        else {k: (v if isinstance(v, str) else tensor_json(v)) for k, v in call.inputs.items()},
        "output_list": tensors_json(call.output),
        "pending": list(call.pending),
        "grad_input": tensors_json(call.grad_input),
        "grad_output": tensors_json(call.grad_output),
        "legacy_grad_input": tensors_json(call.legacy_grad_input),
        "legacy_grad_output": tensors_json(call.legacy_grad_output),
        "hooks": [
            {"owner": "user", "kind": h.kind, "name": h.name, "where": h.where} for h in call.user_hooks
        ]
        + [
            {
                "owner": "hookviz",
                "kind": f"edit {e.id}",
                "name": f"{e.slot} <- {e.source}",
                "where": module,
            }
            for e in run.edits
            if e.target == module
        ],
        "sites": list(sites),
        "edited": any(e.target == module for e in run.edits),
        "before": None,
        "changed": None,
    }
    if not call.full_hook_fires:
        out["explanation"] = explain(run, module)  # why its full backward hook never fires
    if baseline is not None and baseline is not run:
        try:
            before = baseline.module_io(module)
        except TargetError:  # the module did not run in the baseline
            before = None
        if before is not None:
            out["before"], out["changed"] = _against(call, before, ("grad_input", "grad_output"))
    return out


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
    return {name: (records[keys[name]].to_dict(LEAF_FIELDS) if name in keys else None) for name in tensors}


def leaf_summary_json(
    run: Run, baseline: Run | None = None, baseline_summaries: dict | None = None
) -> list[dict]:
    """Every leaf's grad in the baseline and in ``run``: ``[{name, before, after, changed}]``.

    ``baseline_summaries`` (from :func:`leaf_summaries`) skips summarising the baseline again;
    a leaf whose gradient did not change reuses the baseline's summary.
    """
    base = baseline if baseline is not None else run
    leaves = leaf_diffs(base, run)
    before = baseline_summaries if baseline_summaries is not None else leaf_summaries(base)
    after = _summaries({name: leaf.after for name, leaf in leaves.items() if leaf.changed})
    return [
        {
            "name": name,
            "before": before.get(name),
            "after": after[name] if leaf.changed else before.get(name),
            "changed": bool(leaf.changed),
        }
        for name, leaf in leaves.items()
    ]


def leaf_summaries(run: Run) -> dict[str, dict | None]:
    """The leaf-table summary of every leaf's grad in ``run`` (see :func:`_summaries`), by leaf name."""
    return _summaries({name: run.leaf_grad(name) for name in run.leaf_names})


def chart_json(run: Run, baseline: Run | None = None, vanishing: float = VANISHING_RATIO) -> dict:
    """Gradient flow by the diagnosis's own rule: per layer (a module with parameters, input ->
    output) the norm of its parameters' gradient in ``run`` and in ``baseline``, and the
    vanishing line at ``vanishing`` x the norm of the layer nearest the loss, where
    :func:`hookviz.analysis.diagnose.diagnose` draws it. Zero norms cannot sit on a log axis: ``floor`` is
    the height at which the page draws them, marked as zero.

    Returns:
        ``{"modules", "current", "baseline", "threshold", "rule", "floor"}``; ``threshold`` is
        None when no layer has a gradient.
    """
    from hookviz.analysis.diagnose import gradient_stats

    def layer_norms(r: Run) -> dict[str, float]:
        layers = [s for s in gradient_stats(r, counts=False) if s.kind == "layer"]
        return {s.name: s.grad_norm for s in reversed(layers)}  # input -> output

    current = layer_norms(run)
    before = layer_norms(baseline) if baseline is not None and baseline is not run else current
    modules = list(current)
    nearest = modules[-1] if modules else None
    reference = current.get(nearest) if nearest is not None else None
    usable = reference is not None and math.isfinite(reference) and reference > 0
    threshold = vanishing * reference if usable else None
    positive = [
        v
        for v in [*current.values(), *before.values(), threshold]
        if v is not None and math.isfinite(v) and v > 0
    ]
    floor = 10 ** (math.floor(math.log10(min(positive))) - 1) if positive else 1e-12
    chart = {
        "modules": modules,
        "current": [json_float(current[m]) for m in modules],
        "baseline": [json_float(before.get(m)) for m in modules],
        "threshold": json_float(threshold),
        "rule": f"vanishing below {vanishing:g} x the layer nearest the loss ({nearest})" if usable else "",
        "floor": floor,
    }
    chart["figure"] = chart_spec(chart)
    return chart


def replay_json(run: Run) -> list[dict]:
    """The recorded backward execution order as replay steps: ``[{node, op, hooks}]``; the user
    hooks and edits that fired at a node are attached to its step."""
    steps: list[dict] = []
    step_of: dict[str, int] = {}
    pending: dict[str, list[dict]] = defaultdict(list)
    for event in run.events:
        if event.kind == "node":
            node = run.nodes.get(event.node)
            step_of[event.node] = len(steps)
            steps.append(
                {
                    "node": event.node,
                    "op": node.op if node else "",
                    "hooks": pending.pop(event.node, []),
                }
            )
        else:
            fired = {"kind": event.kind, "detail": event.detail}
            if event.node in step_of:
                steps[step_of[event.node]]["hooks"].append(fired)
            elif event.node is not None:
                pending[event.node].append(fired)
            elif steps:
                steps[-1]["hooks"].append(fired)
    return steps


def log_json(run: Run) -> list[dict]:
    """What the user's hooks printed: ``[{hook, where, text}]``."""
    return [{"hook": e.hook, "where": e.where, "text": e.text} for e in run.log]


def _edit_key(edit) -> tuple:
    return (edit.id, edit.target, str(edit.slot), edit.source)


def edits_json(edits, shown=None) -> list[dict]:
    """Active edits: ``[{id, target, slot, source, pending}]``; ``pending`` when the run on
    screen (``shown``: its edits) was made without it, i.e. it takes effect at the next re-run."""
    done = None if shown is None else {_edit_key(e) for e in shown}
    return [
        {
            "id": e.id,
            "target": e.target,
            "slot": str(e.slot),
            "source": e.source,
            "pending": done is not None and _edit_key(e) not in done,
        }
        for e in edits
    ]


def edit_state_json(edits, shown) -> dict:
    """Whether the run on screen is the one the edits would make: ``{stale, pending_targets,
    removed_targets}``; ``stale`` when an edit was added, removed or reset since that run."""
    now = {_edit_key(e): e for e in edits}
    then = {_edit_key(e): e for e in shown}
    pending = sorted({e.target for k, e in now.items() if k not in then})
    removed = sorted({e.target for k, e in then.items() if k not in now})
    return {
        "stale": bool(pending or removed),
        "pending_targets": pending,
        "removed_targets": removed,
    }


# ----- diagnosis and the watch view -------------------------------------------------------------

FINDING_KINDS = ("nan", "exploding", "vanishing", "dead", "saturated")


def findings_json(findings, caused_by_edits: set | None = None) -> list[dict]:
    """:class:`hookviz.Finding` objects as ``[{kind, module, node, message, value, step, modules,
    from_edit}]`` (``modules``: the run of layers a grouped finding covers, else empty);
    ``from_edit`` for those with a place (``(kind, module)``, each module of a grouped finding)
    in ``caused_by_edits``."""
    caused_by_edits = caused_by_edits or set()
    return [
        {
            "kind": f.kind,
            "module": f.module,
            "node": f.node,
            "message": f.message,
            "value": json_float(f.value),
            "step": f.step,
            "modules": list(f.modules),
            "from_edit": any((f.kind, module) in caused_by_edits for module in (f.modules or (f.module,))),
        }
        for f in findings
    ]


def diagnosis_json(
    findings,
    source: str = "run",
    step: int | None = None,
    error: str | None = None,
    caused_by_edits: set | None = None,
    pending: bool = False,
) -> dict:
    """What the diagnosis banner shows: ``{source, step, findings, counts, error, pending}``.

    ``source`` is ``"run"`` (``hookviz.diagnose(run)``) or ``"watch"`` (``watch.diagnose(step)``);
    ``counts`` is ``{kind: number of findings}`` in :data:`FINDING_KINDS` order (kinds with none
    left out); ``error`` says why the diagnosis failed (then ``findings`` is empty); ``pending``:
    the run's details are still being recorded (:meth:`hookviz.Widget.fill_details`).
    """
    items = findings_json(findings, caused_by_edits)
    kinds = [k for k in FINDING_KINDS if any(f["kind"] == k for f in items)]
    kinds += sorted({f["kind"] for f in items} - set(kinds))
    return {
        "source": source,
        "step": step,
        "findings": items,
        "counts": {k: sum(f["kind"] == k for f in items) for k in kinds},
        "error": error,
        "pending": pending,
    }


def watch_node_norms(graph_data: dict, parameter_norms: dict, output_norms: dict) -> dict:
    """The watch's norms on the drawn elements: ``{element id: norm}``.

    A parameter leaf (its node id is the parameter's qualified name) takes the norm of that
    parameter's gradient. A module group (``"group:<name>"``) takes the norm of the gradient
    w.r.t. the module's output where the watch recorded outputs (``hookviz.watch(...,
    outputs=True)``), else the 2-norm of all its parameters' gradients taken together (every
    parameter named ``<name>.…``), so the default watch colours modules too. Elements left out
    have no value (drawn grey): what ``loss_fn`` built, a module without parameters when outputs
    were not watched.
    """
    out = {}
    for item in graph_data.get("nodes", []):
        if item["kind"] == "leaf" and item["id"] in parameter_norms:
            out[item["id"]] = json_float(parameter_norms[item["id"]])
    for group in graph_data.get("groups", []):
        module = group["module"]
        if module in output_norms:
            norm = output_norms[module]
        else:
            prefix = f"{module}."
            norm = combined_norm(v for name, v in parameter_norms.items() if name.startswith(prefix))
        if norm is not None:
            out[group["id"]] = json_float(norm)
    return out


def watch_color_range(history) -> dict:
    """One log10 colour range over every kept step of a watch, so the colours of two steps compare."""
    norms = history.norm[torch.isfinite(history.norm) & (history.norm > 0)]
    if not norms.numel():
        return _log_range(None, None)
    logs = torch.log10(norms)
    return _log_range(logs.min().item(), logs.max().item())


# A live watch figure (live_watch_figure) draws at most this many steps (evenly picked, the last
# always among them) and lines of at most this many layers (evenly picked, first and last among
# them): it is sent again every update while training runs.
LIVE_FIGURE_STEPS = 256
LIVE_FIGURE_LAYERS = 12
NAN_COLOR = "#e53935"  # the colour js/src/logic.js draws NaN/Inf in


def _evenly(count: int, most: int) -> list[int]:
    """At most ``most`` indices of ``range(count)``, evenly spread, first and last included."""
    if count <= most:
        return list(range(count))
    return sorted({round(i * (count - 1) / (most - 1)) for i in range(most)})


def live_watch_figure(history, title: str) -> dict:
    """A watch's parameter gradients over the kept steps as one plotly figure dict: above, a
    heatmap of log10 of each parameter's gradient norm (names x steps); below, the 2-norm of each
    layer's parameter gradients over steps (log axis; a layer = the module owning the
    parameters, darker = nearer the input). Built as plain JSON, not through plotly.py (it is
    sent again on every live update, see :mod:`hookviz.widget.live`).

    Args:
        history: a :class:`hookviz.watching.history.History` (``watch.history``).
        title: the figure's title.

    Returns:
        ``{"data": [...], "layout": {...}}``; NaN/Inf (a missing or non-finite norm) are null.
    """
    columns = [i for i, kind in enumerate(history.kinds) if kind == "parameter"]
    names = [history.names[i] for i in columns]
    picked = _evenly(len(history.steps), LIVE_FIGURE_STEPS)
    steps = [history.steps[i] for i in picked]
    norms = history.norm[picked][:, columns] if columns else torch.zeros(len(picked), 0, dtype=torch.float64)
    nan = torch.tensor(math.nan, dtype=torch.float64)
    logs = torch.log10(norms.where(norms > 0, nan)).round(decimals=3)
    logs = logs.where(torch.isfinite(logs), nan)
    z = [[v if v == v else None for v in row] for row in logs.T.tolist()]  # NaN != NaN: JSON null
    # Layer norms: sqrt of the sum of its parameters' squared norms (NaN where none got a gradient).
    layers: dict[str, list[int]] = {}
    for position, name in enumerate(names):
        layers.setdefault(name.rpartition(".")[0], []).append(position)
    modules = list(layers)
    shown = [modules[i] for i in _evenly(len(modules), LIVE_FIGURE_LAYERS)]
    traces = []
    for depth, module in enumerate(shown):
        squares = norms[:, layers[module]] ** 2
        layer = (
            squares.nansum(1)
            .sqrt()
            .where(~squares.isnan().all(1), torch.tensor(math.nan, dtype=torch.float64))
        )
        lightness = 25 + 50 * depth / max(1, len(shown) - 1)
        traces.append(
            {
                "type": "scatter",
                "mode": "lines",
                "x": steps,
                "y": [float(f"{v:.4g}") if math.isfinite(v) and v > 0 else None for v in layer.tolist()],
                "name": module or "(root)",
                "line": {"width": 1.5, "color": f"hsl(220, 70%, {lightness:.0f}%)"},
                "xaxis": "x2",
                "yaxis": "y2",
                "hovertemplate": "step %{x}<br>" + (module or "(root)") + " %{y:.3g}<extra></extra>",
            }
        )
    # NaN/Inf in a gradient: its cells drawn red over the heatmap, as the graph draws them.
    nonfinite = history.nonfinite[picked][:, columns] if columns else torch.zeros(len(picked), 0)
    if bool((nonfinite > 0).any()):
        bad = [[1 if v > 0 else None for v in row] for row in nonfinite.T.tolist()]
        traces.insert(
            0,
            {
                "type": "heatmap",
                "z": bad,
                "x": steps,
                "y": names,
                "colorscale": [[0, NAN_COLOR], [1, NAN_COLOR]],
                "showscale": False,
                "name": "NaN/Inf",
                "hovertemplate": "step %{x}<br>%{y}<br>NaN/Inf in the gradient<extra></extra>",
            },
        )
    heat_height = min(420, 60 + 14 * len(names))
    return {
        "data": [
            {
                "type": "heatmap",
                "z": z,
                "x": steps,
                "y": names,
                "colorscale": "Viridis",
                "colorbar": {"title": {"text": "log10 ‖grad‖"}, "len": 0.55, "y": 1, "yanchor": "top"},
                "hovertemplate": "step %{x}<br>%{y}<br>log10 ‖grad‖ %{z:.3g}<extra></extra>",
            },
            *traces,
        ],
        "layout": {
            "title": {"text": title},
            "height": heat_height + 300,
            "showlegend": True,
            "legend": {"y": 0.3, "yanchor": "top", "font": {"size": 10}},
            "xaxis": {"anchor": "y"},
            "yaxis": {"domain": [0.42, 1], "autorange": "reversed", "type": "category", "automargin": True},
            "xaxis2": {"anchor": "y2", "matches": "x", "title": {"text": "step"}},
            "yaxis2": {
                "domain": [0, 0.3],
                "type": "log",
                "title": {"text": "layer ‖grad‖"},
                "exponentformat": "power",
            },
        },
    }


def figure_json(figure) -> dict:
    """A plotly figure as JSON the page can hand to ``Plotly.react`` (NaN become null), without
    plotly.py's template (large, and only a restyling)."""
    import json

    data = json.loads(figure.to_json())
    data.get("layout", {}).pop("template", None)
    return data


# More layers than this: no tick labels (hover names them); more than CHART_MARKERS: lines only.
CHART_TICK_LABELS = 40
CHART_MARKERS = 150


def chart_spec(chart: dict) -> dict:
    """The gradient-flow chart (from :func:`chart_json`) as a plotly figure ``{"data", "layout"}``:
    per-layer gradient norm on a log axis, this run against the baseline, the vanishing line dashed.
    Zero norms cannot sit on a log axis: they are drawn at the chart's ``floor``, marked with a
    triangle; missing or non-finite ones are gaps. The one home of the chart: the page draws this
    figure (``js/src/chart.js`` adds the theme's colours and its height) and :func:`chart_figure`
    gives it to Python. Layout keys: https://plotly.com/javascript/reference/layout/."""
    floor = chart.get("floor") or 1e-12

    def on_log_axis(values):
        out = []
        for v in values:
            v = None if v is None else float(v)
            out.append(None if v is None or not math.isfinite(v) else (floor if v <= 0 else v))
        return out

    labels = [m or "(root)" for m in chart.get("modules", [])]
    current = chart.get("current", [])
    zeros = [label for label, v in zip(labels, current) if v is not None and float(v) == 0]
    mode = "lines" if len(labels) > CHART_MARKERS else "lines+markers"
    many = len(labels) > CHART_TICK_LABELS
    data = [
        {
            "type": "scatter",
            "x": labels,
            "y": on_log_axis(chart.get("baseline", [])),
            "name": "baseline",
            "mode": mode,
            "line": {"color": "#90a4ae", "dash": "dot"},
        },
        {
            "type": "scatter",
            "x": labels,
            "y": on_log_axis(current),
            "name": "this run",
            "mode": mode,
            "line": {"color": "#1e88e5"},
        },
        {
            "type": "scatter",
            "x": zeros,
            "y": [floor] * len(zeros),
            "name": "zero (drawn at the floor)",
            "mode": "markers",
            "marker": {"symbol": "triangle-down", "size": 10, "color": "#e53935"},
        },
    ]
    threshold = chart.get("threshold")
    threshold = float(threshold) if threshold is not None and math.isfinite(float(threshold)) else None
    layout = {
        "title": {"text": "Gradient flow: norm of each layer's parameter gradient"},
        # Module names such as "0" and "2" (an nn.Sequential's) are names, not numbers.
        "xaxis": {
            "type": "category",
            "automargin": True,
            "tickangle": -30,
            "showticklabels": not many,
            "title": {
                "text": f"{len(labels)} modules, input → output (hover for names)"
                if many
                else "layer (input → output)"
            },
        },
        "yaxis": {"type": "log", "title": {"text": "‖grad‖ (log)"}, "exponentformat": "e"},
        "legend": {"orientation": "h", "y": 1.12, "x": 1, "xanchor": "right"},
        "shapes": [],
        "annotations": [],
    }
    if threshold and threshold > 0:
        layout["shapes"].append(
            {
                "type": "line",
                "xref": "paper",
                "x0": 0,
                "x1": 1,
                "y0": threshold,
                "y1": threshold,
                "line": {"color": "#e53935", "dash": "dash", "width": 1},
            }
        )
        layout["annotations"].append(
            {
                "xref": "paper",
                "x": 0,
                "y": math.log10(threshold),  # annotations on a log axis are placed in log10 units
                "text": chart.get("rule") or f"vanishing < {threshold:g}",
                "showarrow": False,
                "font": {"color": "#e53935", "size": 10},
                "xanchor": "left",
                "yanchor": "bottom",
            }
        )
    return {"data": data, "layout": layout}


def chart_figure(chart: dict):
    """The gradient-flow chart (from :func:`chart_json`) as a ``plotly.graph_objects.Figure``
    (:func:`chart_spec`, the figure the page draws)."""
    import plotly.graph_objects as go

    return go.Figure(chart_spec(chart))
