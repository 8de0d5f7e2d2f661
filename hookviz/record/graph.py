"""The autograd graph of one forward pass: walked from the loss, with stable node ids.

A Node (``grad_fn``) is named ``"<op>_<k>"`` where ``k`` counts the nodes of that op in forward
creation order (PyTorch numbers every Node it creates: ``torch_compat.sequence_nr(Node)``), so
``2*x + 3*y - 5*z`` gives ``MulBackward0_0`` (``2*x``), ``MulBackward0_1``, ``AddBackward0_0``,
``MulBackward0_2``, ``SubBackward0_0``. The same code gives the same ids on every re-run and device.
A leaf (an ``AccumulateGrad`` Node) is named after its tensor: the forward argument's name or the
parameter's qualified name. Nodes created before the forward call (history the inputs carried in)
are boundaries: named, not followed. hookviz's own ``BackwardHookFunctionBackward`` identity nodes
(what full backward hooks insert) are looked through, so the graph is the model's, not the tool's.
"""

from __future__ import annotations

import weakref
from collections import Counter, deque
from dataclasses import dataclass, field
from operator import itemgetter

import torch

from hookviz.record import torch_compat

# hookviz's full-backward-hook identity nodes; FSDP2's and DDP's pass-through nodes (their reduce-scatter /
# static-graph hooks, see hookviz.record.distributed), which are the framework's, not the model's.
HIDDEN_OPS = frozenset(
    {"BackwardHookFunctionBackward", "RegisterPostBackwardFunctionBackward", "_DDPSinkBackward"}
)


@dataclass
class WalkedNode:
    """One node of the walked graph.

    Attributes:
        id: stable id (see module docstring).
        fn: the autograd Node object (``grad_fn`` or ``AccumulateGrad``).
        op: ``_op(fn)``, e.g. ``"AddmmBackward0"``.
        kind: ``"op"``, ``"leaf"`` or ``"boundary"``.
        sequence_nr: ``torch_compat.sequence_nr(fn)`` (forward creation order; leaves have the largest).
        tensor: the leaf tensor for leaves and named boundaries, else None.
        inputs: ``(slot, producer_id, output_nr)``: ``grad_inputs[slot]`` of this node flows to
            output ``output_nr`` of ``producer_id`` (the node that computed input ``slot``).
            A tuple, as ``saved``: fixed once walked, and the garbage collector stops tracking a
            tuple of numbers and strings (a retained forward holds one per Node).
        call: index of the module call that made it (filled after forward; None for leaves and
            for Nodes made outside every module, e.g. by ``loss_fn``).
        saved: what it saved for backward (:class:`hookviz.data.run.SavedTensor`, filled after forward).
        constants: the Python numbers it saved for backward, by name (filled after forward).
        output: summary of its forward value (a :class:`hookviz.data.tensors.TensorRecord`), when seen.
    """

    id: str
    fn: object
    op: str
    kind: str
    sequence_nr: int
    tensor: torch.Tensor | None = None
    inputs: tuple[tuple[int, str, int], ...] = ()
    call: int | None = None
    saved: tuple = ()
    constants: dict = field(default_factory=dict)
    output: object = None


@dataclass
class Walk:
    """The result of :func:`walk_graph`: nodes by id, root id, and a lookup by Node object."""

    nodes: dict[str, WalkedNode]
    root: str
    id_of: dict[int, str]  # id(Node object) -> node id
    looked_through: bool = False  # hidden identity Nodes (full backward hooks) sit between some nodes

    def node_id(self, fn) -> str | None:
        """The id of an autograd Node object, or None when it is not in the graph."""
        return self.id_of.get(id(fn))


def resolve_hidden(fn, output_nr: int):
    """Look through hidden identity nodes: the edge (fn, output_nr) as the model sees it."""
    while fn is not None and _op(fn) in HIDDEN_OPS:
        fn, output_nr = fn.next_functions[output_nr]
    return fn, output_nr


