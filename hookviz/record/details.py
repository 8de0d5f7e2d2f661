"""A lazy run's details, recorded when asked for: :meth:`hookviz.data.run.Run.fill_details`.

A run recorded with ``details="lazy"`` (the default) keeps what every view needs at once: each
gradient's shape, dtype and 2-norm (one reduction per gradient, queued while backward runs; the
gradient itself is not held). Everything else (values, min, max, mean, NaN/Inf counts, zero
fractions, histograms, forward values and what module hooks saw in forward) is *pending*: None,
and named in the record's ``pending``. Reading a record, ``repr``, ``==``, ``copy``, pickling and
saving never run the model.

``Run.fill_details()`` is the one call that does. It records the same run once more with full
details (a fresh forward with the session's first random state, the run's own edits and the
module hooks the run had), pairs that run's records with the lazy run's by their place (node id
and slot, module call and slot), checks that the loss and every leaf gradient are the run's own
bit for bit and every gradient's shape, dtype and norm agree, and only then fills every pending
field at once. The model's parameters and buffers are put back after that
recording's backward, as after every run's (:mod:`hookviz.record.model_state`), so a forward
that changes a parameter in place changes it once per :meth:`~hookviz.Session.run`, never again
for its details.

It refuses, with a :class:`~hookviz.errors.DetailsRefused` that says why and what to do, when the
numbers could not be the run's own: something that affects them changed since the run
(:class:`ModelState` follows the parameters, buffers, train/eval modes and inputs), or the
second recording gave another loss or other gradients (a value ``loss_fn`` reads, a hook added
since, a change through ``.data``: :class:`~hookviz.errors.DetailsNotReproduced`). Any other
error (the model, ``loss_fn``, a hook or an edit raising) propagates as it is; the records stay
pending and nothing is half filled.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable

import torch

from hookviz.advice import advice
from hookviz.data.tensors import same_values
from hookviz.errors import DetailsChanged, DetailsNotReproduced, DetailsUnavailable
from hookviz.record import module_tree
from hookviz.text import module_name, number

_NEW_RUN = (
    f"record a new run ({advice('new_forward')}) to see its details, or use {advice('eager_session')} "
    "to keep every detail of every run"
)


class Details:
    """The pending details of one lazy run (see the module docstring).

    Records are made with :meth:`pending` while the run is assembled; :meth:`bind` then names
    the run and ``recompute``, a callable that records the same run with full details and returns
    it (raising :class:`~hookviz.errors.DetailsChanged` when that can no longer give the run's
    numbers). :meth:`fill` fills the run once it succeeds.
    """

    def __init__(self):
        self.run_ref: weakref.ref | None = None
        self.recompute: Callable | None = None
        self.filled = False

    def pending(self, cls, fields: dict):
        """A new record of ``cls`` (a :class:`~hookviz.data.deferred.Fillable`) holding ``fields``,
        its other deferred fields pending (see :meth:`~hookviz.data.deferred.Fillable.pending_record`)."""
        return cls.pending_record(fields)

    def bind(self, run, recompute: Callable) -> None:
        """Name the run these records belong to (held weakly) and how to record it again."""
        self.run_ref, self.recompute = weakref.ref(run), recompute

    def __deepcopy__(self, memo: dict) -> Details:
        # Copied with its run (Run.__deepcopy__ put the run's copy in memo first): the copy's
        # details fill the copy's records, recorded by the same recipe.
        run = self.run_ref() if self.run_ref is not None else None
        twin = memo.get(id(run)) if run is not None else None
        copied = Details()
        copied.run_ref = weakref.ref(twin) if twin is not None else None
        copied.recompute, copied.filled = self.recompute, self.filled
        return copied

    def fill(self) -> None:
        """Record the run again and fill every pending field of it (nothing once filled).

        Raises:
            DetailsChanged, DetailsNotReproduced, DetailsUnavailable: see
            :meth:`hookviz.data.run.Run.fill_details`; anything else the second recording
            raises propagates. In every case the records stay pending.
        """
        if self.filled:
            return
        run = self.run_ref() if self.run_ref is not None else None
        if run is None or self.recompute is None:
            raise DetailsUnavailable(f"the run these details belong to is gone; {_NEW_RUN}")
        run.fill_deferred()  # its records are made from what it recorded (no model runs)
        fills = _fills(run, self.recompute())
        for record, values in fills:
            norm = values.pop("norm", None)
            record.fill(**values)
            if norm is not None:
                record.norm = norm
        self.filled, self.recompute = True, None


# ---------------------------------------------------------------------------- what changed


class ModelState:
    """What a model's runs depend on that the user can change between hookviz's calls, and what
    changed, followed by cheap marks (no copy of a tensor): every parameter and buffer by
    qualified name (the tensor object, its ``_version``, which every in-place op autograd sees
    bumps, an optimizer step's included; its storage address, which ``p.data = ...`` swaps; shape,
    dtype and ``requires_grad``) and every module's ``training`` flag (train/eval mode). A
    session's inputs are marked the same way (:func:`input_marks`).

    Changes made where PyTorch keeps no version (through ``.data``, or to an inference tensor)
    are not seen here; a gradient they change is still caught when the details are recorded
    (:class:`~hookviz.errors.DetailsNotReproduced`).

    hookviz's own forwards bump versions too (BatchNorm's ``num_batches_tracked``, a parameter the
    model changes in place, each put back afterwards), so the marks are compared between
    hookviz's calls: :meth:`note_changes` at the start of each call that runs the model,
    :meth:`mark` at its very end, once the model's state is back. Each change found starts a new
    epoch; a run keeps the epoch of its forward, and its details can be recorded while the
    epoch is the same. One state per model (:meth:`of`), shared by every session on it, so one
    session's forwards are no change to another's runs. It holds its model weakly: the table of
    states is keyed weakly by the model, and a value that held its key would keep it for good.
    """

    def __init__(self, model: torch.nn.Module):
        self.model_ref = weakref.ref(model)
        self.marks: dict[str, tuple] | None = None  # at the end of hookviz's last call
        self.changes: list[list[str]] = []  # what changed between hookviz's calls, oldest first

    @classmethod
    def of(cls, model: torch.nn.Module) -> ModelState:
        """The one state of ``model`` (made on first use; it goes when the model goes)."""
        found = _STATES.get(model)
        if found is None:
            found = _STATES[model] = cls(model)
        return found

    @property
    def epoch(self) -> int:
        """How many times something that affects a run's numbers changed between hookviz's calls."""
        return len(self.changes)

    def note_changes(self) -> int:
        """At the start of a hookviz call that runs the model: note what changed since the last
        one ended. Returns the epoch this call sees."""
        model = self.model_ref()
        if self.marks is not None and model is not None:
            changed = _what_changed(self.marks, _model_marks(model))
            if changed:
                self.changes.append(changed)
        return self.epoch

    def mark(self) -> None:
        """At the very end of a hookviz call, after the model's state was put back."""
        model = self.model_ref()
        self.marks = None if model is None else _model_marks(model)

    def refuse_changes_since(self, epoch: int, inputs_then: dict, inputs: dict[str, torch.Tensor]) -> None:
        """Raise :class:`~hookviz.errors.DetailsChanged`, naming what changed, when the model
        changed since ``epoch`` or an input since its marks ``inputs_then`` (:func:`input_marks`)."""
        changed = list(dict.fromkeys(c for changes in self.changes[epoch:] for c in changes))
        changed += _what_changed(inputs_then, input_marks(inputs))
        if not changed:
            return
        listing = "; ".join(changed[:4]) + (f"; and {len(changed) - 4} more" if len(changed) > 4 else "")
        raise DetailsChanged(
            f"cannot record this run's details: since the run, {listing}, so recording it again would "
            f"give other numbers than the run had; {_NEW_RUN}"
        )


