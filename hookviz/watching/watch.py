"""Watch gradients over a real training loop, cheaply: per step, per parameter and per module output.

``with hookviz.watch(model) as w:`` puts a tensor hook (``Tensor.register_hook``) on every trainable
parameter. It runs in every backward that reaches that parameter, whichever module's forward built
the graph (a submodule called alone, a GAN's two halves, a parameter the loss uses directly), before
``AccumulateGrad`` adds the gradient to ``.grad``. The first one of a backward (a graph task,
``torch._C._current_graph_task_id``) starts its step and queues a callback
(``Variable._execution_engine.queue_callback``) for the backward's end; each notes the ``.grad`` its
parameter holds. At the end the ``.grad`` that changed are reduced together in a few batched torch
calls per device and dtype (:mod:`hookviz.watching.reduce`). hookviz's own recordings
(``Session.run()``, re-runs, ``fill_details()``) are marked (:mod:`hookviz.record.own_pass`) and
never a step. ``outputs=True`` also puts a Node pre-hook on each module output's Node (a forward
hook per module), which sees the gradient the Node receives, after the user's tensor hooks. No full
backward hook is used: forward hooks, tensor hooks and Node pre-hooks leave every gradient bit-
identical (``docs/architecture.md``).

A *step* is one backward that changed a watched parameter's ``.grad`` (or, with ``outputs=True``,
reached a module output), counted when it ends; two threads' backwards are two steps. With
``optimizer=``, a step is one ``optimizer.step()`` instead, with the gradients it reads, its update-
to-weight ratios and learning rates (:mod:`hookviz.watching.optimizer_steps`).

Statistics per name and step: ``norm`` (2-norm), ``max_abs``, ``nonfinite`` (NaN + Inf count) and
``zero_fraction`` (exactly-zero elements). Norms are read every step; a parameter's other three
every ``stats_every`` steps of a stream (its first step first) and at once on any step where a
parameter's norm is not finite, above the ``exploding_norm`` threshold or exactly 0, so no NaN,
explosion or dead gradient goes unmeasured. On the other steps ``max_abs`` and ``zero_fraction`` are
NaN (not measured) and ``nonfinite`` 0 (a finite norm proves there is none);
:attr:`History.full_steps` lists the steps that have every statistic. A parameter's statistics are
those of its ``.grad`` as the step left it (accumulated when the loop does not zero it); a module's
those of the gradient w.r.t. its outputs, over its calls.

Every step is read; :class:`~hookviz.watching.kept_steps.KeptSteps` decides which are kept, per
stream (each optimizer; without one, each kind of backward in an iteration): ``every=k`` records a
stream's every k-th step, ``capacity`` steps are kept, and when full each stream drops every other
kept step and from then on records every other one. A step with NaN/Inf, an exploding norm or
skipped by the ``GradScaler`` is always kept.

Limits: ``torch.autograd.grad`` changes no ``.grad``: not a step (unless ``outputs=True``). A
replaced parameter is followed to its new tensor (:mod:`hookviz.watching.structure`, which also
says when the model is looked at: no hook runs at the model's forward); one added or unfrozen
after the watch opened is not watched, and a warning names it. Parameter names are listed
nearest the loss first in definition order reversed.
"""

from __future__ import annotations

import dataclasses
import math
import os
import weakref
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING

import torch
from torch.utils.hooks import RemovableHandle

from hookviz.analysis.diagnose import DEFAULT_THRESHOLDS, check_thresholds
from hookviz.analysis.findings import Finding
from hookviz.analysis.onset import onsets
from hookviz.analysis.step_findings import step_findings, step_layers
from hookviz.errors import WatchError
from hookviz.stats.reduce import COLUMN
from hookviz.watching import autosave as watch_autosave
from hookviz.watching import gather as watch_gather
from hookviz.watching import hooks as watch_hooks
from hookviz.watching import plots
from hookviz.watching.backward_steps import Backwards, reduce_pairs
from hookviz.watching.handles import Handles
from hookviz.watching.history import History, StepInfo
from hookviz.watching.kept_steps import KeptSteps, Streams
from hookviz.watching.optimizer_steps import SCALE_NOTE, OptimizerSteps, step_notes, warn_nothing_kept
from hookviz.watching.scaler_listeners import check_scaler
from hookviz.watching.structure import WatchedParameters, check_options, trainable_at_open

