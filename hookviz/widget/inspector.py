"""Run -> the inspector's payload: what it shows of one node or one module, against the baseline."""

from __future__ import annotations

from hookviz import text
from hookviz.advice import advice
from hookviz.analysis.explain import explain
from hookviz.colors import HEATMAP_COLORS
from hookviz.data.diff import records_equal
from hookviz.data.run import Run
from hookviz.errors import TargetError
from hookviz.record import torch_compat
from hookviz.widget.graph import operand_hint
from hookviz.widget.payload import tensor_json, tensors_json
from hookviz.widget.tree import GROUP_PREFIX, MODULE_PREFIX, module_label


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
        schemas = torch_compat.operator_schemas(name)
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
            {
                "name": s.name,
                "shape": list(s.shape),
                "dtype": s.dtype,
                "nbytes": s.nbytes,
                "of": s.of,
                "size": text.size(s.nbytes),
            }
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
        "heatmap_colors": HEATMAP_COLORS,
    }
    out["output_note"] = None if record.output is not None else _no_forward_value(run, node_id)
    out["none_text"] = {
        "grad_inputs": _none_grad_inputs(run, node_id, out["grad_inputs"], out["grad_input_names"]),
        "grad_outputs": _none_grad_outputs(out["grad_outputs"]),
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
        "label": module_label(module, call.type),
        "kind": "module",
        "op": call.type,
        "module": module,
        "node_kind": "module",
        "order": None,
        # None while the run's details are pending (``pending`` names what run.fill_details() adds)
        "inputs": None
        if "inputs" in call.pending
        else {k: (v if isinstance(v, str) else tensor_json(v)) for k, v in call.inputs.items()},
        "output_list": None if "output" in call.pending else tensors_json(call.output),
        "pending": list(call.pending),
        "grad_input": tensors_json(call.grad_input),
        "grad_output": tensors_json(call.grad_output),
        "legacy_grad_input": tensors_json(call.legacy_grad_input),
        "legacy_grad_output": tensors_json(call.legacy_grad_output),
        "grad_input_names": _input_names(call),
        "legacy_grad_input_names": _last_op_inputs(run, call.output_node, len(call.legacy_grad_input)),
        "output_node": call.output_node,
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
        "type": call.type,
        "edited": any(e.target == module for e in run.edits),
        "before": None,
        "changed": None,
        "heatmap_colors": HEATMAP_COLORS,
    }
    _module_none_text(run, call, out)
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


# ----- what each None means ------------------------------------------------------------------
# A None in the inspector says why it is None (the page draws these sentences as they are).


def _no_forward_value(run: Run, node_id: str) -> str:
    """Why an op Node has no forward value: its details are pending, it is a leaf, or it is a
    step inside one torch call made from Python (hookviz's ``TorchFunctionMode``,
    :mod:`hookviz.record.forward_recorder`, sees each call's result, not the Nodes autograd makes
    inside it: ``F.linear`` on a 3-D input runs view, t, addmm, view in C++; the math path of
    ``scaled_dot_product_attention`` its softmax and matmuls)."""
    record = run.node(node_id)
    if "output" in record.pending:
        return "None: recorded with the run's details, in a moment"
    if record.kind != "op":
        return "None: a leaf (a parameter or an input) is not computed by an op in this graph"
    result = _call_result(run, node_id)
    module = record.module
    types = {call.module: call.type for call in run.calls}
    where = f"{module} ({types[module]})" if module in types else (module or "the root module")
    inside = f"one torch call from Python in {where}" + (f", whose result is {result}" if result else "")
    return (
        f"None: {record.op} is a step autograd made inside {inside}: hookviz keeps the result of "
        "each call made from Python, not the steps inside it. Its gradients below are recorded "
        "all the same."
    )


def _call_result(run: Run, node_id: str) -> str | None:
    """The Node, made later in the same module, whose forward value hookviz saw: the result of
    the torch call ``node_id`` was a step of (following the forward edges); None if none."""
    consumers: dict[str, list[str]] = {}
    for producer, consumer, _ in run.edges:
        consumers.setdefault(producer, []).append(consumer)
    module = run.node(node_id).module
    seen, todo = {node_id}, [node_id]
    while todo:
        for other in consumers.get(todo.pop(0), []):
            record = run.nodes[other]
            if other in seen or record.module != module:
                continue
            if record.output is not None:
                return other
            seen.add(other)
            todo.append(other)
    return None


def _slot(i: int, names) -> str:
    return f"{names[i]} (input {i})" if names and i < len(names) and names[i] else f"input {i}"


def _none_grad_inputs(run: Run, node_id: str, grads, names) -> list[str | None] | None:
    """For each ``None`` among a Node's ``grad_inputs``, why: its input does not require grad
    (autograd made no edge to it), or its backward returned no gradient there."""
    if grads is None:
        return None
    wired = {slot for _, consumer, slot in run.edges if consumer == node_id}
    return [
        None
        if g is not None
        else f"None: {_slot(i, names)} does not require grad, so autograd computes no gradient for it"
        if i not in wired
        else f"None: the backward of {run.node(node_id).op} returned no gradient for {_slot(i, names)}"
        for i, g in enumerate(grads)
    ]


def _none_grad_outputs(grads) -> list[str | None] | None:
    if grads is None:
        return None
    return [None if g is not None else "None: no gradient reached this output from the loss" for g in grads]


