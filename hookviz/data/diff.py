"""Two runs compared: per node and per leaf, before, after and whether it changed (``hookviz.diff``)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from hookviz.data.run import NodeRecord, Run, require_run
from hookviz.data.tensors import ComparedByValue, TensorRecord, same_values
from hookviz.errors import DetailsRefused, HookvizError


@dataclass(eq=False)
class NodeDiff(ComparedByValue):
    """One node's records in two runs and whether any of its gradients changed."""

    before: NodeRecord | None
    after: NodeRecord | None
    changed: bool


@dataclass(eq=False)
class LeafDiff(ComparedByValue):
    """One leaf's gradient in two runs and whether it changed (see :func:`diff`)."""

    before: torch.Tensor | None
    after: torch.Tensor | None
    changed: bool


@dataclass(eq=False)
class Diff(ComparedByValue):
    """Per node and per leaf: before, after, changed. See :func:`diff`.

    Attributes:
        nodes: by node id, the two runs' records of that node and whether any of its gradients
            changed (a ``NodeDiff``: ``before``, ``after``, ``changed``; a node in one run only has
            None on the other side).
        leaves: by leaf name, the two gradients and whether they differ (a ``LeafDiff``:
            ``before``, ``after``, ``changed``).
        unfilled: ``"before"`` / ``"after"`` -> why that lazy run's details could not be recorded
            (:meth:`Run.fill_details` refused); its nodes were then compared by the shape, dtype
            and norm of each gradient only (equal norms do not prove equal values). Empty when
            every node was compared by its values.
    """

    nodes: dict[str, NodeDiff]
    leaves: dict[str, LeafDiff]
    unfilled: dict[str, str] = field(default_factory=dict)

    @property
    def changed_nodes(self) -> list[str]:
        """Ids of the nodes whose gradients changed."""
        return [k for k, d in self.nodes.items() if d.changed]

    @property
    def changed_leaves(self) -> list[str]:
        """Names of the leaves whose gradients changed."""
        return [k for k, d in self.leaves.items() if d.changed]


def records_equal(a: tuple, b: tuple) -> bool:
    """Whether two tuples of records hold the same gradients: the one "changed" rule of :func:`diff`.
    A record whose details are pending is compared by what it holds (shape, dtype, norm): equal
    norms then do not prove equal values; :func:`diff` fills both runs first."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if (x is None) != (y is None):
            return False
        if x is None:
            continue
        if x.pending or y.pending:
            if (x.shape, x.dtype, _summary(x)[1]) != (y.shape, y.dtype, _summary(y)[1]):
                return False
        elif x.value is not None and y.value is not None:
            if not same_values(x.value, y.value):
                return False
        elif _summary(x) != _summary(y):
            return False
    return True


def _summary(record: TensorRecord) -> tuple:
    """What two records kept without values are compared by (NaN statistics compare equal)."""
    return tuple(
        "nan" if isinstance(v, float) and v != v else v
        for v in (
            record.shape,
            record.norm,
            record.mean,
            record.min,
            record.max,
            record.nan_count,
            record.inf_count,
        )
    )


def diff(before: Run, after: Run) -> Diff:
    """Compare two runs node by node and leaf by leaf.

    A node changed when any of its ``grad_inputs`` or ``grad_outputs`` differs (exact comparison
    of the values when both runs kept them, else of shape and statistics). A leaf changed when its
    gradients differ. Both use :func:`hookviz.data.tensors.same_values`: bit for bit, NaN equal to NaN,
    sparse gradients compared dense. Nodes or leaves present in only one
    run appear with None on the other side and ``changed=True``.

    Nodes are compared by their gradient values: a lazy run's details are recorded first
    (:meth:`Run.fill_details`). When that refuses (the model changed since the run), the refusal
    is kept in ``Diff.unfilled`` and that run's nodes are compared by what its records hold
    (shape, dtype, norm); any other error propagates. Leaves are always compared exactly.

    Args:
        before: the first run (usually the baseline).
        after: the run to compare with it (usually after an edit), of the same model.

    Returns:
        the :class:`Diff`.

    Raises:
        HookvizError: ``before`` or ``after`` is not a Run, or the two share no leaf (runs of two
            different models). What :meth:`Run.fill_details` raises other than a refusal (a
            refusal is kept in ``Diff.unfilled``) propagates.
    """
    require_run(before, "diff(before, after)")
    require_run(after, "diff(before, after)")
    if before.leaf_grads and after.leaf_grads and not before.leaf_grads.keys() & after.leaf_grads.keys():
        raise HookvizError(
            "diff(before, after): the runs share no leaf, so they are of two different models; compare "
            "two runs of one model (its run before and after an edit, or two recordings of it)"
        )
    unfilled = {}
    for label, run in (("before", before), ("after", after)):
        try:
            run.fill_details()
        except DetailsRefused as refusal:
            unfilled[label] = str(refusal)
    nodes = {}
    for node_id in dict.fromkeys([*before.nodes, *after.nodes]):
        a, b = before.nodes.get(node_id), after.nodes.get(node_id)
        changed = (
            a is None
            or b is None
            or not (
                records_equal(a.grad_inputs, b.grad_inputs) and records_equal(a.grad_outputs, b.grad_outputs)
            )
        )
        nodes[node_id] = NodeDiff(a, b, changed)
    return Diff(nodes, leaf_diffs(before, after), unfilled)


def leaf_diffs(before: Run, after: Run) -> dict[str, LeafDiff]:
    """The leaf half of :func:`diff`: each leaf's gradient in both runs (``torch.equal`` after
    :func:`hookviz.data.tensors.same_values`' rules), by leaf name. It reads the leaves' gradients only,
    so a lazy run's details are not recorded for it."""
    leaves = {}
    for name in dict.fromkeys([*before.leaf_grads, *after.leaf_grads]):
        a, b = before.leaf_grads.get(name), after.leaf_grads.get(name)
        if a is None or b is None:
            changed = (a is None) != (b is None)
        else:
            changed = a is not b and not same_values(a, b)
        leaves[name] = LeafDiff(a, b, changed)
    return leaves
