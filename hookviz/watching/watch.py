"""Watch gradients over a real training loop, cheaply: per step, per parameter and per module output.

``with hookviz.watch(model) as w:`` registers, on the user's model,

- a forward hook on the model, which puts a Node pre-hook (``Node.register_prehook``) on the Node
  that made each of its output tensors (a ``Tensor.register_hook`` on an output that is a leaf).
  That hook returns None (the gradient is unchanged); the first time it runs in a backward (a
  graph task, ``torch._C._current_graph_task_id``) it notes which ``.grad`` each parameter holds and
  queues a callback (``Variable._execution_engine.queue_callback``) that runs when that backward
  ends. The callback reads every parameter's ``.grad`` that this backward accumulated into (a new
  tensor, or a new version of the old one) and reduces them all at once, in a few batched torch
  calls per device and dtype (:mod:`hookviz.watching.reduce`, :mod:`hookviz.stats.reduce`): no
  Python runs per parameter gradient during the backward.
- with ``outputs=True`` (opt-in: a Python hook per module output per step costs more than the
  reductions), a forward hook on every module that puts such a Node pre-hook on each of the
  module's output tensors, handing the gradient w.r.t. that output to the step's reduction. A Node
  pre-hook runs after every tensor hook on that output, so the watch sees the gradient the Node
  receives, after the user's tensor hooks wherever they were registered.

No full backward hook is used: its identity Nodes change the order in which autograd sums
gradients, and forward hooks, tensor hooks and Node pre-hooks leave every gradient bit-identical
(``docs/architecture.md``).

A *step* is one backward that went through the model's output. Each backward is its own step with
its own state (two threads backpropagating at once, a second backward through a retained graph, a
second loss), and it is counted when it ends. The Node hooks live on the graph that a forward built
and go with it; the watch keeps their handles (so that :meth:`Watch.close` removes them) only while
the graph lives.

Statistics per name and step: ``norm`` (2-norm), ``max_abs``, ``nonfinite`` (NaN + Inf count) and
``zero_fraction`` (exactly-zero elements). Norms are read every step; a parameter's other three
every ``stats_every`` steps (steps whose number is a multiple of it, step 0 first) and at once on
any step where a parameter's norm is not finite, above the ``exploding_norm`` threshold or exactly 0,
so no NaN, explosion or dead gradient goes unmeasured. On the other steps ``max_abs`` and
``zero_fraction`` are NaN (not measured) and ``nonfinite`` 0 (a finite norm proves there is none);
:attr:`History.full_steps` lists the steps that have every statistic.

A parameter's statistics are those of its ``.grad`` once this backward has accumulated into it
(accumulated over backwards when the loop does not zero it, as the optimizer sees it); a module's
are those of the gradient w.r.t. its output tensors, taken together over all its calls in the step.

Memory is bounded: ``capacity`` steps are kept; when full, every other kept step is dropped and
from then on only every other step is recorded (so a long run is kept whole, at half resolution,
and so on). ``every=k`` records every k-th step from the start.

Limits: a backward that does not pass through an output of ``model(...)`` (a submodule called on
its own) is not a step; ``torch.autograd.grad`` does not fill ``.grad``, so it records module
outputs only. A parameter that is replaced (``model.fc.weight = nn.Parameter(...)``, or with its
module: ``model.fc = nn.Linear(...)``) is followed to its new tensor; a parameter or module added
after the watch opened is not watched, and the next forward of the model warns, naming it.
Parameter names are listed nearest the loss first in definition order reversed (the watch does not
see the order in which ``.grad`` is accumulated).
"""

from __future__ import annotations

import dataclasses
import math
import threading
import warnings
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial

import torch
from torch.utils.hooks import RemovableHandle

from hookviz.analysis.diagnose import DEFAULT_THRESHOLDS, check_thresholds
from hookviz.analysis.findings import Finding
from hookviz.analysis.step_findings import step_findings, step_layers
from hookviz.errors import WatchError
from hookviz.stats.reduce import Measured, summary_of
from hookviz.watching import gather as watch_gather
from hookviz.watching import hooks as watch_hooks
from hookviz.watching import plots
from hookviz.watching.history import STATISTICS, History
from hookviz.watching.reduce import StepReducer