_STATES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def input_marks(inputs: dict[str, torch.Tensor]) -> dict[str, tuple]:
    """The marks of a session's input tensors by name (see :class:`ModelState`)."""
    return {f"input {name!r}": _tensor_marks(tensor) for name, tensor in inputs.items()}


def _model_marks(model: torch.nn.Module) -> dict[str, tuple]:
    marks: dict[str, tuple] = {}
    for name, parameter in module_tree.named_parameters(model, remove_duplicate=False):
        marks[f"parameter {name!r}"] = (*_tensor_marks(parameter), parameter.requires_grad)
    for name, buffer in module_tree.named_buffers(model, remove_duplicate=False):
        marks[f"buffer {name!r}"] = _tensor_marks(buffer)
    for name, module in module_tree.named_modules(model, remove_duplicate=False):
        marks[f"{_MODE}{module_name(name, type(model).__name__)!r}"] = (
            "train" if module.training else "eval",
        )
    return marks


def _tensor_marks(tensor: torch.Tensor | None) -> tuple:
    """(object, version, storage address, shape, dtype) of ``tensor``."""
    if tensor is None:
        return (None,)
    version = -1 if tensor.is_inference() else tensor._version  # inference tensors keep none
    try:
        address = tensor.data_ptr()
    except RuntimeError:  # a tensor without storage (a wrapper subclass): its object stands for it
        address = 0
    return id(tensor), version, address, tuple(tensor.shape), tensor.dtype


