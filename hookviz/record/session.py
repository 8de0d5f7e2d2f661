"""Session: a model, its inputs, a loss and the user's edits, producing recorded runs.

A run is one forward + backward. The first run of a session, a run on another device, and
``run(forward=True)`` do a fresh forward; any other re-run keeps the retained forward graph and runs
only backward again with the current edits (one backward per round trip). Both give the same
gradients: a fresh forward restores the random-number state of the session's first forward.

Gradients are taken with ``torch.autograd.grad(loss, leaves, retain_graph=True)``, which returns them
instead of accumulating into ``.grad``, so the user's ``.grad`` values are never touched; the run
holds the gradients (``Run.leaf_grad``). With no edits they equal what ``loss.backward()`` puts in
``.grad``, bit for bit (tested).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import torch

from hookviz.analysis.explain import explain
from hookviz.data.run import Run
from hookviz.data.stats_batch import DEFAULT_FULL_TENSOR_LIMIT, DEFAULT_HISTOGRAM_BINS, StatsBatch
from hookviz.edits.codegen import edits_as_code
from hookviz.edits.edit import Edit
from hookviz.errors import (
    BackwardError,
    DetailsRefused,
    EditError,
    HookvizError,
    LossError,
    TargetError,
    UnsupportedError,
    unknown_name,
)
from hookviz.record import distributed, module_tree
from hookviz.record.backward_recorder import BackwardRecorder
from hookviz.record.build import RunContext
from hookviz.record.details import (
    Details,
    ModelState,
    input_marks,
    may_be_recorded_in_full,
    recorded_in_full,
)
from hookviz.record.devices import accelerators, device_of, forked_random_state, random_state, resolve_device
from hookviz.record.forward import RetainedForward, hook_signature, name_inputs, record_forward
from hookviz.record.hook_state import module_hook_state, module_hooks_as
from hookviz.record.model_state import KeptState
from hookviz.record.own_pass import own_pass
from hookviz.record.torch_compat import pytree


class Session:
    """A model + inputs + loss + edits; :meth:`run` records a forward + backward as a :class:`Run`.

    Forward passes get copies of the input tensors that do not require grad, so an in-place op in
    the model never changes the user's data and a fresh forward reproduces the first (inputs that
    require grad are passed as they are: PyTorch refuses in-place ops on them). A
    ``torch.compile``d model is recorded through its original module (``_orig_mod``), run eagerly,
    with a note in ``Run.notes``.

    Args:
        model: any ``torch.nn.Module``. It is used in the mode (train/eval) it is in.
        args: positional inputs of ``model.forward`` (a tuple, or one tensor).
        kwargs: keyword inputs of ``model.forward``.
        loss_fn: ``loss_fn(output) -> Tensor`` with one element; None when the model's output is
            already a one-element tensor.
        input_grads: opt-in (default False). When True, floating-point input tensors that do not
            require grad get a copy that does, for the run only, so their gradients are recorded;
            the run marks them (``Run.asked_grads``), since the model itself never asks for them
            and PyTorch's hooks see None there. By default a run computes exactly what the model
            computes.
        full_tensor_limit: tensors with at most this many elements are kept whole in the run;
            larger ones keep statistics and a histogram.
        histogram_bins: bins of those histograms (0: none).
        details: ``"auto"`` (default), ``"lazy"`` or ``"eager"``. A lazy run keeps at once what
            every view needs (each gradient's shape, dtype and 2-norm, queued while backward
            runs, the gradient itself not held), so recording costs little more than a plain
            step; the rest (values, min/max, histograms, forward values) waits, named in each
            record's ``pending`` (a module call's inputs and outputs print as pending), until
            ``run.fill_details()`` records the same run once more with full details
            (:mod:`hookviz.record.details`); reading a record never runs the model.
            ``"auto"`` gives a small run (at most 2,000 autograd Nodes and 4,194,304 gradient
            elements: :func:`hookviz.record.details.recorded_in_full`, the rule ``show()``
            follows too) every value when :meth:`run` returns, and keeps a larger one lazy. It
            records eagerly, in one pass, when the session's last run was small (for the first
            run: when the model's parameters leave room for it,
            :func:`~hookviz.record.details.may_be_recorded_in_full`), else lazily; a lazy run
            that turns out small has its details filled before :meth:`run` returns (the
            forward runs twice then). Should that fill be refused (the model is not
            deterministic), the run stays lazy and says why in ``Run.notes``. ``"lazy"`` never
            fills by itself (a training loop recording every step); ``"eager"`` records
            everything in one pass in every run. Distributed models (DDP, FSDP2) are always
            eager: a later re-run would have to be collective on every rank.

    Raises:
        HookvizError: ``model`` is not a module, its parameters are lazy or inference tensors,
            ``kwargs`` is not a dict, ``input_grads`` not a bool, ``full_tensor_limit`` not an int
            of at least 0, ``histogram_bins`` not an int of at least 0, or ``details`` is not
            "auto", "lazy" or "eager".
        LossError: ``loss_fn`` is neither None nor callable.
        UnsupportedError: an input is a nested tensor (``torch.nested``), which hookviz cannot
            record (the message names the padded alternative).
    """

    def __init__(
        self,
        model: torch.nn.Module,
        args: Any = (),
        kwargs: dict[str, Any] | None = None,
        loss_fn: Callable[[Any], torch.Tensor] | None = None,
        *,
        input_grads: bool = False,
        full_tensor_limit: int = DEFAULT_FULL_TENSOR_LIMIT,
        histogram_bins: int = DEFAULT_HISTOGRAM_BINS,
        details: str = "auto",
    ):
        if not isinstance(model, torch.nn.Module):
            raise HookvizError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        _check_options(kwargs, loss_fn, input_grads, full_tensor_limit, histogram_bins, details)
        self.notes: list[str] = []
        if isinstance(getattr(model, "_orig_mod", None), torch.nn.Module):
            self.notes.append(
                f"the model is torch.compile'd: hookviz records its original module "
                f"({type(model._orig_mod).__name__}) run eagerly, since compiled code runs no "
                "per-op hooks; edits apply to these runs, not to the compiled model"
            )
            model = model._orig_mod
        lazy = [
            n
            for n, t in [*module_tree.named_parameters(model), *model.named_buffers()]
            if torch.nn.parameter.is_lazy(t)
        ]
        if lazy:
            raise HookvizError(
                f"{', '.join(map(repr, lazy[:3]))}{' ...' if len(lazy) > 3 else ''} of "
                f"{type(model).__name__} {'is' if len(lazy) == 1 else 'are'} not initialised yet: a lazy "
                "module (nn.LazyLinear, nn.LazyConv2d, ...) makes its parameters at its first forward; "
                "run the model once first (model(*args)), then make the Session"
            )
        frozen = [n for n, p in module_tree.named_parameters(model) if p.is_inference()]
        if frozen:
            raise HookvizError(
                f"the parameters {', '.join(map(repr, frozen[:3]))}{' ...' if len(frozen) > 3 else ''} were "
                "created under torch.inference_mode(), and autograd cannot use such tensors; create the "
                "model outside inference_mode (or replace them with clones made outside it)"
            )
        self.model = model
        self.args = args if isinstance(args, tuple) else tuple(args) if isinstance(args, list) else (args,)
        self.kwargs = dict(kwargs or {})
        self.loss_fn = loss_fn
        self.input_grads = input_grads
        self.full_tensor_limit = full_tensor_limit
        self.histogram_bins = histogram_bins
        self.details = "eager" if distributed.strategy(model) is not None else details
        self.edits: list[Edit] = []
        self.last_run: Run | None = None
        self.baseline: Run | None = None
        self.home_device = device_of(
            model, [t for t in pytree.tree_leaves((self.args, self.kwargs)) if isinstance(t, torch.Tensor)]
        )
        # DDP's forward is (*inputs, **kwargs): inputs are named after the wrapped module's forward
        self._input_names = name_inputs(distributed.user_forward(self.model), self.args, self.kwargs)
        nested = [name for name, tensor in self._input_names.items() if tensor.is_nested]
        if nested:
            raise UnsupportedError(
                f"the input {nested[0]!r} is a nested tensor (torch.nested), and hookviz cannot record "
                "one: its gradients have no single shape, and PyTorch has no norm, min or max for "
                "it, which every record holds; pass a padded tensor (x.to_padded_tensor(0.0)) "
                "with a mask, or the packed values (x.values()) with the offsets"
            )
        self._forward: RetainedForward | None = None
        self._forward_lazy = self.details != "eager"  # how the retained forward was recorded
        # The random state of the session's first forward, per device (None: the CPU's)
        self._rng_states: dict[torch.device | None, torch.Tensor] = {}
        # What a lazy run's details depend on, followed between hookviz's calls, and the retained
        # forward's epoch and input marks (a backward-only run's numbers are that forward's).
        self._model_changes = ModelState.of(self.model)
        self._forward_marks: tuple[int, dict] = (0, {})

    # ------------------------------------------------------------------ inputs

    def _prepare_inputs(self, device: str) -> tuple[tuple, dict, dict[str, torch.Tensor]]:
        """Inputs for one forward on ``device``, and the tensors among them by name.

        Tensors that do not require grad are copied (an in-place op in the model must not change
        the user's data); with ``input_grads`` the floating-point ones among them require grad.
        """
        moved: dict[int, torch.Tensor] = {}
        by_name: dict[str, torch.Tensor] = {}
        for name, tensor in self._input_names.items():
            if id(tensor) in moved:  # one tensor under two names (input_ids and labels): one copy
                by_name[name] = moved[id(tensor)]
                continue
            prepared = tensor
            if str(tensor.device) != device:
                prepared = tensor.detach().to(device).requires_grad_(tensor.requires_grad)
            if not prepared.requires_grad:
                if prepared is tensor:
                    with torch.inference_mode(False):  # a normal tensor, even from an inference one
                        prepared = tensor.clone()
                if self.input_grads and (prepared.is_floating_point() or prepared.is_complex()):
                    prepared.requires_grad_(True)
            moved[id(tensor)] = prepared
            by_name[name] = prepared

        def swap(leaf):
            return moved.get(id(leaf), leaf) if isinstance(leaf, torch.Tensor) else leaf

        args, kwargs = pytree.tree_map(swap, (self.args, self.kwargs))
        return args, kwargs, by_name

    @property
    def asked_grads(self) -> list[str]:
        """Inputs whose gradients exist only because ``input_grads=True`` asked for them."""
        if not self.input_grads:
            return []
        return [
            n
            for n, t in self._input_names.items()
            if not t.requires_grad and (t.is_floating_point() or t.is_complex())
        ]

    def _model_on(self, device: str) -> torch.nn.Module:
        """The user's model on its own device; a private copy on any other (the user's stays put)."""
        if device == self.home_device:
            return self.model
        return copy.deepcopy(self.model).to(device)

    # ------------------------------------------------------------------ running

    def run(self, device: str | torch.device | None = None, forward: bool = False) -> Run:
        """Record one forward + backward (or only backward, see the module docstring).

        Args:
            device: one of :func:`hookviz.record.devices`; None = where the model is. On another device
                hookviz runs a copy of the model and of the inputs there; the user's model and
                tensors stay where they are.
            forward: force a fresh forward even when the retained graph could be reused.

        Returns:
            the new :class:`Run`; also ``self.last_run`` (and ``self.baseline`` for the first).
            With ``details="auto"`` (the default) a small run has all its details (see
            :class:`Session`), a large one its norms and leaf gradients, the rest pending.

        Raises:
            DeviceError: unknown or unavailable device.
            ForwardError: the model's forward raised (the message names the module).
            LossError: the output is not a one-element tensor that requires grad.
            EditError, ExpressionError: an edit failed at its site.
            BackwardError: backward raised.
        On any error the model, its hooks and ``.grad`` values, the session's edits and
        ``last_run`` are as they were.
        """
        device = self.home_device if device is None else resolve_device(device)
        # Every session's runs, eager ones too: hookviz's own forwards are no change to a lazy run.
        epoch = self._model_changes.note_changes()
        # The model is listed once (modules, parameters, buffers) before its forward and once
        # after: the recorders asked for a listing 14 times per fresh run.
        with module_tree.listed_once(self.model):
            edits, lazy = tuple(self.edits), self._records_lazily()
            # A retained forward recorded the other way lacks (or holds) its values: record anew.
            fresh = forward or self._needs_forward(device) or self._forward_lazy != lazy
            if fresh:
                self.release()
            try:
                run, graph = self._record(device, edits, None if fresh else self._forward, lazy)
            except BackwardError:
                if fresh:
                    raise
                # The retained graph went stale (e.g. a parameter changed in place): start over.
                self.release()
                run, graph = self._record(device, edits, None, lazy)
            if lazy and not run.forward_reused:
                self._forward_marks = (epoch, input_marks(self._input_names))
            if lazy:
                run.details.bind(run, self._recompute(device, edits, *self._forward_marks))
        if not run.forward_reused:  # the hooks the user's model has, without those its forward added
            graph.hook_signature = hook_signature(self.model, graph.leaves)
        self._forward, self._forward_lazy = graph, lazy
        self.last_run = run
        if self.baseline is None:
            self.baseline = run
        self._model_changes.mark()  # the model's state is back (what a fill checks against)
        if self.details == "auto" and lazy and recorded_in_full(run):
            try:
                run.fill_details()
            except DetailsRefused as refusal:  # not the same numbers twice: the run stays lazy
                run.notes.append(f"its details were not recorded at once: {refusal}")
        return run

    def _records_lazily(self) -> bool:
        """Whether the next run is recorded lazily (see ``details`` in :class:`Session`)."""
        if self.details != "auto":
            return self.details == "lazy"
        if self.last_run is not None:
            return not recorded_in_full(self.last_run)
        return not may_be_recorded_in_full(self.model)

    def _record(self, device: str, edits: tuple, graph: RetainedForward | None, lazy: bool):
        """One run on ``graph`` (a fresh forward when None): (the Run, its retained forward)."""
        # Inside the user's torch.inference_mode() no graph is recorded; hookviz's run needs one.
        with (
            forked_random_state(self._devices_used(device)),
            torch.inference_mode(False),
            own_pass(),  # a watch on the model takes no recording for a training step
        ):
            recorder, reused = BackwardRecorder(edits), graph is not None
            if graph is None:
                graph = self._do_forward(device, recorder, values=not lazy)
            run = self._do_backward(graph, recorder, edits, reused=reused, lazy=lazy)
            run = distributed.reduced_run(self.model, run)  # DDP / FSDP2: leaf_grads as .grad holds them
        return run, graph

    def _recompute(self, device: str, edits: tuple, epoch: int, inputs_then: dict):
        """How a lazy run's details are recorded (:meth:`hookviz.data.run.Run.fill_details`): the same
        run again with full details, from a fresh forward (the session's first random state) on a
        graph of its own, with the module hooks the run had; refused when anything the run's
        numbers depend on changed since its forward (``epoch``, and the inputs' marks
        ``inputs_then``: see :class:`~hookviz.record.details.ModelState`)."""
        # A copy of the session without its runs and retained graph: the run keeps what made it
        # (model, inputs, loss_fn, random state), not the activations of the session's last forward.
        recipe = copy.copy(self)
        recipe._forward = recipe.last_run = recipe.baseline = None
        recipe.edits, recipe._rng_states = [], dict(self._rng_states)
        hooks = module_hook_state(self.model)
        changes, inputs = self._model_changes, self._input_names

        def recompute() -> Run:
            changes.note_changes()
            changes.refuse_changes_since(epoch, inputs_then, inputs)
            try:
                # The recording puts the model's state back after its own backward, as every run
                # does (hookviz.record.model_state), so the fill leaves no trace either.
                with module_hooks_as(recipe.model, hooks), module_tree.listed_once(recipe.model):
                    run, graph = recipe._record(device, edits, None, lazy=False)
                graph.remove_hooks()
            finally:
                changes.mark()  # the fill's own forward is no change the user made
            return run

        return recompute

    def _needs_forward(self, device: str) -> bool:
        graph = self._forward
        if graph is None or graph.device != device:
            return True
        if graph.edit_sites != self._edit_sites():
            return True
        if any(t._version != v for t, v in graph.versions):
            return True
        return hook_signature(self.model, graph.leaves) != graph.hook_signature

    def _edit_sites(self) -> tuple[tuple[str, str], ...]:
        """(module, slot name) of the module edits, each made by a real full backward (pre-)hook."""
        return tuple(sorted({(e.target, e.slot.name) for e in self.edits if e.slot.on_module}))

    def release(self) -> None:
        """Free the retained forward graph and remove every hook hookviz put on it (the next run
        does a fresh forward)."""
        if self._forward is not None:
            self._forward.remove_hooks()
        self._forward = None

    def _devices_used(self, device: str) -> list[torch.device]:
        """The accelerators a run on ``device`` draws random numbers on: ``device`` itself (where
        hookviz's copy of the model runs) and wherever the user's model and inputs live."""
        buffers = [buffer for _, buffer in module_tree.named_buffers(self.model)]
        tensors = [*module_tree.parameters(self.model), *buffers, *self._input_names.values()]
        return accelerators(tensors, also=[device])

    def _restore_rng(self, device: str) -> None:
        """Give every device the random state it had at the session's first forward (recorded
        then, for a device met first now), so a fresh forward draws what the first drew."""
        used = self._devices_used(device)
        cpu, now = random_state([d for d in used if d not in self._rng_states])
        self._rng_states.setdefault(None, cpu)
        self._rng_states.update(now)
        torch.set_rng_state(self._rng_states[None])
        for device_used in used:
            getattr(torch, device_used.type).set_rng_state(self._rng_states[device_used], device_used)

    def _do_forward(self, device: str, recorder: BackwardRecorder, values: bool) -> RetainedForward:
        model = self._model_on(device)
        args, kwargs, inputs = self._prepare_inputs(device)
        self._restore_rng(device)
        return record_forward(
            model,
            args,
            kwargs,
            inputs,
            self.loss_fn,
            recorder,
            device=device,
            user_model=self.model,
            asked_grads=self.asked_grads,
            full_tensor_limit=self.full_tensor_limit,
            histogram_bins=self.histogram_bins,
            values=values,
        )

    def _do_backward(
        self, graph: RetainedForward, recorder: BackwardRecorder, edits: tuple, reused: bool, lazy: bool
    ) -> Run:
        context = RunContext(
            self.model,
            edits,
            tuple(self.asked_grads),
            tuple(self.notes),
            tuple(self._input_names),
        )
        batch = StatsBatch(self.full_tensor_limit, self.histogram_bins, source=Details() if lazy else None)
        run = graph.backward(recorder, batch, context, reused)
        run.details = batch.source
        return run

    # ------------------------------------------------------------------ edits

    def edit(self, target: str, slot: str, transform: str | Callable[[torch.Tensor], torch.Tensor]) -> Edit:
        """Attach ``transform`` to a hook site; it takes effect on the next :meth:`run`.

        A session with no run yet records one first, to know the graph.

        Args:
            target: a node id (``"SubBackward0_0"``), a leaf name (``"x"``, ``"fc1.weight"``) or a
                module's qualified name (``""`` = the root module).
            slot: ``"grad_inputs[i]"`` / ``"grad_outputs[i]"`` (node), ``"grad"`` (leaf or node),
                ``"grad_input[i]"`` / ``"grad_output[i]"`` (module).
            transform: an expression over ``grad`` in hookviz's safe language (see
                :mod:`hookviz.edits.expression`), or a callable ``grad -> Tensor``.

        Returns:
            the :class:`~hookviz.edits.edit.Edit`, in ``self.edits``: it takes the place of an
            edit already at the same target and slot (one edit per site, as the page's **Apply**
            replaces; edits at different sites all apply), else it is appended.

        Raises:
            TargetError: unknown target, or a slot that target does not have.
            ExpressionError: a malformed or forbidden expression.
            EditError: the edit cannot apply at that site (the message says why and what to do
                instead), or the expression gives the wrong shape or dtype there.
        """
        new = Edit.make(target, slot, transform)
        if self.last_run is None:
            self.run()
        # Ids count within the session's edits: after clear_edits the first edit is e1 again.
        taken = [int(e.id[1:]) for e in self.edits if e.id[:1] == "e" and e.id[1:].isdigit()]
        new = dataclasses.replace(
            new, target=self.last_run.canonical_name(target), id=f"e{max(taken, default=0) + 1}"
        )
        self._check_edit(new, self.last_run)
        for i, existing in enumerate(self.edits):
            if (existing.target, existing.slot) == (new.target, new.slot):
                self.edits[i] = new
                return new
        self.edits.append(new)
        return new

    def _check_edit(self, edit: Edit, run: Run) -> None:
        """Refuse, now, an edit that could not apply at the next run (see :meth:`edit`)."""
        slot = edit.slot
        if run.loss_differentiates and not slot.on_module:
            raise EditError(
                f"your loss_fn differentiates through the model's output (autograd.grad(..., "
                f"create_graph=True) inside it), so PyTorch would run a hook at {edit.where} inside that "
                "backward too; hookviz installs Node and leaf edits after forward, so the edit and its "
                "exported code would disagree. Edit a module's grad_input[i] / grad_output[i] instead: "
                "those hooks exist from forward on, as in plain PyTorch"
            )
        if slot.on_module:
            record = self._check_module_edit(edit, run)
        else:
            node = run.node(edit.target)
            if str(slot) not in node.sites:
                raise TargetError(
                    _slot_error(
                        edit, f"{node.id} ({node.op}) has the sites {', '.join(node.sites) or 'none'}"
                    )
                )
            if slot.name == "grad_inputs":
                record = node.grad_inputs[slot.index] if slot.index < len(node.grad_inputs) else None
            elif slot.name == "grad_outputs" or node.kind == "op":
                record = node.grad_outputs[slot.index] if slot.index < len(node.grad_outputs) else None
            else:
                record = node.grad_outputs[0] if node.grad_outputs else None
        # Try the transform on a copy of the site's gradient (or zeros of its shape) now, so a wrong
        # shape or dtype fails here, beside the edit, and not in the middle of the next backward.
        # A trial of randn_like(grad) must not move the user's random numbers, nor a callable that
        # writes the weights keep its writes (the run puts them back after its backward too).
        if record is not None and record.numel <= 1_000_000:
            value = None if record.pending else record.value  # a lazy run's is not worth a re-run here
            sample = (
                value.clone()
                if value is not None
                else torch.zeros(record.shape, dtype=getattr(torch, record.dtype))
            )
            kept = KeptState(self.model)
            try:
                with forked_random_state(self._devices_used(self.home_device)), kept.watching():
                    edit.apply(sample)
            finally:
                kept.put_back()

    def _check_module_edit(self, edit: Edit, run: Run):
        slot, target = edit.slot, edit.target
        if target not in run.modules:
            raise TargetError(unknown_name("module", target, run.modules))
        call = run.module_io(target)
        if not call.full_hook_fires:
            raise EditError(
                f"PyTorch would never call a full backward hook of module {target!r}, so a "
                f"{slot.name} edit there would do nothing: {explain(run, target)}"
            )
        records = call.grad_input if slot.name == "grad_input" else call.grad_output
        if slot.index >= len(records):
            raise TargetError(_slot_error(edit, f"module {target!r} has {len(records)} {slot.name} entries"))
        if records[slot.index] is None:
            what = "input" if slot.name == "grad_input" else "output"
            raise TargetError(
                _slot_error(
                    edit,
                    f"{what} {slot.index} of module {target!r} gets no gradient (not a tensor that "
                    "requires grad)",
                )
            )
        module = self.model.get_submodule(target)
        if module._is_full_backward_hook is False:
            raise EditError(
                f"module {target!r} has a legacy register_backward_hook, and PyTorch does not allow a "
                f"full backward hook beside it, which a {slot.name} edit needs; edit the grad_inputs "
                f"of node {call.output_node!r} instead (what the legacy hook edits)"
            )
        if call.output_changed_later:
            raise EditError(
                f"an in-place op changes the output of module {target!r} after it returns, and PyTorch "
                f"refuses that on the output of a full backward hook, which a {slot.name} edit needs "
                '("Output 0 of BackwardHookFunction is a view and is being modified inplace"); edit the '
                f"grad_outputs of node {call.output_node!r} instead"
            )
        if call.in_place:
            raise EditError(
                f"module {target!r} ({call.type}) modifies its input in place, and PyTorch refuses full "
                f"backward hooks on such a module, which a {slot.name} edit needs; edit the "
                f"grad_outputs of node {call.output_node!r} instead, or set inplace=False"
            )
        return records[slot.index]

    def remove_edit(self, edit: Edit | str) -> None:
        """Remove an edit; the next run is without it.

        Args:
            edit: the :class:`Edit` :meth:`edit` returned, or its id (``"e3"``).

        Raises:
            TargetError: no such edit is active.
        """
        for i, existing in enumerate(self.edits):
            if existing is edit or existing.id == edit:
                del self.edits[i]
                return
        raise TargetError(unknown_name("edit", getattr(edit, "id", edit), [e.id for e in self.edits]))

    def clear_edits(self) -> None:
        """Remove every edit; the next run reproduces the baseline gradients."""
        self.edits.clear()

    def sites(self, target: str) -> list[str]:
        """The editable slots at a node, leaf or module, read from the last run.

        A session that has not run yet runs once first (:meth:`run`).

        Args:
            target: a node id (``"SubBackward0_0"``), a leaf name (``"x"``) or a module's
                qualified name ("" = the root module).

        Returns:
            slots such as ``["grad_inputs[0]", "grad_outputs[0]"]`` (a node) or
            ``["grad_input[0]", "grad_output[0]"]`` (a module), each one :meth:`edit` accepts.

        Raises:
            TargetError: no such node, leaf or module.
        """
        run = self.last_run or self.run()
        if target in run.nodes:
            return list(run.nodes[target].sites)
        if target in run.modules:
            call = run.module_io(target)
            return [f"grad_input[{i}]" for i, r in enumerate(call.grad_input) if r is not None] + [
                f"grad_output[{i}]" for i in range(len(call.grad_output))
            ]
        raise TargetError(unknown_name("node or module", target, [*run.nodes, *run.modules]))

    def edits_as_code(self) -> str:
        """Plain PyTorch hook code that makes the session's edits (see :mod:`hookviz.edits.codegen`)."""
        return (
            edits_as_code(self.last_run, self.edits) if self.last_run is not None else edits_as_code(None, [])
        )

    def __repr__(self) -> str:
        return (
            f"Session(model={type(self.model).__name__}, device={self.home_device!r}, "
            f"edits={len(self.edits)}, runs={'none' if self.last_run is None else 'yes'})"
        )


