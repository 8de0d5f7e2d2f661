"""What one forward + backward recorded: plain data, no hooks, no live autograd objects.

Words follow PyTorch's hook docs (https://pytorch.org/docs/stable/notes/autograd.html#backward-hooks-execution):
for a Node, ``grad_outputs`` are the gradients w.r.t. the Node's outputs (what arrives, what a Node
pre-hook sees) and ``grad_inputs`` the gradients w.r.t. its inputs (what it sends on, what a Node
post-hook sees). For a module, ``grad_output`` / ``grad_input`` are what a full backward hook sees.
"""

from __future__ import annotations

import copy
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

import torch

from hookviz.advice import advice
from hookviz.data.deferred import PENDING, Deferrable, Fillable, deferrable
from hookviz.data.tensors import ComparedByValue, TensorRecord, combined_norm
from hookviz.errors import DetailsUnavailable, HookvizError, TargetError, unknown_name
from hookviz.text import module_name, number

if TYPE_CHECKING:
    import networkx as nx

LOSS_MODULE = "(loss)"
"""The ``module`` of the Nodes that ``loss_fn`` made, outside the model (not a module name: it has
parentheses, which a qualified module name never has)."""


@dataclass
class SavedTensor:
    """A tensor a Node saved for backward (``grad_fn._saved_<name>``).

    Attributes:
        name: PyTorch's name for it, e.g. ``"self"``, ``"mat2"``, ``"result"``.
        shape, dtype: of the saved tensor.
        nbytes: ``numel * element_size`` in bytes (several Nodes may share one storage).
        stored_on: where it waits for backward: its device, or another one when a
            ``saved_tensors_hooks`` of the user's (e.g. ``save_on_cpu``) moved it there.
        of: the leaf it is, or is a view of, by name: a model input or a parameter (``Linear``
            saves ``mat2 = weight.t()``, a view of ``"weight"``); "" for an intermediate tensor
            or one a saved-tensor hook of the user's replaced with a copy.
    """

    name: str
    shape: tuple[int, ...]
    dtype: str
    nbytes: int
    stored_on: str = ""
    of: str = ""


@dataclass(eq=False)
class HookCall(ComparedByValue):
    """One call of a hook during the run: the user's own, or an edit hookviz installed.

    Attributes:
        step: position in the run's event order (see :attr:`Run.events`).
        kind: e.g. ``"legacy backward hook"``, ``"full backward hook"``, ``"tensor hook"``,
            ``"forward hook"``, ``"edit"``.
        name: the hook function's qualified name, or the edit's source.
        where: module name or node id where it fired.
        before, after: the gradients (or forward values) it received and those that went on.
        returned: True when the hook returned a replacement.
        node: the graph node id it is attached to, when known.
    """

    step: int
    kind: str
    name: str
    where: str
    before: tuple[TensorRecord | None, ...] = ()
    after: tuple[TensorRecord | None, ...] = ()
    returned: bool = False
    node: str | None = None


@dataclass
class HookInfo:
    """A hook registered on the model before hookviz ran: kind, function name, where."""

    kind: str
    name: str
    where: str


@dataclass
class Event:
    """One thing that happened during backward, in order: a Node ran, a user hook or an edit fired."""

    step: int
    kind: str  # "node" | "user_hook" | "edit"
    node: str | None
    detail: str


@dataclass
class LogEntry:
    """Text a user hook printed (stdout and stderr) while it ran."""

    hook: str
    where: str
    text: str