_MODE = "the mode of module "
# What differs between two marks of one thing, in words (the marks' positions: see _tensor_marks).
_CHANGES = ((0, "was replaced"), (1, "was changed in place"), (2, "got other storage"))


def _what_changed(before: dict[str, tuple], now: dict[str, tuple]) -> list[str]:
    changed, switched = [], {"train": [], "eval": []}
    for name, marks in now.items():
        old = before.get(name)
        if old is None:
            changed.append(f"{name} was added")
        elif old != marks:
            if name.startswith(_MODE):
                switched[marks[0]].append(name.removeprefix(_MODE))
                continue
            how = next((words for i, words in _CHANGES if old[i] != marks[i]), "")
            if not how:  # a parameter's marks end with requires_grad (see _model_marks)
                how = "changed requires_grad" if old[5:] != marks[5:] else "changed shape or dtype"
            changed.append(f"{name} {how}")
    changed += [f"{name} was removed" for name in before if name not in now]
    for mode, modules in switched.items():
        if modules:
            more = f" and {len(modules) - 3} more" if len(modules) > 3 else ""
            changed.append(f"module {', '.join(modules[:3])}{more} switched to {mode} mode")
    return changed


# ---------------------------------------------------------------------------- pairing


def _same_norm(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if not (math.isfinite(a) and math.isfinite(b)):
        return not math.isfinite(a) and not math.isfinite(b)
    return math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-30)


class _Pairing:
    """The fills of a lazy run's pending records from the full run's records at the same places,
    and the places where the two runs disagree."""

    def __init__(self):
        self.fills: list[tuple[object, dict]] = []
        self.differ: list[str] = []

    def tensors(self, mine, theirs, place: str) -> None:
        if mine is None or theirs is None or len(mine) != len(theirs):
            if any(r is not None and r.pending for r in mine or ()):
                self.differ.append(place)
            return
        for i, (a, b) in enumerate(zip(mine, theirs)):
            if a is None or not a.pending:
                continue
            if b is None or a.shape != b.shape or a.dtype != b.dtype or not _same_norm(a.norm, b.norm):
                self.differ.append(f"{place}[{i}]")
                continue
            values = {name: getattr(b, name) for name in a.pending}
            if a.norm is not None and not math.isfinite(a.norm):
                values["norm"] = b.norm  # float32 squares overflow; the full record took double
            self.fills.append((a, values))


def _different_results(run, full) -> list[str]:
    """What ``full`` (the run recorded again) computed otherwise than ``run``: the loss and every
    leaf gradient, compared bit for bit (NaN equal to NaN: :func:`~hookviz.data.tensors.same_values`)."""
    differ = []
    if not same_values(run.loss, full.loss):
        differ.append(f"the loss ({number(run.loss.item())} then {number(full.loss.item())})")
    for name in dict.fromkeys([*run.leaf_grads, *full.leaf_grads]):
        mine, theirs = run.leaf_grads.get(name), full.leaf_grads.get(name)
        if (mine is None) != (theirs is None) or (mine is not None and not same_values(mine, theirs)):
            differ.append(f"the gradient of leaf {name!r}")
    return differ