if TYPE_CHECKING:  # annotations only
    from plotly.graph_objects import Figure
    from torch.distributed import ProcessGroup

    from hookviz.data.run import Run

# A watch's default stats_every: every statistic every this many steps, norms on the others; 16
# by measurement: 64 costs no less, 4 about 3 % more on the 20-layer MLP (docs/perf.md).
STATS_EVERY = 16
# id(model) -> the open Watch on it (weakly): one watch per model at a time.
_OPEN: dict[int, weakref.ref] = {}


class Watch:
    """Gradient statistics of a model over training steps; see the module docstring.

    Use :func:`watch` to make one. It is a context manager; :meth:`close` removes every hook it
    added (also when the ``with`` body raises). Reading: :attr:`history`, :meth:`norms`,
    :meth:`diagnose`; plots: :meth:`heatmap`, :meth:`lines`, :meth:`diagnosis_over_time`.

    Args:
        model: the model being trained.
        every: record every ``every``-th step (1 = every step).
        parameters: record each parameter's gradient (its ``.grad`` once a backward accumulated).
        outputs: also record the gradient w.r.t. each module's output (opt-in: a hook per output).
        capacity: steps kept before thinning (at least 2).
        optimizer: None, an optimizer or a list of them (as :func:`watch`).
        scaler: the loop's ``torch.amp.GradScaler``, or None (as :func:`watch`).
        stats_every: every statistic every ``stats_every``-th step (as :func:`watch`).
        path: write the history there as it trains (as :func:`watch`; ``self.autosave``).
        save_every_seconds: as :func:`watch`.

    Raises:
        WatchError: no parameter requires grad; the model already has an open watch; bad arguments.
        PathError: ``path`` names no file, or its folder does not exist.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        every: int = 1,
        *,
        parameters: bool = True,
        outputs: bool = False,
        capacity: int = 1024,
        optimizer: torch.optim.Optimizer | Sequence[torch.optim.Optimizer] | None = None,
        scaler: torch.amp.GradScaler | None = None,
        stats_every: int = STATS_EVERY,
        path: str | os.PathLike | None = None,
        save_every_seconds: float = watch_autosave.SAVE_EVERY_SECONDS,
    ):
        check_options(model, every, stats_every, capacity, parameters, outputs)
        saved_to = None if path is None else watch_autosave.checked(path, save_every_seconds)
        trainable = trainable_at_open(model, [w() for w in _OPEN.values() if w() is not None])
        self.model = model  # None once closed (see close)
        self.model_name = type(model).__name__
        self.every = every
        self.capacity = capacity
        self.stats_every = stats_every
        self.parameter_names = [n for n, _ in trainable] if parameters else []
        modules = list(model.named_modules()) if outputs else []
        self.module_names = [n for n, _ in modules]
        self.module_types = {n: type(m).__name__ for n, m in model.named_modules()}
        self.names = self.parameter_names + self.module_names
        self.kinds = ["parameter"] * len(self.parameter_names) + ["output"] * len(self.module_names)
        self.closed = False
        # the one owner of the kept steps, their rows and the lock that guards them
        self.kept = KeptSteps(capacity, len(self.names), every, stats_every)
        # the one owner of every hook handle this watch adds; close() removes them
        self.handles = Handles()
        # the one owner of the watched parameters' columns (followed when replaced)
        self.backwards = Backwards()  # the one owner of the backwards whose end has not come yet
        start_hook = partial(watch_hooks.step_start_hook, weakref.ref(self), self.backwards.pending)
        self.columns = WatchedParameters(
            model, trainable, parameters, self.kept.lock, self.handles, start_hook
        )
        if scaler is not None:
            check_scaler(scaler)
        self.scaler = scaler
        self.streams = Streams()  # without optimizer=: which stream a backward's step belongs to
        self.optimizer_steps: OptimizerSteps | None = None  # with optimizer=: the step's other half
        self.ranks: watch_gather.RankRecorder | None = None  # DDP / FSDP2
        self.gathered: watch_gather.RankHistory | None = None  # set by gather() on dst
        self.autosave: watch_autosave.Autosave | None = None
        try:
            # DDP / FSDP2: local statistics before the all-reduce, reduced ones after (watch_gather)
            self.ranks = watch_gather.attach(
                self,
                model,
                trainable if parameters else [],
                partial(watch_hooks.parameter_hook, weakref.ref(self)),
                self.handles,
                reduce_pairs,
            )
            if self.ranks is not None:
                self.columns.sharded = self.ranks.strategy == "fsdp"
                for column, parameter in enumerate(self.columns.parameters):
                    hook = watch_hooks.parameter_hook(weakref.ref(self), column)
                    self.handles.add(parameter.register_post_accumulate_grad_hook(hook))
            self.columns.add_start_hooks()
            if optimizer is not None:
                optimizers = list(optimizer) if isinstance(optimizer, (list, tuple)) else [optimizer]
                if not optimizers:
                    raise WatchError("optimizer=[] lists no optimizer; pass one, a list, or leave it out")
                self.optimizer_steps = OptimizerSteps(
                    self, optimizers, scaler, self.handles, self.columns.column_of
                )
                self.scaler = self.optimizer_steps.scaler
            self.columns.hooked_modules = [module for _, module in modules]
            for offset, (_, module) in enumerate(modules):
                self.handles.add(
                    module.register_forward_hook(
                        partial(watch_hooks.on_forward, weakref.ref(self), len(self.parameter_names) + offset)
                    )
                )
            if saved_to is not None:
                self.autosave = watch_autosave.Autosave(self, saved_to, save_every_seconds)
        except BaseException:
            self.close()
            raise
        _OPEN[id(model)] = weakref.ref(self)
        weakref.finalize(self, self.handles.remove)

    @property
    def notes(self) -> list[str]:
        """What a reader of this watch's numbers must know: what a step is, and the loss scale."""
        return step_notes(self.optimizer_steps, self.scaler, self.looks_scaled())

    def looks_scaled(self) -> bool:
        """Whether no ``scaler=`` was given and, at a kept step, every watched gradient's norm
        is above ``exploding_norm`` (what a ``GradScaler``'s loss scale does to them, with
        ``optimizer=`` to the pre-clip norms): the notes and the exploding findings then name
        ``scaler=``."""
        if self.scaler is not None or not self.parameter_names:
            return False
        _, rows, _, pre_clip, _, _ = self.kept.snapshot()
        norms = pre_clip if self.optimizer_steps is not None else rows[:, :, 0]
        norms = norms[:, : len(self.parameter_names)]
        read = ~norms.isnan()
        big = (norms > DEFAULT_THRESHOLDS["exploding_norm"]) | ~read
        return bool((big.all(1) & read.any(1)).any())

    # ------------------------------------------------------------------ lifetime

    def close(self) -> None:
        """Remove every hook this watch added to the model and to live graphs (idempotent). The
        history stays; the model goes: a closed watch holds no reference to the model, its
        parameters or its step listeners (``model`` is None), so a closed watch kept to read,
        gather or save does not keep the model alive."""
        already = self.closed
        self.closed = True
        self.handles.remove()
        self.backwards.clear()
        if _OPEN.get(id(self.model), lambda: None)() is self:
            del _OPEN[id(self.model)]
        if not already and not len(self.kept):
            warn_nothing_kept(self)  # it reads the model: before the watch lets it go
        with self.kept.lock:  # a backward's first hook reads these under the lock
            self._closed_numels = self._numels()  # what reading the history needs of the parameters
            self.model = None
            self.columns.release()
        if self.optimizer_steps is not None:  # an optimizer holds the parameters and their state
            self.optimizer_steps.close(self)
        if self.ranks is not None:
            self.ranks.close()
        if not already:
            self.kept.close()

    def add_step_listener(self, listener: Callable[..., None]) -> RemovableHandle:
        """Call ``listener(step, row)`` each time a recorded step is kept, and ``listener(None,
        None)`` once when the watch closes. A live view subscribes here.

        ``step`` is the step's number; ``row`` its statistics, a float64 CPU tensor of shape
        ``[len(watch.names), 4]`` whose columns are ``norm, max_abs, nonfinite, zero_fraction``
        (NaN where a name got no gradient). The listener runs on the thread that ran the
        backward, at its end, before ``backward()`` returns: it must be quick (hand the work to
        another thread) and must not call backward. An exception in it is turned into a
        warning, so it never breaks the training step.

        Args:
            listener: a callable ``listener(step, row)`` (see above).

        Returns:
            a ``torch.utils.hooks.RemovableHandle``; ``handle.remove()`` unsubscribes.
        """
        return self.kept.add_listener(listener)

    def __enter__(self) -> Watch:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ recording

    @property
    def step(self) -> int:
        """Steps seen so far (kept or not) = the number of the next step."""
        return self.kept.count

    @property
    def recording(self) -> bool:
        """Whether the watch reads steps (open). Every step is read; :class:`KeptSteps` decides
        which are kept."""
        return not self.closed

    # ------------------------------------------------------------------ reading

    @property
    def steps(self) -> list[int]:
        """The step numbers kept (ascending)."""
        return self.kept.steps

    @property
    def arrival_order(self) -> dict[int, int]:
        """``{column: position}``: where in a backward each name's gradient first arrived (smaller =
        nearer the loss), over the kept steps; names that never got one are missing."""
        return self.kept.order

    @property
    def history(self) -> History:
        """The kept steps as a :class:`History` (``.to_pandas()`` when pandas is installed); a
        consistent copy also while another thread trains."""
        return self.kept.history(
            self.names, self.kinds, self.optimizer_steps is not None, self._numels(), self.module_types
        )

    def _row(self, step: int | None) -> tuple[int, torch.Tensor]:
        found = self.kept.row(step)  # a copy, consistent while another thread trains and thins
        if found is not None:
            return found
        steps = self.kept.steps
        if not steps:
            raise WatchError(
                "no step recorded yet: run the training loop's loss.backward() while the watch is "
                "open (a forward alone, or a backward that does not reach the model, is not a step)"
            )
        near = sorted(steps, key=lambda s: abs(s - step))[:3] if type(step) is int else []
        raise WatchError(
            f"step {step!r} is not kept (kept: {len(steps)} steps from "
            f"{steps[0]} to {steps[-1]}); nearest kept: {sorted(near)}"
        )

    def norms(self, step: int | None = None, kind: str | None = None) -> dict[str, float]:
        """``{parameter or module name: gradient norm}`` at ``step`` (None = the last kept step).

        Parameters by qualified name (``"fc1.weight"``), modules by qualified name (``""`` = the
        root module; the norm of the gradient w.r.t. its output). ``kind="parameter"`` or
        ``"output"`` keeps one of the two. Names that got no gradient in that step are left out.
        This is what the widget colours the graph by.

        Args:
            step: a kept step number (see ``steps``); None for the last kept.
            kind: ``"parameter"``, ``"output"`` or None for both.

        Raises:
            WatchError: no step recorded, ``step`` not an int or not kept, or an unknown ``kind``.
        """
        if kind not in (None, "parameter", "output"):
            raise WatchError(f"kind={kind!r} must be None, 'parameter' or 'output'")
        _, row = self._row(step)
        norms, nonfinite = row[:, COLUMN["norm"]].tolist(), row[:, COLUMN["nonfinite"]].tolist()
        return {
            n: norm
            for n, k, norm, bad in zip(self.names, self.kinds, norms, nonfinite)
            if kind in (None, k) and (not math.isnan(norm) or bad > 0)
        }

    def update_ratios(self, step: int | None = None) -> dict[str, float]:
        """``{parameter name: ‖w_after - w_before‖ / ‖w_after‖}`` of the update ``step`` (None = the
        last kept) made, per parameter it updated: the learning-rate diagnostic (healthy near 1e-3).
        Empty without ``optimizer=``, for a skipped step and a norms-only step (``stats_every``).

        Args:
            step: a kept step number; None for the last kept.
        """
        step, _ = self._row(step)
        ratios = self.kept.ratios(step)[: len(self.parameter_names)]
        return {n: r for n, r in zip(self.parameter_names, ratios) if not math.isnan(r)}

    def learning_rates(self, step: int | None = None) -> list[float]:
        """Each param group's learning rate at ``step`` (None = the last kept), read before the
        optimizer stepped; empty without ``optimizer=``.

        Args:
            step: a kept step number; None for the last kept.
        """
        return list(self._step_info(self._row(step)[0]).learning_rates)

    def step_optimizer(self, step: int | None = None) -> str | None:
        """The name of the optimizer whose ``step()`` kept step ``step`` is (its class, with its place
        in ``optimizer=[...]`` when several share a class); None without ``optimizer=``.

        Args:
            step: a kept step number; None for the last kept.
        """
        return self._step_info(self._row(step)[0]).optimizer or None

    @property
    def skipped_steps(self) -> list[int]:
        """The kept steps the ``GradScaler`` skipped (Inf/NaN found; ``optimizer.step()`` never ran)."""
        return self.kept.skipped()

    def loss_scale(self, step: int | None = None) -> float | None:
        """The ``GradScaler``'s scale at ``step`` (None = the last kept); None without one (given as
        ``scaler=``, or the one an accelerate optimizer holds; never guessed).

        Args:
            step: a kept step number; None for the last kept.
        """
        scale = self._step_info(self._row(step)[0]).loss_scale
        return None if math.isnan(scale) else scale

    def _step_info(self, step: int) -> StepInfo:
        return self.kept.info(step)

    def layer_norms(self, step: int | None = None) -> dict[str, float]:
        """``{module name: 2-norm of its parameters' gradients}`` at ``step``, nearest the loss first
        (layers as a run's: :func:`hookviz.analysis.step_findings.step_layers`).

        Args:
            step: a kept step number; None for the last kept.
        """
        _, row = self._row(step)
        layers = step_layers(self.parameter_names, self._numels(), row.tolist(), self.kept.order)
        return {layer: norm for layer, (norm, _) in layers.items()}

    def diagnose(self, step: int | None = None, group: bool = True, **thresholds: float) -> list[Finding]:
        """Findings at ``step`` (None = the last kept step) from the recorded statistics.

        Vanishing, exploding and dead updates per layer by a run's rules and thresholds
        (:func:`hookviz.analysis.step_findings.step_findings`: a layer's zero fraction weighted by
        its parameters' sizes, an Embedding's zeros exempt), dead outputs (a module whose output
        gradient is at least ``dead`` exactly zero) and NaN/Inf (the first name, in the order
        gradients arrived in backward, whose gradient holds NaN/Inf). At a step that kept only
        norms (``stats_every``), a parameter's zero fraction is that of the last kept step that
        measured it. With ``optimizer=``, layers updated far too much or too little for their
        weights (:func:`hookviz.analysis.step_findings.update_findings`). Saturation needs forward
        values, which a watch does not keep.

        Args:
            step: a kept step number (see ``steps``); None for the last kept.
            group: one finding per run of layers in a row with the same problem, with its range
                (as :func:`hookviz.analysis.diagnose.diagnose`); False gives one per layer.
            **thresholds: any of ``vanishing``, ``exploding``, ``exploding_norm``, ``dead``,
                ``update_ratio_high``, ``update_ratio_low`` (as :func:`hookviz.analysis.diagnose.diagnose`).

        Raises:
            WatchError: no step recorded, ``step`` not an int or not kept; HookvizError: a bad threshold.
        """
        limits = check_thresholds(thresholds)
        step, row = self._row(step)
        scale = self._step_info(step).loss_scale
        if self.optimizer_steps is None and scale > 0 and math.isfinite(scale):
            # the gradients carry GradScaler's scale: a norm is an explosion only once divided by it
            limits["exploding_norm"] *= scale
        values, ratios = self.kept.values(step, row)
        if self.optimizer_steps is not None:  # exploding / vanishing read the norms before clipping
            for column, norm in enumerate(self.kept.pre_clip(step)[: len(self.parameter_names)]):
                if not math.isnan(norm):
                    values[column][0] = norm
        findings = step_findings(
            self.names,
            self.kinds,
            self._numels(),
            self.module_types,
            values,
            self.kept.order,
            limits,
            step,
            group,
            ratios,
        )
        if any(f.kind == "exploding" for f in findings) and self.looks_scaled():
            findings = [
                dataclasses.replace(f, message=f"{f.message} ({SCALE_NOTE})") if f.kind == "exploding" else f
                for f in findings
            ]
        return findings

    def _numels(self) -> list[int]:
        """Each watched parameter's element count (kept at close, when the parameters are let go)."""
        if self.model is None:
            return self._closed_numels
        return self.columns.numels()

    # ------------------------------------------------------------------ plots

    def heatmap(self, kind: str = "parameter", statistic: str = "norm") -> Figure:
        """A plotly heatmap, names x steps, of ``statistic`` per name and step.

        Args:
            kind: ``"parameter"`` or ``"output"``.
            statistic: ``"norm"`` or ``"max_abs"`` (drawn as log10), ``"zero_fraction"`` or
                ``"nonfinite"`` (as they are).

        Returns:
            a ``plotly.graph_objects.Figure``.

        Raises:
            WatchError: no step recorded, or an unknown ``kind`` or ``statistic``.
        """
        return plots.heatmap(self._history_or_error(), kind, statistic)

    def lines(self, names: Sequence[str] | None = None, statistic: str = "norm") -> Figure:
        """A plotly line chart of ``statistic`` over steps, log y axis for norms.

        Args:
            names: parameter or module names; None for every layer's first parameter.
            statistic: as for :meth:`heatmap`.

        Raises:
            WatchError: no step recorded, an unknown name or ``statistic``.
        """
        return plots.lines(self._history_or_error(), self.parameter_names, names, statistic)

    def diagnosis_over_time(self, **thresholds: float) -> Figure:
        """A plotly scatter of the findings of every kept step: x = step, y = module, colour = kind.

        Args:
            **thresholds: as for :meth:`diagnose`."""
        history = self._history_or_error()
        findings = [f for step in history.steps for f in self.diagnose(step, group=False, **thresholds)]
        return plots.diagnosis_over_time(findings)

    def onset(self, **thresholds: float) -> list[Finding]:
        """Since when and where: the first kept step of each kind of finding :meth:`diagnose` makes,
        and the places that had it then (:func:`~hookviz.analysis.onset.onsets`).

        Args:
            **thresholds: as :meth:`diagnose` takes them (``vanishing``, ``exploding_norm``, ``dead``, ...).

        Raises:
            WatchError: no step was kept yet.
            HookvizError: an unknown or out-of-range threshold.
        """
        return onsets(self._history_or_error(), self.arrival_order, **thresholds)

    def gather(self, dst: int = 0, group: ProcessGroup | None = None) -> watch_gather.RankHistory | None:
        """Bring every rank's history to rank ``dst``; a collective, call it on every rank.

        Returns a :class:`~hookviz.watching.gather.RankHistory` on ``dst`` (also ``self.gathered``,
        which :func:`hookviz.save` writes), None elsewhere; see :mod:`hookviz.watching.gather`.

        Args:
            dst: the rank that receives the history.
            group: the ``torch.distributed`` process group; None for the default one.

        Raises:
            WatchError: no process group, or the ranks watch different names.
        """
        self.gathered = watch_gather.gather(self, dst, group)
        return self.gathered

    def rank_history(self, run: Run | None = None) -> watch_gather.RankHistory:
        """What :func:`hookviz.save` writes for this watch: the gathered history (after
        :meth:`gather`, on ``dst``) or else this process's, as a
        :class:`~hookviz.watching.gather.RankHistory`.

        Args:
            run: a :class:`hookviz.Run` of the same model to keep with it, so that
                ``hookviz.show(hookviz.load(path))`` draws the norms on its graph.

        Raises:
            WatchError: no step was recorded.
        """
        self._row(None)
        history = self.gathered if self.gathered is not None else watch_gather.from_watch(self)
        return dataclasses.replace(history, run=run) if run is not None else history

    def _history_or_error(self) -> History:
        self._row(None)
        return self.history

    def __repr__(self) -> str:
        return (
            f"Watch({self.model_name}, every={self.every}, steps={self.step}, "
            f"kept={len(self.kept)}, names={len(self.names)}, "
            f"{'closed' if self.closed else 'open'})"
        )