@dataclass(eq=False)
class NodeRecord(ComparedByValue, Fillable):
    """Everything recorded at one node of the autograd graph.

    Attributes:
        id: the Node's id, the same in every re-run and on every device: ``"<op>_<k>"`` in forward
            creation order (``"MulBackward0_0"`` is the first ``*``); a leaf is named after its
            forward argument or parameter (``"x"``, ``"fc1.weight"``).
        op: the autograd Node's class name, e.g. ``"AddmmBackward0"``, ``"AccumulateGrad"``.
        module: the innermost module whose forward created the Node ("" = root, ``"(loss)"`` =
            made by ``loss_fn``).
        kind: ``"op"``, ``"leaf"`` or ``"boundary"`` (see :class:`hookviz.record.graph.WalkedNode`).
        module_call: which call of that module (0 for the first).
        order: position in backward execution order (0 = first to run), None when it did not run.
        output: the forward value of the Node's first output, when hookviz saw the op that made it
            (ops inside a composite op, such as ``linear`` on 3-D input, are not seen).
        grad_outputs: gradients w.r.t. the Node's outputs as they reached it (after pre-hooks).
        grad_inputs: gradients w.r.t. its inputs as they went on (after every post-hook and edit).
        grad_inputs_before_edit: ``grad_inputs`` before hookviz's edits, when an edit fired here,
            else None.
        grad_outputs_before_edit: ``grad_outputs`` before hookviz's edits, when an edit fired
            here, else None.
        saved: the tensors it saved for backward.
        constants: the Python numbers it saved for backward, by attribute name without
            ``_saved_``: scalar arguments (``{"alpha": 2}`` of ``torch.add(x, y, alpha=2)``,
            ``{"exponent": 2}`` of ``x ** 2``) and wrapped numbers (``{"other": 2}`` of ``2 * x``).
        user_hooks: hooks of the user's attached here (tensor hooks on a leaf, legacy module hooks).
        sites: editable slots, e.g. ``["grad_inputs[0]", "grad_outputs[0]", "grad"]``.
        pending: ``("output",)`` while a lazy run's forward value waits for
            :meth:`Run.fill_details` (``output`` is None meanwhile), else ``()``.
    """

    id: str
    op: str
    module: str
    kind: str
    module_call: int = 0
    order: int | None = None
    output: TensorRecord | None = None
    grad_outputs: tuple[TensorRecord | None, ...] = ()
    grad_inputs: tuple[TensorRecord | None, ...] = ()
    grad_inputs_before_edit: tuple[TensorRecord | None, ...] | None = None
    grad_outputs_before_edit: tuple[TensorRecord | None, ...] | None = None
    saved: list[SavedTensor] = field(default_factory=list)
    constants: dict[str, bool | int | float] = field(default_factory=dict)
    user_hooks: list[HookInfo] = field(default_factory=list)
    sites: list[str] = field(default_factory=list)
    pending: tuple[str, ...] = ()

    DEFERRED = ("output",)  # what Run.fill_details adds to a lazy run's record

    @property
    def grad_norm(self) -> float | None:
        """Combined 2-norm of the gradients that reached this Node (its ``grad_outputs``): the
        norm its colour shows; None when none arrived."""
        return combined_norm(r.norm for r in self.grad_outputs if r is not None)

    @property
    def has_nan(self) -> bool:
        """True when a gradient that reached or left this Node holds NaN or Inf (on a lazy run,
        read from the norms: nothing is recorded again)."""
        return any(r is not None and not r.finite for r in (*self.grad_outputs, *self.grad_inputs))

    @property
    def saved_bytes(self) -> int:
        """Total bytes of the tensors this Node saved for backward."""
        return sum(s.nbytes for s in self.saved)