def _fills(run, full) -> list[tuple[object, dict]]:
    """Every (pending record, its values) of ``run`` from ``full``, the same run recorded with full
    details. Raises DetailsNotReproduced, before anything is filled, when the loss, a leaf
    gradient, a gradient's norm, an op or a module call differs."""
    pairing = _Pairing()
    pairing.differ += _different_results(run, full)
    for node_id, record in run.nodes.items():
        other = full.nodes.get(node_id)
        if other is None or other.op != record.op:
            pairing.differ.append(f"node {node_id!r}")
            continue
        for name in ("grad_outputs", "grad_inputs", "grad_inputs_before_edit", "grad_outputs_before_edit"):
            pairing.tensors(getattr(record, name), getattr(other, name), f"{node_id}.{name}")
        if record.pending:
            pairing.fills.append((record, {"output": other.output}))
    if len(run.calls) != len(full.calls):
        pairing.differ.append(f"the module calls ({len(run.calls)} then {len(full.calls)})")
    for call, other in zip(run.calls, full.calls):
        place = f"module {call.module!r} call {call.call}"
        if (call.module, call.call) != (other.module, other.call):
            pairing.differ.append(place)
            continue
        for name in (
            "grad_input",
            "grad_output",
            "grad_input_before_edit",
            "grad_output_before_edit",
            "legacy_grad_input",
            "legacy_grad_output",
        ):
            pairing.tensors(getattr(call, name), getattr(other, name), f"{place} {name}")
        if call.pending:
            seen = {name: getattr(other, name) for name in ("inputs", "output", "output_replaced")}
            pairing.fills.append((call, seen))
    if pairing.differ:
        count = len(pairing.differ)
        shown = ", ".join(pairing.differ[:3]) + (f" ({count} in all)" if count > 3 else "")
        raise DetailsNotReproduced(
            f"cannot record this run's details: recorded again, it differs at {shown}, so something "
            "that affects its numbers changed since the run that hookviz does not follow (a hook "
            "of yours added, removed or changed, a value your loss_fn or forward reads, a value "
            "changed through .data, a global setting); the run keeps its own numbers, its details "
            "stay pending; " + _NEW_RUN
        )
    return pairing.fills


# ---------------------------------------------------------------------------- the one size rule

IN_FULL_NODES = 2_000
IN_FULL_GRADIENT_ELEMENTS = 1 << 22
"""A run of at most this many autograd Nodes and gradient elements (summed over every Node's
``grad_inputs`` and ``grad_outputs``) is recorded in full at once (:func:`recorded_in_full`)."""


def recorded_in_full(run) -> bool:
    """The one rule for whether a run is small enough to get its details at once: at most
    :data:`IN_FULL_NODES` Nodes (2,000) and :data:`IN_FULL_GRADIENT_ELEMENTS` gradient elements
    (4,194,304). Recording such a run's details costs one more forward + backward of tens of
    milliseconds, so ``Session.run()`` (``details="auto"``, the default) and ``show()`` record
    them before they return; a larger run stays lazy, its details recorded when asked for
    (:meth:`hookviz.data.run.Run.fill_details`). Reads only the norms' records (no model runs)."""
    if len(run.nodes) > IN_FULL_NODES:
        return False
    elements = 0
    for record in run.nodes.values():
        for tensor in (*record.grad_inputs, *record.grad_outputs):
            elements += tensor.numel if tensor is not None else 0
    return elements <= IN_FULL_GRADIENT_ELEMENTS


def may_be_recorded_in_full(model: torch.nn.Module) -> bool:
    """Before a model's first run, whether :func:`recorded_in_full` may hold for it. A run has
    the loss's Node, each parameter that requires grad (and is used) its own ``AccumulateGrad``
    Node, and a run's
    gradients count its gradient at least twice (sent by the Node that uses it, received by its
    ``AccumulateGrad``): a model with as many such parameters as :data:`IN_FULL_NODES`, or whose
    parameters hold more than half of :data:`IN_FULL_GRADIENT_ELEMENTS`, is not recorded in full."""
    trained = [p for _, p in module_tree.named_parameters(model) if p.requires_grad]
    nodes, elements = 1 + len(trained), 2 * sum(p.numel() for p in trained)
    return nodes <= IN_FULL_NODES and elements <= IN_FULL_GRADIENT_ELEMENTS