# Backwards whose end has not come yet, at most: one that raised never ends, and is dropped when
# this many newer ones have begun.
_PENDING_BACKWARDS = 32
# A watch's default stats_every: every statistic every this many steps, norms on the others (the
# cost of a step that reads every statistic is measured by `python -m benchmarks`, docs/perf.md).
STATS_EVERY = 16
# id(model) -> the open Watch on it (weakly): one watch per model at a time.
_OPEN: dict[int, weakref.ref] = {}


@dataclass
class _Backward:
    """What one backward (graph task) through the watched model has left so far.

    Attributes:
        recording: whether this backward is a recorded step.
        before: per parameter column, ``(.grad, its _version)`` when the backward reached the
            model: a ``.grad`` that differs at the end was accumulated by this backward.
        reducer: the module-output gradients (and, at the end, the parameters' ``.grad``).
        arrived: columns in the order their gradients arrived (module outputs).
        local: DDP / FSDP2: ``(column, statistics queued before the all-reduce)``.
    """

    recording: bool
    before: list[tuple[object, int]]
    reducer: StepReducer = field(default_factory=StepReducer)
    arrived: list[int] = field(default_factory=list)
    local: list[tuple[int, Measured]] = field(default_factory=list)


class Watch:
    """Gradient statistics of a model over training steps; see the module docstring.

    Use :func:`watch` to make one. It is a context manager; :meth:`close` removes every hook it
    added (also when the ``with`` body raises). Reading: :attr:`history`, :meth:`norms`,
    :meth:`diagnose`; plots: :meth:`heatmap`, :meth:`lines`, :meth:`diagnosis_over_time`.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        every: int = 1,
        *,
        parameters: bool = True,
        outputs: bool = False,
        capacity: int = 1024,
        stats_every: int = STATS_EVERY,
    ):
        if not isinstance(model, torch.nn.Module):
            raise WatchError(f"watch() needs a torch.nn.Module, got {type(model).__name__}")
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise WatchError(f"every={every!r} must be a positive int (1 = every step)")
        if isinstance(stats_every, bool) or not isinstance(stats_every, int) or stats_every < 1:
            raise WatchError(
                f"stats_every={stats_every!r} must be a positive int (1 = every statistic every step)"
            )
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 2:
            raise WatchError(f"capacity={capacity!r} must be an int of at least 2 (steps kept)")
        if not parameters and not outputs:
            raise WatchError("parameters=False and outputs=False leaves nothing to watch: keep one")
        trainable = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        if not trainable:
            raise WatchError(
                f"{type(model).__name__} has no parameter that requires grad, so training it makes no "
                "gradients to watch; set requires_grad=True on the parameters you train (or unfreeze them)"
            )
        previous = _OPEN.get(id(model))
        if previous is not None and previous() is not None and not previous().closed:
            raise WatchError(
                f"{type(model).__name__} is already watched by an open watch; close it first "
                "(watch.close(), or open watches with `with hookviz.watch(model) as w:` so they close)"
            )
        self.model = model
        self.every = every
        self.capacity = capacity
        self.stats_every = stats_every
        self.parameter_names = [n for n, _ in trainable] if parameters else []
        modules = list(model.named_modules()) if outputs else []
        self.module_names = [n for n, _ in modules]
        self.module_types = {n: type(m).__name__ for n, m in model.named_modules()}
        self.names = self.parameter_names + self.module_names
        self.kinds = ["parameter"] * len(self.parameter_names) + ["output"] * len(self.module_names)
        self.step = 0  # backwards seen so far = the number of the next step
        self.closed = False
        self._stride = 1
        self._rows = torch.full((capacity, len(self.names), len(STATISTICS)), math.nan, dtype=torch.float64)
        self._steps: list[int] = []
        self._order: dict[int, int] = {}  # column -> position at which its gradient first arrived
        # Each parameter column's owner and attribute name, to follow a replaced parameter.
        self._parameters = [p for _, p in trainable] if parameters else []
        self._owners = [_owner(model, n) for n in self.parameter_names]
        self._structure = _structure(model)  # to notice parameters and modules added or replaced
        self._backwards: dict[int, _Backward] = {}  # graph task id -> its state
        self._lock = threading.Lock()
        # add_step_listener: handle id -> listener (an OrderedDict, as RemovableHandle needs)
        self._listeners: OrderedDict[int, object] = OrderedDict()
        self._handles: list = []  # hooks on the model, removed on close
        self._graph_handles: list = []  # hooks on the graphs of forwards, while those live
        self._graph_handles_kept = 64  # prune dead graph handles when there are twice this many
        self._warned: set[str] = set()  # names already named in a warning
        self._hooked_modules: list[torch.nn.Module] = []
        self._ranks: watch_gather.RankRecorder | None = None
        self.gathered: watch_gather.RankHistory | None = None  # set by gather() on dst
        try:
            # DDP / FSDP2: local statistics before the all-reduce, reduced ones after (watch_gather)
            self._ranks = watch_gather.attach(
                self,
                model,
                trainable if parameters else [],
                partial(watch_hooks.parameter_hook, weakref.ref(self)),
                self._handles,
                _reduce_pairs,
            )
            if self._ranks is not None:
                for column, parameter in enumerate(self._parameters):
                    hook = watch_hooks.parameter_hook(weakref.ref(self), column)
                    self._handles.append(parameter.register_post_accumulate_grad_hook(hook))
            self._handles.append(
                model.register_forward_hook(partial(watch_hooks.on_model_forward, weakref.ref(self)))
            )
            self._hooked_modules = [module for _, module in modules]
            for offset, (_, module) in enumerate(modules):
                self._handles.append(
                    module.register_forward_hook(
                        partial(watch_hooks.on_forward, weakref.ref(self), len(self.parameter_names) + offset)
                    )
                )
        except BaseException:
            self.close()
            raise
        _OPEN[id(model)] = weakref.ref(self)
        weakref.finalize(self, _remove, self._handles, self._graph_handles)

    # ------------------------------------------------------------------ lifetime

    def close(self) -> None:
        """Remove every hook this watch added to the model and to live graphs (idempotent). The
        history stays."""
        already = self.closed
        self.closed = True
        _remove(self._handles, self._graph_handles)
        self._backwards = {}
        if _OPEN.get(id(self.model), lambda: None)() is self:
            del _OPEN[id(self.model)]
        if not already:
            self._tell_listeners(None, None)

    def add_step_listener(self, listener) -> RemovableHandle:
        """Call ``listener(step, row)`` each time a recorded step is kept, and ``listener(None,
        None)`` once when the watch closes. A live view subscribes here.

        ``step`` is the step's number; ``row`` its statistics, a float64 CPU tensor of shape
        ``[len(watch.names), 4]`` whose columns are ``norm, max_abs, nonfinite, zero_fraction``
        (NaN where a name got no gradient). The listener runs on the thread that ran the
        backward, at its end, before ``backward()`` returns: it must be quick (hand the work to
        another thread) and must not call backward. An exception in it is turned into a
        warning, so it never breaks the training step.

        Returns:
            a ``torch.utils.hooks.RemovableHandle``; ``handle.remove()`` unsubscribes.
        """
        handle = RemovableHandle(self._listeners)
        self._listeners[handle.id] = listener
        return handle

    def _tell_listeners(self, step: int | None, row: torch.Tensor | None) -> None:
        for listener in list(self._listeners.values()):
            try:
                listener(step, row)
            except Exception as error:  # a viewer's bug must not break the user's training step
                warnings.warn(
                    f"hookviz watch listener {listener!r} failed: {error!r}", RuntimeWarning, stacklevel=2
                )

    def __enter__(self) -> Watch:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ recording

    @property
    def recording(self) -> bool:
        """Whether the current step (the next backward) will be recorded."""
        return not self.closed and self.step % (self.every * self._stride) == 0

    def _begin(self) -> _Backward | None:
        """Called by every hook during backward: this backward's state (None once closed)."""
        task = torch._C._current_graph_task_id()
        state = self._backwards.get(task)
        if state is None and not self.closed:
            with self._lock:  # hooks of one backward may run on several autograd threads
                state = self._backwards.get(task) or self._new_backward(task)
        return state

    def _new_backward(self, task: int) -> _Backward:
        """The first hook of backward ``task`` ran: note each parameter's ``.grad`` and queue the
        end-of-backward callback."""
        self._follow_replaced()
        before = [] if self._ranks is not None else [_grad_and_version(p) for p in self._parameters]
        state = _Backward(self.recording, before)
        if len(self._backwards) >= _PENDING_BACKWARDS:  # the oldest is one that raised: never a step
            del self._backwards[next(iter(self._backwards))]
        self._backwards[task] = state
        torch.autograd.Variable._execution_engine.queue_callback(
            partial(watch_hooks.finish, weakref.ref(self), task)
        )
        return state

    def _check_structure(self) -> None:
        """Called at each forward of the model: when a module gained or lost a parameter or a
        submodule since the watch opened (or the last check), follow the columns' parameters to
        their modules now and warn, naming what this watch cannot see."""
        for module, parameters, children in self._structure:
            if len(module._parameters) != parameters or tuple(module._modules.values()) != children:
                break
        else:
            return
        self._structure = _structure(self.model)
        owners = dict(self.model.named_modules())
        for column, name in enumerate(self.parameter_names):  # a replaced module's parameters
            path, _, attribute = name.rpartition(".")
            if path in owners and attribute in owners[path]._parameters:
                self._owners[column] = (owners[path], attribute)
        unseen: dict[str, str] = {}  # name -> "parameter" or "module"
        if self.parameter_names:
            watched = set(self.parameter_names)
            for name, parameter in self.model.named_parameters():
                if parameter.requires_grad and name not in watched:
                    unseen[name] = "parameter"
        if self.module_names:
            hooked = set(map(id, self._hooked_modules))
            unseen.update((name, "module") for name, m in owners.items() if id(m) not in hooked)
        new = {name: kind for name, kind in unseen.items() if name not in self._warned}
        if new:
            self._warned.update(new)
            listed = ", ".join(f"{kind} {name!r}" for name, kind in new.items())
            one = len(new) == 1
            warnings.warn(
                f"hookviz.watch: {listed} of {type(self.model).__name__} {'was' if one else 'were'} "
                f"added or replaced after the watch opened and {'is' if one else 'are'} not watched; "
                "close this watch and open a new one (hookviz.watch(model)) to watch "
                f"{'it' if one else 'them'}",
                stacklevel=3,
            )

    def _follow_replaced(self) -> None:
        """Point a column whose parameter was replaced on its module at the new one."""
        for column, (owner, attribute) in enumerate(self._owners):
            current = owner._parameters.get(attribute)
            if current is not self._parameters[column] and current is not None:
                self._parameters[column] = current

    def _finish(self, task: int) -> None:
        """End of backward ``task``: reduce what it left, store one row, count the step."""
        state = self._backwards.pop(task, None)
        if state is None or self.closed:
            return
        row = self._row_of(state) if state.recording else None
        with self._lock:  # the step's number and its row are kept together
            step = self.step
            self.step += 1
            if row is None:
                return
            kept = self._store(step, row)
            if len(self._order) < len(self.names):  # once every column has a place, none moves
                arrived = state.arrived + [
                    c for c in reversed(range(len(self.parameter_names))) if not math.isnan(row[c, 0])
                ]
                for position, column in enumerate(arrived):
                    self._order.setdefault(column, position)
        if self._ranks is not None:
            self._ranks.finish(step)
        if kept and self._listeners:
            self._tell_listeners(step, row)

    def _row_of(self, state: _Backward) -> torch.Tensor:
        """The ``[names, 4]`` row of one ended backward: every ``.grad`` it accumulated into and the
        module-output gradients its hooks handed over, reduced together."""
        columns, grads = [], []
        for column, (parameter, (grad, version)) in enumerate(zip(self._parameters, state.before)):
            now = parameter.grad
            if now is not None and (now is not grad or now._version != version) and now.numel():
                columns.append(column)
                grads.append(now)
        if grads:
            full = self.step % self.stats_every == 0
            state.reducer.add_all(columns, grads, full, DEFAULT_THRESHOLDS["exploding_norm"])
        row = state.reducer.finish(len(self.names))
        if state.local:  # DDP / FSDP2: parameters measured in their hooks, before the all-reduce
            for column, values in measure_rows(state.local).items():
                row[column] = torch.tensor(values, dtype=torch.float64)
        return row

    def _keep_graph_handle(self, handle) -> None:
        """Keep a hook handle on a forward's graph until that graph is freed (then its handle is
        dropped, so handles do not pile up over forwards that never see a backward)."""
        handles = self._graph_handles
        handles.append(handle)
        if len(handles) > 2 * self._graph_handles_kept:
            handles[:] = [h for h in handles if h.hooks_dict_ref() is not None]
            self._graph_handles_kept = max(64, len(handles))

    def _store(self, step: int, row: torch.Tensor) -> bool:
        """Keep ``row`` as step ``step`` (thinning the kept steps when full); False when thinning
        left this step out."""
        if len(self._steps) == self.capacity:
            keep = [i for i, s in enumerate(self._steps) if s % (self.every * self._stride * 2) == 0]
            self._rows[: len(keep)] = self._rows[keep].clone()
            self._rows[len(keep) :] = math.nan
            self._steps = [self._steps[i] for i in keep]
            self._stride *= 2
            if step % (self.every * self._stride):
                return False
        self._rows[len(self._steps)] = row
        self._steps.append(step)
        return True

    # ------------------------------------------------------------------ reading

    @property
    def steps(self) -> list[int]:
        """The step numbers kept (ascending)."""
        return list(self._steps)

    @property
    def arrival_order(self) -> dict[int, int]:
        """``{column: position}``: where in a backward each name's gradient first arrived (smaller =
        nearer the loss), over the kept steps; names that never got one are missing."""
        return dict(self._order)

    @property
    def history(self) -> History:
        """The kept steps as a :class:`History` (``.to_pandas()`` when pandas is installed); a
        consistent copy also while another thread trains."""
        with self._lock:
            rows = self._rows[: len(self._steps)].clone()
            steps = list(self._steps)
        return History(
            steps,
            list(self.names),
            list(self.kinds),
            *(rows[:, :, i] for i in range(len(STATISTICS))),
        )

    def _row(self, step: int | None) -> tuple[int, torch.Tensor]:
        if not self._steps:
            raise WatchError(
                "no step recorded yet: run the training loop's loss.backward() while the watch is "
                "open (a forward alone, or a backward that does not reach the model, is not a step)"
            )
        with self._lock:  # a copy, consistent while another thread trains and thins the steps
            if step is None:
                return self._steps[-1], self._rows[len(self._steps) - 1].clone()
            if step in self._steps:
                return step, self._rows[self._steps.index(step)].clone()
        if step not in self._steps:
            near = sorted(self._steps, key=lambda s: abs(s - step))[:3]
            raise WatchError(
                f"step {step} is not kept (kept: {len(self._steps)} steps from "
                f"{self._steps[0]} to {self._steps[-1]}); nearest kept: {sorted(near)}"
            )

    def norms(self, step: int | None = None, kind: str | None = None) -> dict[str, float]:
        """``{parameter or module name: gradient norm}`` at ``step`` (None = the last kept step).

        Parameters by qualified name (``"fc1.weight"``), modules by qualified name (``""`` = the
        root module; the norm of the gradient w.r.t. its output). ``kind="parameter"`` or
        ``"output"`` keeps one of the two. Names that got no gradient in that step are left out.
        This is what the widget colours the graph by.
        """
        if kind not in (None, "parameter", "output"):
            raise WatchError(f"kind={kind!r} must be None, 'parameter' or 'output'")
        _, row = self._row(step)
        return {
            n: norm
            for n, k, (norm, _, nonfinite, _) in zip(self.names, self.kinds, row.tolist())
            if kind in (None, k) and (not math.isnan(norm) or nonfinite > 0)
        }

    def layer_norms(self, step: int | None = None) -> dict[str, float]:
        """``{module name: 2-norm of its parameters' gradients}`` at ``step``, nearest the loss first
        (layers as a run's: :func:`hookviz.analysis.step_findings.step_layers`)."""
        _, row = self._row(step)
        layers = step_layers(self.parameter_names, self._numels(), row.tolist(), self._order)
        return {layer: norm for layer, (norm, _) in layers.items()}

    def diagnose(self, step: int | None = None, group: bool = True, **thresholds: float) -> list[Finding]:
        """Findings at ``step`` (None = the last kept step) from the recorded statistics.

        ``group``: one finding per run of layers in a row with the same problem, with its range
        (as :func:`hookviz.analysis.diagnose.diagnose`); False gives one per layer.

        Vanishing, exploding and dead updates per layer by a run's rules and thresholds
        (:func:`hookviz.analysis.step_findings.step_findings`: a layer's zero fraction weighted by
        its parameters' sizes, an Embedding's zeros exempt), dead outputs (a module whose output
        gradient is at least ``dead`` exactly zero) and NaN/Inf (the first name, in the order
        gradients arrived in backward, whose gradient holds NaN/Inf). At a step that kept only
        norms (``stats_every``), a parameter's zero fraction is that of the last kept step that
        measured it. Saturation needs forward values, which a watch does not keep.
        """
        limits = check_thresholds(thresholds)
        step, row = self._row(step)
        values = row.tolist()
        unmeasured = [c for c, v in enumerate(values) if math.isnan(v[3]) and not math.isnan(v[0])]
        if unmeasured:  # a step that kept only norms: the zeros of the last step that measured them
            with self._lock:
                kept = [i for i, s in enumerate(self._steps) if s <= step]
                for column in unmeasured:
                    earlier = self._rows[kept, column, 3]
                    measured = earlier[~earlier.isnan()]
                    if measured.numel():
                        values[column][3] = measured[-1].item()
        return step_findings(
            self.names,
            self.kinds,
            self._numels(),
            self.module_types,
            values,
            self._order,
            limits,
            step,
            group,
        )

    def _numels(self) -> list[int]:
        return [p.numel() for p in self._parameters]

    # ------------------------------------------------------------------ plots

    def heatmap(self, kind: str = "parameter", statistic: str = "norm"):
        """A plotly heatmap, names x steps, of log10 of ``statistic`` (``"norm"`` or ``"max_abs"``;
        ``"zero_fraction"`` and ``"nonfinite"`` as they are). ``kind``: ``"parameter"`` or ``"output"``."""
        return plots.heatmap(self._history_or_error(), kind, statistic)

    def lines(self, names: Sequence[str] | None = None, statistic: str = "norm"):
        """A plotly line chart of ``statistic`` over steps for ``names`` (default: every layer's
        first parameter), log y axis for norms."""
        return plots.lines(self._history_or_error(), self.parameter_names, names, statistic)

    def diagnosis_over_time(self, **thresholds: float):
        """A plotly scatter of the findings of every kept step: x = step, y = module, colour = kind."""
        history = self._history_or_error()
        findings = [f for step in history.steps for f in self.diagnose(step, group=False, **thresholds)]
        return plots.diagnosis_over_time(findings)

    def gather(self, dst: int = 0, group=None) -> watch_gather.RankHistory | None:
        """Bring every rank's history to rank ``dst``; a collective, call it on every rank.

        Returns a :class:`~hookviz.watching.gather.RankHistory` on ``dst`` (also kept as
        ``self.gathered``, which :meth:`save` writes), None elsewhere. Cost and findings: see
        :mod:`hookviz.watching.gather`. Raises WatchError without a process group or when the ranks
        watch different names.
        """
        self.gathered = watch_gather.gather(self, dst, group)
        return self.gathered

    def rank_history(self, run=None) -> watch_gather.RankHistory:
        """What :func:`hookviz.save` writes for this watch: the gathered history (after
        :meth:`gather`, on ``dst``) or else this process's, as a
        :class:`~hookviz.watching.gather.RankHistory`.

        ``run``: a :class:`hookviz.Run` of the same model to keep with it, so that
        ``hookviz.show(hookviz.load(path))`` draws the norms on its graph. Raises WatchError when
        no step was recorded.
        """
        self._row(None)
        history = self.gathered if self.gathered is not None else watch_gather.from_watch(self)
        return dataclasses.replace(history, run=run) if run is not None else history

    def _history_or_error(self) -> History:
        self._row(None)
        return self.history

    def __repr__(self) -> str:
        return (
            f"Watch({type(self.model).__name__}, every={self.every}, steps={self.step}, "
            f"kept={len(self._steps)}, names={len(self.names)}, "
            f"{'closed' if self.closed else 'open'})"
        )