def walk_graph(
    root_fn,
    forward_start: int,
    leaf_names: dict[int, str],
    boundary_names: dict[tuple[int, int], str],
) -> Walk:
    """Walk every Node reachable from ``root_fn`` (breadth first) and name them.

    Args:
        root_fn: the loss's ``grad_fn``.
        forward_start: the sequence number of a probe Node made just before forward; Nodes made
            earlier are boundaries.
        leaf_names: ``id(tensor) -> name`` for forward arguments and parameters.
        boundary_names: ``(id(grad_fn), output_nr) -> name`` for forward arguments with history.

    Returns:
        A :class:`Walk`. Node objects are kept alive by it.
    """
    found: dict[int, object] = {}
    order: list[object] = []
    edges: dict[int, list[tuple[int, int, int]]] = {}
    queue = deque([root_fn])
    found[id(root_fn)] = root_fn
    boundary_edge_name: dict[int, str] = {}
    looked_through = False
    # (One pass over ~20,000 Nodes on a large graph: the op name is read from the type inline.)
    while queue:
        fn = queue.popleft()
        order.append(fn)
        is_boundary = type(fn).__name__ != "AccumulateGrad" and torch_compat.sequence_nr(fn) < forward_start
        if is_boundary or not hasattr(fn, "next_functions"):
            continue
        node_edges = []
        for slot, (child, output_nr) in enumerate(fn.next_functions):
            if child is None:
                continue
            if type(child).__name__ in HIDDEN_OPS:
                looked_through = True
                child, output_nr = resolve_hidden(child, output_nr)
                if child is None:
                    continue
            child_id = id(child)
            node_edges.append((slot, child_id, output_nr))
            if boundary_names:
                name = boundary_names.get((child_id, output_nr))
                if name is not None:
                    boundary_edge_name.setdefault(child_id, name)
            if child_id not in found:
                found[child_id] = child
                queue.append(child)
        edges[id(fn)] = node_edges

    nodes: dict[str, WalkedNode] = {}
    id_of: dict[int, str] = {}
    used: set[str] = set()

    def unique(name: str) -> str:
        candidate, k = name, 1
        while candidate in used:
            candidate, k = f"{name}#{k}", k + 1
        used.add(candidate)
        return candidate

    leaves = [fn for fn in order if type(fn).__name__ == "AccumulateGrad"]
    ops = [fn for fn in order if type(fn).__name__ != "AccumulateGrad"]
    unnamed_leaves = 0
    for fn in leaves:
        tensor = fn.variable
        name = leaf_names.get(id(tensor))
        if name is None:
            name, unnamed_leaves = f"leaf_{unnamed_leaves}", unnamed_leaves + 1
        node_id = unique(name)
        nodes[node_id] = WalkedNode(
            node_id, fn, "AccumulateGrad", "leaf", torch_compat.sequence_nr(fn), tensor
        )
        id_of[id(fn)] = node_id
    counts: Counter[str] = Counter()
    for sequence_nr, fn in sorted([(torch_compat.sequence_nr(fn), fn) for fn in ops], key=itemgetter(0)):
        op = type(fn).__name__
        if sequence_nr < forward_start:
            name = boundary_edge_name.get(id(fn)) or f"outside_{op}_{counts['outside_' + op]}"
            counts["outside_" + op] += 1
            kind = "boundary"
        else:
            name = f"{op}_{counts[op]}"
            counts[op] += 1
            kind = "op"
        node_id = unique(name)
        nodes[node_id] = WalkedNode(node_id, fn, op, kind, sequence_nr)
        id_of[id(fn)] = node_id
    for fn_id, node_edges in edges.items():
        nodes[id_of[fn_id]].inputs = tuple((slot, id_of[child], nr) for slot, child, nr in node_edges)
    return Walk(nodes=nodes, root=id_of[id(root_fn)], id_of=id_of, looked_through=looked_through)


def saved_tensor_names(fn) -> list[str]:
    """Names of the ``_saved_*`` attributes PyTorch exposes on a Node (cached per Node type).

    Source: PyTorch "Autograd mechanics", section "Saved tensors": ``grad_fn._saved_<name>``. A
    custom ``autograd.Function``'s Node has what ``ctx.save_for_backward`` saved in ``saved_tensors``.
    The sizes and strides a Node keeps of a tensor (``_saved_mat1_sym_sizes``, ``..._sym_strides``,
    tuples of ints) are left out: they are neither a tensor nor a number, and reading them made
    tuples on every Node (half the attributes of ``AddmmBackward0``).
    """
    cls = type(fn)
    names = _SAVED_NAMES.get(cls)
    if names is None:
        names = [a for a in dir(fn) if a.startswith("_saved_") and not a.endswith(_SHAPE_SUFFIXES)]
        if isinstance(fn, torch.autograd.function.BackwardCFunction):
            names.append("saved_tensors")
        _SAVED_NAMES[cls] = names
    return names


# By Node type, held weakly: a custom autograd.Function's Node type is the user's class.
_SAVED_NAMES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_SHAPE_SUFFIXES = ("_sym_sizes", "_sym_strides")


def _op(fn) -> str:
    """A Node's op name as users know it: ``"AddmmBackward0"``, ``"AccumulateGrad"``."""
    return type(fn).__name__