@dataclass(eq=False)
class ModuleCall(ComparedByValue, Fillable):
    """What a forward pre-hook and a forward hook of one module call saw.

    Attributes:
        module: qualified name ("" = root).
        call: which call of that module (0 for the first).
        type: the module's class name.
        inputs: positional and keyword inputs by name (``forward``'s parameter names where
            known): a TensorRecord for tensors, a short repr for anything else.
        output: every entry of the output, flattened in pytree order, as forward returned it and
            the user's forward hooks saw it: a TensorRecord per tensor, None for anything else
            (``MultiheadAttention`` returns ``(output, None)``).
        output_replaced: the same after a forward hook of the user's returned a replacement, else
            None (the replacement is what the rest of the model, and a full backward hook, use).
        full_hook_fires: False when PyTorch would never call a full backward hook of this call
            (:func:`hookviz.explain` says why); ``grad_input`` and ``grad_output`` are then empty.
        grad_input: what a full backward hook sees as ``grad_input``, by PyTorch's rules (see
            :mod:`hookviz.record.module_views`): one entry per positional argument, None where that
            argument is not a tensor that requires grad; after hookviz's module edits, when there
            are any here.
        grad_output: what a full backward hook sees as ``grad_output``: one entry per top-level
            output, None where that output is not a tensor that requires grad; after hookviz's
            module edits, when there are any here.
        grad_input_before_edit: ``grad_input`` before those edits, when one fired here, else None.
        grad_output_before_edit: ``grad_output`` before those edits, when one fired here, else
            None.
        legacy_grad_input: what a legacy ``register_backward_hook`` sees as ``grad_input``: the
            ``grad_inputs`` of the Node that made the output's first tensor, i.e. of the module's
            last op.
        legacy_grad_output: the same Node's ``grad_outputs``.
        output_node: id of that last op's Node.
        user_hooks: the user's hooks registered on this module.
        in_place: forward modified an input in place and returned it (``ReLU(inplace=True)``).
        output_changed_later: an in-place op changed the output after the module returned it.
        output_requires_grad: some tensor of the output requires grad.
        grad_enabled: grad mode was on when the module was called.
        output_kind_hookable: the output is a tensor or a tuple (else no full hook ever fires).
        shared_inputs: one tensor was passed as several positional arguments.
        pending: in a lazy run, ``("inputs", "output", "output_replaced")`` until
            :meth:`Run.fill_details` records what forward hooks saw; those fields hold
            :data:`~hookviz.data.deferred.PENDING` meanwhile (it prints as pending and raises
            :class:`~hookviz.errors.DetailsPending`, naming the fix, when used); else ``()``.
    """

    module: str
    call: int
    type: str
    inputs: dict[str, TensorRecord | str] | None = field(default_factory=dict)
    output: list[TensorRecord | None] | None = field(default_factory=list)
    output_replaced: list[TensorRecord | None] | None = None
    full_hook_fires: bool = True
    grad_input: tuple[TensorRecord | None, ...] = ()
    grad_output: tuple[TensorRecord | None, ...] = ()
    grad_input_before_edit: tuple[TensorRecord | None, ...] | None = None
    grad_output_before_edit: tuple[TensorRecord | None, ...] | None = None
    legacy_grad_input: tuple[TensorRecord | None, ...] = ()
    legacy_grad_output: tuple[TensorRecord | None, ...] = ()
    output_node: str | None = None
    user_hooks: list[HookInfo] = field(default_factory=list)
    in_place: bool = False
    output_changed_later: bool = False
    output_requires_grad: bool = True
    grad_enabled: bool = True
    output_kind_hookable: bool = True
    shared_inputs: bool = False
    pending: tuple[str, ...] = ()

    DEFERRED = ("inputs", "output", "output_replaced")  # what Run.fill_details adds in a lazy run
    WAITING = PENDING  # read directly by users (Run.module_io): a pending field says so

    def __post_init__(self) -> None:
        # A record read from a file holds None where it was pending.
        for name in self.pending:
            if getattr(self, name) is None:
                setattr(self, name, PENDING)


@dataclass(eq=False)
class ModuleGrads(ComparedByValue):
    """A module's gradients as one kind of module backward hook sees them (:meth:`Run.module_grads`).

    Attributes:
        grad_input: the hook's ``grad_input``: with ``legacy=False`` one gradient per positional
            tensor argument of the module (None where it is not a tensor that requires grad); with
            ``legacy=True`` the ``grad_inputs`` of the module's last op.
        grad_output: the hook's ``grad_output``: one gradient per top-level output tensor (legacy:
            the last op's ``grad_outputs``).
        legacy: True for the deprecated ``register_backward_hook``'s view, False for
            ``register_full_backward_hook``'s.
        fires: False when that hook would never be called (the tuples are then empty).
    """

    grad_input: tuple[TensorRecord | None, ...]
    grad_output: tuple[TensorRecord | None, ...]
    legacy: bool
    fires: bool = True