def watch(
    model: torch.nn.Module,
    every: int = 1,
    *,
    parameters: bool = True,
    outputs: bool = False,
    capacity: int = 1024,
    stats_every: int = STATS_EVERY,
) -> Watch:
    """Watch the gradients of ``model`` over training steps (see :mod:`hookviz.watching.watch`).

    Args:
        model: the model being trained.
        every: record every ``every``-th step (every backward that reaches the model is a step).
        parameters: record each parameter's gradient (its ``.grad`` once this backward accumulated).
        outputs: also record the gradient w.r.t. each module's output (a Python hook per module
            output per step: opt-in, it costs more than the parameters' statistics).
        capacity: steps kept before thinning (see the module docstring).
        stats_every: read every statistic of the parameters' gradients every ``stats_every`` steps,
            and only their norms on the others, unless a norm is not finite, above the
            ``exploding_norm`` threshold or exactly 0 (see the module docstring). 1: every
            statistic every step.

    Returns:
        an open :class:`Watch`; use it as a context manager, or call ``close()``.

    Raises:
        WatchError: no parameter requires grad; the model already has an open watch; bad arguments.

    Example::

        with hookviz.watch(model) as w:
            for x, y in data:
                optimizer.zero_grad()
                loss_fn(model(x), y).backward()
                optimizer.step()
        w.heatmap().show()
    """
    return Watch(
        model, every, parameters=parameters, outputs=outputs, capacity=capacity, stats_every=stats_every
    )


