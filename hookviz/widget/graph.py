"""Run -> the graph payload: the op graph, its module groups and the colour range the page draws.

Module groups: every op node belongs to the innermost module that created it (its ``module``
attribute); a module ``"a.b"`` is drawn as a compound node inside ``"a"``, and every top-level
module inside the root module's box (``""``, labelled by its class: ``"Canonical (root)"``), so a
model with no submodules has a box, and hook sites, of its own. The ``(loss)`` box sits beside the
root's: ``loss_fn`` is not the model. Which groups are open, the other labels and which siblings
are identical blocks are the page's job (``js/src/names.js``, ``collapse.js``); where things sit
on screen too (ELK).
"""

from __future__ import annotations

import hashlib
import math
from collections import defaultdict

from hookviz import text
from hookviz.analysis import gradient_stats
from hookviz.analysis.gradient_stats import layer_norms, parameter_names
from hookviz.colors import NOT_WATCHED_COLOR, beyond_range, legend, norm_color, range_of
from hookviz.data.run import LOSS_MODULE, Run
from hookviz.widget.payload import json_float
from hookviz.widget.tree import group_id, mark_signatures, module_label, natural_key, parent_module


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
    """Each module's gradient norm, by the one rule runs, watches and findings share: the 2-norm
    of the gradients of the layers it is or encloses, taken together
    (:func:`hookviz.analysis.gradient_stats.module_norms` of the run's
    :func:`~hookviz.analysis.gradient_stats.layer_norms`, from its parameters' gradient norms).
    Only modules that hold some parameter, themselves or inside them (``""``, the root module,
    holds them all); None for one whose parameters got no gradient. A module left out holds no
    parameter: it has no layer norm."""
    return gradient_stats.module_norms(
        layer_norms(
            {n: run.nodes[n].grad_norm if n in run.nodes else None for n in parameter_names(run, None)}
        )
    )


def color_range(run: Run, baseline: Run | None = None) -> dict:
    """The colour range ``{lo, hi}`` (log10, whole decades: :func:`hookviz.colors.range_of`) of
    the norms of ``baseline`` (else ``run``): its nodes' and its modules' (:func:`module_norms`).
    One range for every run of a session, so one colour means one norm in each of them."""
    scale = baseline if baseline is not None else run
    return range_of([*node_norms(scale).values(), *module_norms(scale).values()])