@deferrable
@dataclass(eq=False)
class Run(ComparedByValue, Deferrable):
    """One recorded forward + backward (see :meth:`hookviz.Session.run`).

    A recorded run makes its records on first read: ``edges``, ``nodes``, ``calls``, ``events``
    and ``hook_calls`` are assembled, all at once, the first time one of them is read (the
    statistics in them were taken during backward; see :mod:`hookviz.record.build`). ``loss``,
    ``leaf_grads`` and the other fields are there from the start.

    Attributes:
        loss: the 0-dim loss, detached, on CPU.
        device: where it ran, e.g. ``"cpu"``.
        edges: ``(u, v, slot)`` in forward direction: u's output is input ``slot`` of v (gradient
            flows v -> u; ``slot`` indexes v's ``grad_inputs``). :attr:`graph` is the networkx view.
        nodes: NodeRecord by node id.
        root: the loss's node id.
        leaf_grads: full gradient of every leaf by name, on ``device``.
        calls: ModuleCall records in call order.
        events: backward events in the order they happened.
        hook_calls: every user hook and edit call, in order.
        log: what user hooks printed, in runs saved by hookviz versions that copied it; empty
            for a new run (hookviz no longer swaps ``sys.stdout``: hooks print where they print).
        edits: the edits active during this run.
        forward_reused: True when only backward ran again on the retained forward graph.
        asked_grads: inputs whose gradients exist only because ``input_grads=True`` asked for
            them (the model does not; PyTorch's hooks see None there).
        input_names: the forward inputs' tensors by name (``"x"``, ``"batch['ids']"``), in
            signature order: which leaves are inputs, known without the run's details (empty in
            a file written before it was recorded).
        notes: things worth knowing about how this run was recorded (e.g. a compiled model).
        loss_differentiates: ``loss_fn`` ran a backward through the model's output (a gradient
            penalty with ``create_graph=True``); Node and leaf edits are refused then (see
            :meth:`hookviz.Session.edit`).
        module_aliases: other name -> first name, for modules registered under several names;
            every name is accepted.
        parameter_aliases: other name -> first name, for parameters registered under several
            names (tied weights); every name is accepted.
        model_ref: a weak reference to the user's model (read it as :attr:`model`); None in a run
            loaded from a file.
        local_leaf_grads: on a DDP or FSDP2 model, each leaf's gradient on this rank before the
            all-reduce whose result ``leaf_grads`` holds (``leaf_grad(name, local=True)``); None
            for a model that is not data-parallel.
        details: a lazy run's :class:`hookviz.record.details.Details` (its records' other fields are
            filled on first read, see :meth:`fill_details`); None for a run recorded eagerly.
    """

    loss: torch.Tensor
    device: str
    edges: list[tuple[str, str, int]]
    nodes: dict[str, NodeRecord]
    root: str
    leaf_grads: dict[str, torch.Tensor]
    calls: list[ModuleCall]
    events: list[Event]
    hook_calls: list[HookCall]
    log: list[LogEntry]
    edits: tuple = ()
    forward_reused: bool = False
    model_ref: Callable[[], torch.nn.Module | None] | None = field(default=None, repr=False, compare=False)
    asked_grads: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    loss_differentiates: bool = False
    module_aliases: dict[str, str] = field(default_factory=dict)
    parameter_aliases: dict[str, str] = field(default_factory=dict)
    details: object = field(default=None, repr=False, compare=False)
    local_leaf_grads: dict[str, torch.Tensor | None] | None = None
    input_names: list[str] = field(default_factory=list)

    DEFERRED = ("edges", "nodes", "calls", "events", "hook_calls")

    def __copy__(self) -> Run:
        # A shallow copy shares the records, so it shares the details that fill them.
        self.fill_deferred()
        copied = type(self).__new__(type(self))
        copied.__dict__.update((k, v) for k, v in self.__dict__.items() if k != "_source")
        return copied

    def __deepcopy__(self, memo: dict) -> Run:
        # A deep copy owns its records: its details (a Details, which copies itself bound to the
        # copy it finds in memo) fill the copy, never the original.
        self.fill_deferred()
        copied = type(self).__new__(type(self))
        memo[id(self)] = copied
        kept = {k: v for k, v in self.__dict__.items() if k != "_source"}
        copied.__dict__.update({k: copy.deepcopy(v, memo) for k, v in kept.items()})
        return copied

    def __getstate__(self) -> dict:
        # Pickling: the recording that would fill the details and the weak link to the model live
        # in this process only, so an unpickled run is like one read from a file (hookviz.load).
        return {**super().__getstate__(), "details": None, "model_ref": None}

    @cached_property
    def graph(self) -> nx.DiGraph:
        """The autograd graph as a ``networkx.DiGraph``, built on first read from :attr:`nodes` and
        :attr:`edges` (a run that nobody draws pays neither for it nor for importing networkx).
        Edges in forward direction with attribute ``slot``; node attributes ``op``, ``module``,
        ``kind``, ``order``, ``grad_norm`` (combined 2-norm of the gradients arriving at the node),
        ``has_nan`` (a gradient there is not finite), ``edited`` (an edit ran there), ``user_hooks``
        (how many)."""
        import networkx as nx

        edited = self.edited_nodes
        g = nx.DiGraph()
        for node_id, record in self.nodes.items():
            g.add_node(
                node_id,
                op=record.op,
                module=record.module,
                kind=record.kind,
                order=record.order,
                grad_norm=record.grad_norm,
                has_nan=record.has_nan,
                edited=node_id in edited,
                user_hooks=len(record.user_hooks),
            )
        g.add_edges_from((producer, consumer, {"slot": slot}) for producer, consumer, slot in self.edges)
        return g

    def canonical_name(self, name: str) -> str:
        """The first name of a module or parameter known by several (tied weights); else ``name``.

        Args:
            name: a module's or parameter's qualified name.
        """
        return self.module_aliases.get(name) or self.parameter_aliases.get(name) or name

    @property
    def model(self) -> torch.nn.Module | None:
        """The user's model this run recorded (held weakly: None once the model is gone)."""
        return None if self.model_ref is None else self.model_ref()

    @cached_property
    def loss_ops(self) -> frozenset[str]:
        """Ids of the op Nodes that compute the loss, drawn in the ``(loss)`` box: the ops
        ``loss_fn`` made (``module`` :data:`LOSS_MODULE`), or, when it made none, the ops the
        model's own forward runs after its last submodule: the loss a Hugging Face model computes
        inside ``forward`` (GPT-2's ``View``, ``LogSoftmax``, ``NllLoss`` after ``lm_head``).
        Those are the root module's ops that no submodule's op follows and some submodule's op
        precedes; their records keep the module that made them (``""``). Empty for a model of
        root ops alone: nothing sets a loss apart there."""
        return _loss_ops(self.nodes, self.edges)

    @property
    def edited_nodes(self) -> set[str]:
        """Ids of the Nodes where one of hookviz's edits ran in this run."""
        return {h.node for h in self.hook_calls if h.kind == "edit" and h.node}

    @property
    def details_pending(self) -> bool:
        """True while some record of this run has fields that :meth:`fill_details` would add
        (a lazy run before its fill, or one loaded from a file saved before it). Reading this
        records nothing."""
        if self.details is not None:
            return not self.details.filled
        return any(n.pending for n in self.nodes.values()) or any(c.pending for c in self.calls)

    def fill_details(self) -> Run:
        """Record a lazy run's details now: the one call that runs the model again.

        A lazy run (``Session(details="lazy")``, the default) holds each gradient's shape, dtype
        and 2-norm; its other fields (values, statistics, histograms, forward values, what
        forward hooks saw) are None and named in each record's ``pending``. This records the
        same run once more with full details (:mod:`hookviz.record.details`), checks that it
        is the same run (the loss and every leaf gradient equal bit for bit, every gradient's
        norm agrees) and only then fills every pending field at once. The model's parameters,
        buffers and hooks are as they were afterwards. A no-op for an eager run, a small run
        (filled by ``Session.run()`` already) or one filled already. A deep copy fills itself.

        Returns:
            the run.

        Raises:
            DetailsChanged: a parameter, buffer, train/eval mode or input changed since the run
                (the message names it); the run's numbers cannot be recorded again.
            DetailsNotReproduced: recorded again, the loss, a leaf gradient or another gradient
                differs (e.g. a hook of the user's was added or removed since, a value the loss
                reads or a parameter changed through ``.data``); the message names what.
            DetailsUnavailable: nothing is left to record them from (a run loaded from a file
                or unpickled).
            Exception: anything the model, ``loss_fn``, a hook or an edit raises while recording
                them (e.g. :class:`~hookviz.errors.ForwardError`) propagates; the records stay
                pending.
        """
        if self.details is not None:
            self.details.fill()
        elif self.details_pending:
            raise DetailsUnavailable(
                "this run's details were never recorded (it was saved or pickled while they were "
                "pending) and a run read from a file or unpickled cannot record them: call "
                f"{advice('fill_details')} before {advice('save_run')} or pickle.dumps(run), or record "
                f"with {advice('eager_session')}"
            )
        return self

    def node(self, node_id: str) -> NodeRecord:
        """The record of one node of the graph.

        Args:
            node_id: a node id (``"SubBackward0_0"``) or a leaf name (``"x"``, ``"fc1.weight"``).

        Raises:
            TargetError: no such node (the message lists close matches).
        """
        try:
            return self.nodes[node_id]
        except KeyError:
            raise TargetError(unknown_name("node", node_id, list(self.nodes))) from None

    @property
    def leaf_names(self) -> list[str]:
        """Names of the leaves: forward arguments, then parameters, in graph order."""
        return list(self.leaf_grads)

    def leaf_grad(self, name: str, local: bool = False) -> torch.Tensor | None:
        """The gradient of a leaf, as ``.grad`` would hold it after a plain ``loss.backward()``.

        On a DDP or FSDP2 model that is the mean over ranks (full, unsharded), and ``local=True``
        gives this rank's own gradient before the all-reduce (see :mod:`hookviz.record.distributed`).

        Args:
            name: a forward argument's name (``"x"``) or a parameter's qualified name
                (``"fc1.weight"``). A tied parameter answers to every name it has (so does a DDP
                model's parameter: ``"0.weight"`` for ``"module.0.weight"``).
            local: on a data-parallel model, this rank's gradient before the all-reduce; ignored
                on any other model.

        Returns:
            the gradient (same shape, dtype and device as the leaf), or None when the leaf got
            no gradient.

        Raises:
            TargetError: no leaf of that name.
        """
        name = self.canonical_name(name)
        grads = self.local_leaf_grads if local and self.local_leaf_grads is not None else self.leaf_grads
        if name not in grads:
            raise TargetError(unknown_name("leaf", name, list(grads)))
        return grads[name]

    @property
    def modules(self) -> list[str]:
        """Qualified names of the modules that ran, in first-call order ("" = root)."""
        return list(dict.fromkeys(call.module for call in self.calls))

    def module_io(self, name: str, call: int = 0) -> ModuleCall:
        """What forward pre-hooks and forward hooks of a module saw at one of its calls.

        Args:
            name: the module's qualified name ("" = the root module).
            call: which call of that module (0 for the first; a module called twice has 0 and 1).

        Raises:
            TargetError: no module of that name ran, or it ran fewer than ``call + 1`` times.
        """
        name = self.canonical_name(name)
        calls = [c for c in self.calls if c.module == name]
        if not calls:
            raise TargetError(unknown_name("module", name, self.modules))
        if not 0 <= call < len(calls):
            raise TargetError(f"module {name!r} ran {len(calls)} time(s); call={call} does not exist")
        return calls[call]

    def module_grads(self, name: str, legacy: bool = False, call: int = 0) -> ModuleGrads:
        """``grad_input`` / ``grad_output`` of module ``name`` as a backward hook sees them.

        With ``legacy=False``: as ``register_full_backward_hook`` sees them, one gradient per
        tensor input (summed over the module's uses of it) and per output. With ``legacy=True``:
        as the deprecated ``register_backward_hook`` sees them, which are the ``grad_inputs`` and
        ``grad_outputs`` of the Node that made the module's output (its last op), not of the module.
        Source: ``torch.nn.Module.register_backward_hook`` docs (deprecated for this reason).

        Args:
            name: the module's qualified name ("" = the root module).
            legacy: the deprecated ``register_backward_hook``'s view instead of the full hook's.
            call: which call of that module (0 for the first).

        Raises:
            TargetError: no module of that name ran, or it ran fewer than ``call + 1`` times.
        """
        record = self.module_io(name, call)
        if legacy:
            fires = bool(record.legacy_grad_input) or (
                record.output_node is not None and self.nodes[record.output_node].order is not None
            )
            return ModuleGrads(record.legacy_grad_input, record.legacy_grad_output, legacy=True, fires=fires)
        return ModuleGrads(record.grad_input, record.grad_output, legacy=False, fires=record.full_hook_fires)

    def hooks_at(self, node_id: str) -> list[HookCall]:
        """The hook calls (user hooks and edits) that fired at a node, in order.

        Args:
            node_id: a node id or leaf name, as for :meth:`node`.

        Raises:
            TargetError: no such node.
        """
        self.node(node_id)
        return [h for h in self.hook_calls if h.node == node_id]

    @property
    def root_type(self) -> str:
        """The class name of the root module (``"Canonical"``), which views name
        ``"Canonical (root)"`` (:func:`hookviz.text.module_name`); "" when the model did not run
        as a module. In the API the root module is ``""``, as ``named_modules()`` names it."""
        return next((call.type for call in self.calls if call.module == ""), "")

    def print_log(self) -> None:
        """Print what the user's hooks printed during this run (a run loaded from a file saved
        by a hookviz that kept a copy; nothing for a new run), prefixed by hook and place."""
        for entry in self.log:
            for line in entry.text.rstrip("\n").splitlines():
                where = module_name(entry.where, self.root_type)
                print(f"[{entry.hook} @ {where}] {line}")

    def __repr__(self) -> str:
        pending = f", details pending: {advice('fill_details')} records them" if self.details_pending else ""
        return (
            f"Run(loss={number(self.loss.item())}, device={self.device!r}, nodes={len(self.nodes)}, "
            f"leaves={len(self.leaf_grads)}, edits={len(self.edits)}, "
            f"forward_reused={self.forward_reused}"
            f"{pending})"
        )


def require_run(value: object, call: str) -> Run:
    """``value`` when it is a :class:`Run`.

    Raises:
        HookvizError: ``value`` is not one; the message names ``call`` and where a run comes from.
    """
    if not isinstance(value, Run):
        raise HookvizError(
            f"{call} takes a hookviz.Run, got {type(value).__name__}: record one with "
            f"{advice('record_run')}, or open a saved one with {advice('load_run')}"
        )
    return value


def _loss_ops(nodes: dict[str, NodeRecord], edges: list[tuple[str, str, int]]) -> frozenset[str]:
    made_by_loss_fn = frozenset(node_id for node_id, record in nodes.items() if record.module == LOSS_MODULE)
    if made_by_loss_fn:
        return made_by_loss_fn
    inside = {node_id for node_id, record in nodes.items() if record.module != ""}
    root_ops = [node_id for node_id, record in nodes.items() if record.module == "" and record.kind == "op"]
    if not inside or not root_ops:
        return frozenset()
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
    return frozenset(
        node_id
        for node_id in root_ops
        if reaches_a_submodule(node_id, before, backward_known)
        and not reaches_a_submodule(node_id, after, forward_known)
    )