# ---------------------------------------------------------------------------- helpers


def _remove(handles: list, graph_handles: list) -> None:
    for handle in handles:
        handle.remove()
    handles.clear()
    for handle in graph_handles:
        handle.remove()
    graph_handles.clear()


def _owner(model: torch.nn.Module, name: str) -> tuple[torch.nn.Module, str]:
    """The module that holds parameter ``name`` and its attribute name there."""
    path, _, attribute = name.rpartition(".")
    return model.get_submodule(path), attribute


def _structure(model: torch.nn.Module) -> list[tuple[torch.nn.Module, int, tuple]]:
    """Each module with its parameter count and its submodules: what :meth:`Watch._check_structure`
    compares."""
    return [(m, len(m._parameters), tuple(m._modules.values())) for m in model.modules()]


def _grad_and_version(parameter: torch.Tensor) -> tuple[object, int]:
    grad = parameter.grad
    return grad, (-1 if grad is None else grad._version)


def _reduce_pairs(pairs: list[tuple[int, torch.Tensor]], width: int) -> torch.Tensor:
    """A ``[width, 4]`` row of ``(column, gradient)`` pairs (DDP / FSDP2's reduced ``.grad``)."""
    return StepReducer()(pairs, width)


def measure_rows(local: list[tuple[int, Measured]]) -> dict[int, tuple]:
    """``{column: (norm, max_abs, nonfinite, zero_fraction)}`` of statistics queued in hooks."""
    return {column: summary_of(measured.rows()[0]) for column, measured in local}