def graph_json(run: Run, baseline: Run | None = None, structure: str | None = None) -> dict:
    """The op graph and its module groups, as the page draws them (the page lays them out).

    Args:
        run: the run to show.
        baseline: the run whose norms fix the colour range, so that one colour means one norm in
            every run of a session (values outside saturate; the page marks them).
        structure: the :func:`structure_key` from an earlier call on the same graph, to skip
            recomputing it on a re-run.

    Returns:
        ``{"structure", "nodes", "edges", "groups", "color_range", "legend"}``. Node: ``{id, op,
        module, kind, order, norm, nan, edited, user_hooks, hint, color, beyond, norm_text}``
        (color: its norm's on ``color_range``, :func:`hookviz.colors.norm_color`; beyond: the
        norm lies outside the range; norm_text: the norm as the page shows it; legend:
        :func:`hookviz.colors.legend`; module: the box it is drawn in, the
        module that made it except for :attr:`~hookviz.data.run.Run.loss_ops`; hint:
        :func:`operand_hint`); edge:
        ``[source, target, slot]`` in forward direction; group: ``{id, module, parent, type,
        size, norm, nan, edited, user_hooks, signature, color, beyond, norm_text}`` (norm: the
        module's layer norm, :func:`module_norms`, None for a box that holds no parameter, drawn
        "not measured"; signature: see :func:`hookviz.widget.tree.mark_signatures`; the page adds
        labels and identical blocks),
        the root module's (``module ""``, present when the model ran as a module) with its
        ``label`` (:func:`hookviz.widget.tree.module_label`).
    """
    key = structure if structure is not None else structure_key(run)
    edited_targets = {edit.target for edit in run.edits}
    edited_nodes = run.edited_nodes
    norms = node_norms(run)
    loss_ops = run.loss_ops
    nodes = []
    by_module: dict[str, list[dict]] = defaultdict(list)
    for node_id, record in run.nodes.items():
        norm = norms[node_id]
        kind = record.kind
        item = {
            "id": node_id,
            "op": record.op,
            "module": LOSS_MODULE if node_id in loss_ops else record.module,
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
    for item in nodes:
        by_module[item["module"]].append(item)

    modules = module_norms(run)
    module_hooks = defaultdict(int)
    types = {}
    for call in run.calls:
        module_hooks[call.module] += len(call.user_hooks)
        types.setdefault(call.module, call.type)
    groups = _groups(by_module, modules, edited_targets, module_hooks, types)
    mark_signatures(groups, nodes, _leaf_shapes(run))
    if baseline is None or baseline is run:
        scale = range_of([*norms.values(), *modules.values()])
    else:
        scale = color_range(run, baseline)
    for item in nodes:
        paint(item, scale)
    for group in groups:
        paint(group, scale, measured=group["module"] in modules)
    return {
        "structure": key,
        "nodes": nodes,
        "edges": edges,
        "groups": groups,
        "color_range": scale,
        "legend": legend(scale, "log10 ‖grad‖ (scale fixed by the baseline run)"),
    }


def paint(item: dict, scale: dict, measured: bool = True) -> None:
    """Give a node's or a group's JSON (with its ``norm`` and ``nan``) the colour, the
    beyond-the-range mark and the norm's text the page shows; changes ``item`` in place.
    ``measured=False``: a module box that holds no parameter, so has no layer norm
    (:func:`module_norms`): drawn as "not measured", as the watch view draws it, unless a
    gradient inside it holds NaN/Inf."""
    item["color"] = norm_color(item["norm"], scale, item["nan"])
    item["beyond"] = beyond_range(item["norm"], scale)
    item["norm_text"] = text.norm(item["norm"], item["nan"])
    if not measured and not item["nan"]:
        item["color"], item["norm_text"] = NOT_WATCHED_COLOR, "no parameters"


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
    return text.number(value) if isinstance(value, float) else str(value)


def _leaf_shapes(run: Run) -> dict[str, tuple]:
    """Each leaf's shape, from the gradient its AccumulateGrad saw (leaves without one: left out)."""
    out = {}
    for name in run.leaf_names:
        record = run.nodes.get(name)
        grads = record.grad_outputs if record is not None else None
        if grads and grads[0] is not None:
            out[name] = tuple(grads[0].shape)
    return out


def _groups(by_module, modules, edited_targets, module_hooks, types) -> list[dict]:
    """One group per module that created nodes, plus every enclosing module, plus the root
    module's (``""``, when the model ran as a module: ``types`` has it) around every top-level one
    but ``(loss)``; outer before inner, siblings in the order the forward first called them
    (``types`` is in call order), so the Module tree lists GPT-2's ``wte, wpe, drop, h, ln_f`` as
    the model runs them."""
    root = "" in types

    def enclosing(module: str) -> str | None:
        if module == "" or module == LOSS_MODULE:
            return None
        parent = parent_module(module)
        return "" if parent is None and root else parent

    called: dict[str, int] = {}
    for module in types:  # a container never called itself (a ModuleList) ranks as its first child
        while module is not None and module not in called:
            called[module] = len(called)
            module = enclosing(module)
    # Each module's own nodes summed once, then added to it and every enclosing module: a walk
    # up per module, not per node (20,000 nodes three modules deep).
    totals: dict[str, list] = {}  # module -> [size, nan, edited, user hooks]
    for module, items in by_module.items():
        nan, edited = any(i["nan"] for i in items), any(i["edited"] for i in items)
        hooks = sum(i["user_hooks"] for i in items)
        name = module if module or root else None
        while name is not None:
            total = totals.get(name)
            if total is None:
                totals[name] = [len(items), nan, edited, hooks]
            else:
                total[0] += len(items)
                total[1], total[2], total[3] = total[1] or nan, total[2] or edited, total[3] + hooks
            name = enclosing(name)
    groups = []
    order = sorted(totals, key=lambda m: (m != "", m.count("."), called.get(m, len(called)), natural_key(m)))
    for module in order:
        size, nan, edited, hooks = totals[module]
        parent = enclosing(module)
        group = {
            "id": group_id(module),
            "module": module,
            "parent": None if parent is None else group_id(parent),
            "type": types.get(module, ""),
            "size": size,
            "norm": json_float(modules.get(module)),
            "nan": nan,
            # its own sites edited; an edit of a node inside marks the box only while it is closed
            # (the page: edits_inside), so an open root box is not "edited" for its Sub's edit
            "edited": module in edited_targets,
            "edits_inside": edited,
            "user_hooks": module_hooks.get(module, 0) + hooks,
        }
        if module == "":
            group["label"] = module_label("", group["type"])
        groups.append(group)
    return groups