def _check_options(kwargs, loss_fn, input_grads, full_tensor_limit, histogram_bins, details) -> None:
    """Refuse a Session option of the wrong type or out of range (see :class:`Session`)."""
    if kwargs is not None and not isinstance(kwargs, Mapping):
        raise HookvizError(
            f"kwargs={type(kwargs).__name__}: pass the forward's keyword inputs as a dict, e.g. "
            "kwargs={'attention_mask': mask}, or None"
        )
    if loss_fn is not None and not callable(loss_fn):
        raise LossError(
            f"loss_fn={type(loss_fn).__name__} is not callable: pass a function of the model's output, "
            "e.g. loss_fn=lambda out: F.cross_entropy(out, labels), or None when the output is the loss"
        )
    if not isinstance(input_grads, bool):
        raise HookvizError(f"input_grads={input_grads!r}: pass True or False")
    for name, value in (("full_tensor_limit", full_tensor_limit), ("histogram_bins", histogram_bins)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise HookvizError(f"{name}={value!r} must be an int of at least 0")
    if details not in ("auto", "lazy", "eager"):
        raise HookvizError(f'details={details!r}: pass "auto" (the default), "lazy" or "eager"')


def _slot_error(edit: Edit, detail: str) -> str:
    return f"slot {str(edit.slot)!r} does not exist on {edit.target or '<root module>'!r}: {detail}"