def _module_none_text(run: Run, call, out: dict) -> None:
    """Why each None of a module's hook views is None, as ``out["none_text"]`` (by view): an
    argument that is no tensor, or one that does not require grad (by ``forward``'s name for it);
    a legacy hook's as its last op's Node's (:func:`_none_grad_inputs`)."""
    inputs = call.inputs or {}
    positional = list(inputs)[: len(call.grad_input)]

    def why_input(i: int) -> str:
        if i >= len(positional):
            return "None: this argument is not a tensor that requires grad"
        value = inputs[positional[i]]
        if isinstance(value, str):
            return f"None: {positional[i]} is not a tensor ({value})"
        return f"None: {positional[i]} does not require grad"

    legacy_op = run.nodes[call.output_node].op if call.output_node in run.nodes else None
    out["none_text"] = {
        "grad_input": [None if g is not None else why_input(i) for i, g in enumerate(call.grad_input)],
        "grad_output": [
            None if g is not None else "None: this output is not a tensor that requires grad"
            for g in call.grad_output
        ],
        "legacy_grad_input": _none_grad_inputs(
            run,
            call.output_node,
            out["legacy_grad_input"],
            grad_input_names(legacy_op, len(call.legacy_grad_input)),
        )
        if call.output_node in run.nodes
        else None,
        "legacy_grad_output": _none_grad_outputs(out["legacy_grad_output"]),
    }


def _input_names(call) -> list[str] | None:
    """What each of a full backward hook's ``grad_input`` is the gradient of: ``forward``'s
    positional arguments by name (``["x", "y", "z"]``); None while the run's details are pending."""
    if "inputs" in call.pending or call.inputs is None or len(call.inputs) < len(call.grad_input):
        return None
    return list(call.inputs)[: len(call.grad_input)]


def _last_op_inputs(run: Run, node_id: str | None, count: int) -> list[str] | None:
    """What each of a legacy backward hook's ``grad_input`` is the gradient of: the inputs of the
    module's last op, by the op's argument name and the Node that made it, e.g. for ``2*x + 3*y -
    5*z`` ``["self ← Add (AddBackward0_0)", "other ← Mul ×5 (MulBackward0_2)"]``."""
    record = run.nodes.get(node_id) if node_id else None
    if record is None or count == 0:
        return None
    arguments = grad_input_names(record.op, count) or [f"input {i}" for i in range(count)]
    producers: dict[int, str] = {}
    for source, target, slot in run.edges:
        if target == node_id:
            producers.setdefault(slot, source)
    names = []
    for slot, argument in enumerate(arguments):
        source = run.nodes.get(producers.get(slot, ""))
        if source is None:
            names.append(argument)
            continue
        op = source.op.rstrip("0123456789").removesuffix("Backward") if source.kind == "op" else "leaf"
        hint = operand_hint(source) if source.kind == "op" else ""
        names.append(f"{argument} ← {' '.join(filter(None, (op, hint)))} ({source.id})")
    return names


# ----- the watch on screen ------------------------------------------------------------------


def watch_note(view: dict, target: str, kind: str) -> dict | None:
    """What the watch on screen (the ``watch_view`` traitlet, :mod:`hookviz.widget.watch_view`)
    recorded for the selection ``target`` (a node id or ``"module:<name>"``; ``kind``: "op",
    "leaf" or "module"), as the graph colours it: its norm at the step shown, "no grad" where the
    watch records it and it got none at that step, else "not watched" and why. None when no watch
    is shown. Returns ``{"text", "color", "state", "run_label"}`` (state: "norm", "no grad", "not
    watched"; ``run_label``: the words that mark the recorded run's numbers the inspector shows
    beside the watch's, so the two are told apart). A gathered history's view (``view["of"]``:
    the rank picker's words) names the rank, and says the values below are the recorded run's
    (one process's forward+backward), not the picked rank's."""
    if not view or not view.get("steps"):
        return None
    step = view.get("step")
    of = view.get("of")
    watch = f"Watch step {step}, {of}" if of else f"Watch, step {step}"
    # the inspector's tensors and norm tables come from the run the graph was recorded from
    values = f" The values below are the recorded run's, not the watch's norms of {of}." if of else ""
    module = target.startswith(MODULE_PREFIX)
    element = GROUP_PREFIX + target.removeprefix(MODULE_PREFIX) if module else target
    colors = view.get("node_colors") or {}
    norms = view.get("node_norms") or {}
    if element in norms:
        shown = text.norm(norms[element])
        note = {"state": "norm", "color": colors.get(element), "text": f"{watch}: ‖grad‖ {shown}"}
    elif element in colors:
        note = {
            "state": "no grad",
            "color": colors[element],
            "text": f"{watch}: no grad (the watch records it; none reached it at this step)",
        }
    else:
        why = _not_watched_why(kind)
        note = {"state": "not watched", "color": view.get("missing_color"), "text": f"Not watched: {why}."}
    return {**note, "text": note["text"] + values, "run_label": "run"}


def _not_watched_why(kind: str) -> str:
    """Why the watch recorded nothing for a selection of ``kind`` ("op", "module" or "leaf")."""
    if kind == "op":
        return "the watch records the gradients of parameters and module outputs, not the Nodes of the graph"
    if kind == "module":
        return (
            "the watch recorded no parameter of this module and not its output "
            f"({advice('watch_outputs')} records every module's output)"
        )
    return "the watch records the gradients of the model's parameters, and this leaf is none it recorded"