def watch(
    model: torch.nn.Module,
    every: int = 1,
    *,
    parameters: bool = True,
    outputs: bool = False,
    capacity: int = 1024,
    optimizer: torch.optim.Optimizer | Sequence[torch.optim.Optimizer] | None = None,
    scaler: torch.amp.GradScaler | None = None,
    stats_every: int = STATS_EVERY,
    path: str | os.PathLike | None = None,
    save_every_seconds: float = watch_autosave.SAVE_EVERY_SECONDS,
) -> Watch:
    """Watch the gradients of ``model`` over training steps (see :mod:`hookviz.watching.watch`).

    Args:
        model: the model being trained.
        every: record every ``every``-th step (every backward that reaches the model is a step).
        parameters: record each parameter's gradient (its ``.grad`` once this backward accumulated).
        outputs: also record the gradient w.r.t. each module's output (a Python hook per module
            output per step: opt-in, it costs more than the parameters' statistics).
        capacity: steps kept before thinning (see the module docstring).
        optimizer: None (a step is one backward), a ``torch.optim.Optimizer`` or a list of them
            (a step is one ``optimizer.step()``, with the ``.grad`` it reads: accumulated, unscaled,
            clipped; :mod:`hookviz.watching.optimizer_steps`). Wrappers (accelerate, Lightning)
            are followed to the optimizer inside.
        scaler: the ``torch.amp.GradScaler`` of the loop, or None. With ``optimizer=``: the steps it
            skips are kept, marked skipped. Without: each step keeps the scale its gradients carry
            (``loss_scale(step)``), and diagnosis divides it out.
        stats_every: read every statistic of the parameters' gradients every ``stats_every`` steps,
            and only their norms on the others, unless a norm is not finite, above the
            ``exploding_norm`` threshold or exactly 0 (see the module docstring); with ``optimizer=``
            the update ratios every ``stats_every`` steps. 1: every statistic every step.
        path: write the history to this file as it trains, atomically, at most every
            ``save_every_seconds`` (default 60), at once after a NaN/Inf or exploding step, at close
            (``KeyboardInterrupt`` too) and at exit (:mod:`hookviz.watching.autosave`).
        save_every_seconds: see ``path`` (0: after every kept step).

    Returns:
        an open :class:`Watch`; use it as a context manager, or call ``close()``.

    Raises:
        WatchError: no parameter requires grad; the model already has an open watch; bad arguments.
        PathError: ``path`` names no file, or its folder does not exist.

    For example:

    ```python
    with hookviz.watch(model) as w:
        for x, y in data:
            optimizer.zero_grad()
            loss_fn(model(x), y).backward()
            optimizer.step()
    w.heatmap().show()
    ```
    """
    return Watch(
        model,
        every,
        parameters=parameters,
        outputs=outputs,
        capacity=capacity,
        optimizer=optimizer,
        scaler=scaler,
        stats_every=stats_every,
        path=path,
        save_every_seconds=save_every_seconds,
    )
