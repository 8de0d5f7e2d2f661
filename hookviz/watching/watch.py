"""Watch gradients over a real training loop, cheaply: per step, per parameter and per module output.

``with hookviz.watch(model) as w:`` registers, on the user's model,

- a ``register_post_accumulate_grad_hook`` on every parameter that requires grad: it hands the
  parameter's ``.grad``, just accumulated, to the step's reduction, and
- a forward hook on every module, which puts a Node pre-hook (``Node.register_prehook``) on the
  Node that made each of the module's output tensors (a ``Tensor.register_hook`` on an output that
  is a leaf); that hook returns None (the gradient is unchanged) and hands the gradient w.r.t. the
  output to the step's reduction. A Node pre-hook runs after every tensor hook on that output, so
  the watch sees the gradient the Node receives, after the user's tensor hooks wherever they were
  registered; it also costs less than a tensor hook (about 2 us per module per step).

Where the install built ``hookviz._fused`` (a C compiler was present), these gradient hooks are C
objects (:data:`hookviz.stats.one_pass.Sink`): they read a dense float32 / float64 CPU gradient in the
compiled pass themselves and call into Python only at the first hook of a backward and for any
other gradient. On a 20-layer MLP that takes 0.2-0.3 ms off each step (1.23-1.27x a plain step
becomes 1.19-1.22x, medians of 600 interleaved rounds in one process, 2-core CPU); the Python
hooks, kept for installs without the build and for DDP / FSDP2's parameters, record the same
numbers bit for bit.

The reduction (:mod:`hookviz.watching.reduce`) reduces a dense float32 / float64 CPU gradient at once,
in its hook; any other it keeps a reference to until it has reduced it: at the end of the
backward, or on CPU as soon as 16 MiB of them are waiting.

No full backward hook is used: its identity Nodes change the order in which autograd sums
gradients (see PRODUCT.md), and forward hooks, tensor hooks and Node pre-hooks leave every
gradient bit-identical.

A *step* is one backward that reached the model: the first hook of a backward queues a callback
(``Variable._execution_engine.queue_callback``) that runs when that backward ends and reduces what
the hooks left there in a few batched kernels and one host transfer (:mod:`hookviz.watching.reduce`).

Statistics per name and step: ``norm`` (2-norm), ``max_abs``, ``nonfinite`` (NaN + Inf count) and
``zero_fraction`` (exactly-zero elements). A parameter's are those of its ``.grad`` once this
backward has accumulated into it (accumulated over backwards when the loop does not zero it, as the
optimizer sees it; a hook of the user's that changes ``.grad`` later in the backward is not seen); a module's
are those of the gradient w.r.t. its output tensors, taken together over all its calls in the step.

Memory is bounded: ``capacity`` steps are kept; when full, every other kept step is dropped and
from then on only every other step is recorded (so a long run is kept whole, at half resolution,
and so on). ``every=k`` records every k-th step from the start. Between steps the watch keeps one
workspace copy of the gradients of up to 65,536 elements that the compiled pass does not take
(half precision, accelerators; see :mod:`hookviz.watching.reduce`).

Limits: reentrant activation checkpointing runs nested backwards, each of which counts as a step;
``torch.autograd.grad`` does not fill ``.grad``, so it records module outputs only.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Sequence
from functools import partial
from pathlib import Path

import torch
from torch.utils import _pytree as pytree

from hookviz.analysis.diagnose import Finding, check_thresholds, layer_findings
from hookviz.errors import WatchError
from hookviz.files.saving import save
from hookviz.stats import one_pass
from hookviz.watching import gather as watch_gather
from hookviz.watching.history import STATISTICS, History
from hookviz.watching.reduce import StepReducer

# id(model) -> the open Watch on it (weakly): one watch per model at a time.
_OPEN: dict[int, weakref.ref] = {}


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
        outputs: bool = True,
        capacity: int = 1024,
    ):
        if not isinstance(model, torch.nn.Module):
            raise WatchError(f"watch() needs a torch.nn.Module, got {type(model).__name__}")
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise WatchError(f"every={every!r} must be a positive int (1 = every step)")
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
        self._task: int | None = None
        self._recording_task = False  # whether the backward running now (self._task) is recorded
        self._arrived: list[int] = []  # columns in the order their hooks fired in this backward
        self._measured: list[tuple[int, torch.Tensor]] = []  # DDP / FSDP2: (column, local statistics)
        self._tensor_handles: list = []
        self._handles: list = []
        self._ranks: watch_gather.RankRecorder | None = None
        self._reducer = StepReducer()
        self.gathered: watch_gather.RankHistory | None = None  # set by gather() on dst
        # The hooks in C where the install built them (one_pass.Sink); they hold the watch weakly.
        self._sink = None
        if one_pass.Sink is not None:
            reference = weakref.ref(self)
            self._sink = one_pass.Sink(
                torch._C._current_graph_task_id,
                partial(_sink_begin, reference),
                partial(_sink_fallback, reference),
            )
            self._reducer.attach(self._sink)
        self._output_hooks: dict[tuple[int, int], object] = {}  # (column, output_nr) -> its C hook
        try:
            # DDP / FSDP2: local statistics before the all-reduce, reduced ones after (watch_gather)
            self._ranks = watch_gather.attach(
                self,
                model,
                trainable if parameters else [],
                partial(_parameter_hook, weakref.ref(self)),
                self._handles,
                self._reducer,
            )
            if parameters:
                for column, (_, parameter) in enumerate(trainable):
                    hook = (
                        self._sink.parameter_hook(column)
                        if self._sink is not None and self._ranks is None
                        else _parameter_hook(weakref.ref(self), column)
                    )
                    self._handles.append(parameter.register_post_accumulate_grad_hook(hook))
            for offset, (_, module) in enumerate(modules):
                self._handles.append(
                    module.register_forward_hook(
                        partial(_on_forward, weakref.ref(self), len(self.parameter_names) + offset)
                    )
                )
        except BaseException:
            self.close()
            raise
        _OPEN[id(model)] = weakref.ref(self)
        weakref.finalize(self, _remove, self._handles, self._tensor_handles)

    # ------------------------------------------------------------------ lifetime

    def close(self) -> None:
        """Remove every hook this watch added to the model (idempotent) and free its workspace.
        The history stays."""
        self.closed = True
        if self._sink is not None:
            self._sink.open = 0
        _remove(self._handles, self._tensor_handles)
        self._reducer.clear()
        self._arrived, self._measured, self._task = [], [], None
        self._reducer.reset()
        if _OPEN.get(id(self.model), lambda: None)() is self:
            del _OPEN[id(self.model)]

    def __enter__(self) -> Watch:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ recording

    @property
    def recording(self) -> bool:
        """Whether the current step (the next backward) will be recorded."""
        return not self.closed and self.step % (self.every * self._stride) == 0

    def _begin(self) -> bool:
        """Called by every Python hook during backward; True when this step is recorded."""
        task = torch._C._current_graph_task_id()
        if task != self._task:
            self._new_backward(task)
        return self._recording_task

    def _new_backward(self, task: int) -> None:
        """The first hook of backward ``task`` ran (a Python one, or one of the sink's)."""
        # Anything still pending is from a backward that raised before its end callback ran: it
        # is dropped, not counted as a step.
        self._task = task
        self._arrived, self._measured = [], []
        self._reducer.reset()
        torch.autograd.Variable._execution_engine.queue_callback(self._finish)
        self._recording_task = self.recording  # the step number holds still until _finish
        if self._sink is not None:
            self._sink.arrived, self._sink.recording = self._arrived, self._recording_task
            self._sink.task = task

    def _finish(self) -> None:
        """End of a backward: reduce what the hooks left, store one row, count the step."""
        arrived, measured = self._arrived, self._measured
        self._arrived, self._measured, self._task = [], [], None
        if self._sink is not None:
            self._sink.task = -2  # no backward: the next hook begins one
        for handle in self._tensor_handles:
            handle.remove()
        self._tensor_handles.clear()
        if self.recording and not self.closed:
            row = self._reducer.finish(len(self.names))
            if measured:  # DDP / FSDP2: parameters measured in their hooks, before the all-reduce
                row[[c for c, _ in measured]] = torch.stack([t for _, t in measured]).cpu()
            self._store(self.step, row)
            if len(self._order) < len(self.names):  # once every column has a place, none moves
                for position, column in enumerate(arrived):
                    self._order.setdefault(column, position)
            if self._ranks is not None:
                self._ranks.finish(self.step)
        self.step += 1

    def _output_hook(self, column: int, output_nr: int):
        """The Node pre-hook that hands ``column`` the gradient w.r.t. output ``output_nr``."""
        if self._sink is None:
            return partial(_on_output_grads, weakref.ref(self), column, output_nr)
        hook = self._output_hooks.get((column, output_nr))
        if hook is None:
            hook = self._output_hooks[column, output_nr] = self._sink.output_hook(column, output_nr)
        return hook

    def _leaf_output_hook(self, column: int):
        """The tensor hook on a module output that is a leaf (it has no Node)."""
        if self._sink is None:
            return partial(_on_output_grad, weakref.ref(self), column)
        return self._sink.tensor_hook(column)

    def _store(self, step: int, row: torch.Tensor) -> None:
        if len(self._steps) == self.capacity:
            keep = [i for i, s in enumerate(self._steps) if s % (self.every * self._stride * 2) == 0]
            self._rows[: len(keep)] = self._rows[keep].clone()
            self._rows[len(keep) :] = math.nan
            self._steps = [self._steps[i] for i in keep]
            self._stride *= 2
            if step % (self.every * self._stride):
                return
        self._rows[len(self._steps)] = row
        self._steps.append(step)

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
        """The kept steps as a :class:`History` (``.to_pandas()`` when pandas is installed)."""
        rows = self._rows[: len(self._steps)].clone()
        return History(
            list(self._steps),
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
        if step is None:
            return self._steps[-1], self._rows[len(self._steps) - 1]
        if step not in self._steps:
            near = sorted(self._steps, key=lambda s: abs(s - step))[:3]
            raise WatchError(
                f"step {step} is not kept (kept: {len(self._steps)} steps from "
                f"{self._steps[0]} to {self._steps[-1]}); nearest kept: {sorted(near)}"
            )
        return step, self._rows[self._steps.index(step)]

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
        """``{module name: 2-norm of its parameters' gradients}`` at ``step``, nearest the loss first."""
        _, row = self._row(step)
        layers: dict[str, float] = {}
        firsts: dict[str, int] = {}
        for column, name in enumerate(self.parameter_names):
            norm = row[column, 0].item()
            if math.isnan(norm) and row[column, 2].item() == 0:
                continue
            module = name.rsplit(".", 1)[0] if "." in name else ""
            layers[module] = layers.get(module, 0.0) + norm * norm
            firsts[module] = min(firsts.get(module, math.inf), self._order.get(column, math.inf))
        return {m: math.sqrt(layers[m]) for m in sorted(layers, key=lambda m: firsts[m])}

    def diagnose(self, step: int | None = None, **thresholds: float) -> list[Finding]:
        """Findings at ``step`` (None = the last kept step) from the recorded statistics.

        Vanishing, exploding and dead updates per layer (as :func:`hookviz.analysis.diagnose.diagnose`,
        same thresholds), dead outputs (a module whose output gradient is at least ``dead``
        exactly zero) and NaN/Inf (the first name, in the order gradients arrived in backward,
        whose gradient holds NaN/Inf). Saturation needs forward values, which a watch does not keep.
        """
        limits = check_thresholds(thresholds)
        step, row = self._row(step)
        found = []
        bad = [c for c in range(len(self.names)) if row[c, 2].item() > 0]
        if bad:
            first = min(bad, key=lambda c: self._order.get(c, math.inf))
            name, kind = self.names[first], self.kinds[first]
            module = (
                name.rsplit(".", 1)[0]
                if kind == "parameter" and "." in name
                else ("" if kind == "parameter" else name)
            )
            what = f"parameter {name!r}" if kind == "parameter" else f"the output of module {name!r}"
            found.append(
                Finding(
                    "nan",
                    module,
                    name,
                    (
                        f"step {step}: the gradient of {what} is the first to hold NaN/Inf "
                        f"({int(row[first, 2].item())} elements; {len(bad)} names have some); record one "
                        "run of this step with hookviz.Session(...).run().diagnose() to find the op"
                    ),
                    row[first, 2].item(),
                    step,
                )
            )
        norms = self.layer_norms(step)
        if norms:
            zero = {}
            for module in norms:
                columns = [
                    c
                    for c, n in enumerate(self.parameter_names)
                    if (n.rsplit(".", 1)[0] if "." in n else "") == module
                ]
                zero[module] = min(row[c, 3].item() for c in columns)
            node_of = {
                m: next(n for n in self.parameter_names if (n.rsplit(".", 1)[0] if "." in n else "") == m)
                for m in norms
            }
            found += layer_findings(norms, next(iter(norms)), limits, zero, node_of, self.module_types, step)
        for offset, name in enumerate(self.module_names):
            column = len(self.parameter_names) + offset
            zeros = row[column, 3].item()
            if name and not math.isnan(zeros) and zeros >= limits["dead"] and not self._has_children(name):
                found.append(
                    Finding(
                        "dead",
                        name,
                        name,
                        (
                            f"step {step}: {zeros:.0%} of the gradient w.r.t. the output of module {name!r} "
                            f"({self.module_types.get(name)}) is exactly zero: the units after it are dead"
                        ),
                        zeros,
                        step,
                    )
                )
        return found

    def _has_children(self, name: str) -> bool:
        return any(m.startswith(name + ".") for m in self.module_names)

    # ------------------------------------------------------------------ plots

    def heatmap(self, kind: str = "parameter", statistic: str = "norm"):
        """A plotly heatmap, names x steps, of log10 of ``statistic`` (``"norm"`` or ``"max_abs"``;
        ``"zero_fraction"`` and ``"nonfinite"`` as they are). ``kind``: ``"parameter"`` or ``"output"``."""
        import plotly.graph_objects as go

        history = self._history_or_error()
        if kind not in ("parameter", "output"):
            raise WatchError(f"kind={kind!r} must be 'parameter' or 'output'")
        if statistic not in STATISTICS:
            raise WatchError(f"unknown statistic {statistic!r}; choose one of {', '.join(STATISTICS)}")
        columns = [i for i, k in enumerate(history.kinds) if k == kind]
        values = getattr(history, statistic)[:, columns].T
        logarithmic = statistic in ("norm", "max_abs")
        if logarithmic:
            values = torch.log10(values.where(values > 0, torch.tensor(math.nan, dtype=torch.float64)))
        z = [[None if math.isnan(v) or math.isinf(v) else v for v in row] for row in values.tolist()]
        names = [history.names[i] or "(root)" for i in columns]
        figure = go.Figure(
            go.Heatmap(
                z=z,
                x=history.steps,
                y=names,
                colorscale="Viridis",
                colorbar={"title": f"log10 {statistic}" if logarithmic else statistic},
                hovertemplate="step %{x}<br>%{y}<br>%{z:.3g}<extra></extra>",
            )
        )
        figure.update_layout(
            title=f"gradient {statistic} per {kind}",
            xaxis_title="step",
            yaxis={"autorange": "reversed", "type": "category"},
        )
        return figure

    def lines(self, names: Sequence[str] | None = None, statistic: str = "norm"):
        """A plotly line chart of ``statistic`` over steps for ``names`` (default: every layer's
        first parameter), log y axis for norms."""
        import plotly.graph_objects as go

        history = self._history_or_error()
        if isinstance(names, str):
            names = [names]
        if names is None:
            seen, names = set(), []
            for name in self.parameter_names:
                module = name.rsplit(".", 1)[0] if "." in name else ""
                if module not in seen:
                    seen.add(module)
                    names.append(name)
        figure = go.Figure()
        for name in names:
            values = [None if math.isnan(v) else v for v in history.column(name, statistic)]
            figure.add_trace(go.Scatter(x=history.steps, y=values, mode="lines", name=name or "(root)"))
        figure.update_layout(
            title=f"gradient {statistic} over steps",
            xaxis_title="step",
            yaxis_title=statistic,
            yaxis_type="log" if statistic in ("norm", "max_abs") else "linear",
        )
        return figure

    def diagnosis_over_time(self, **thresholds: float):
        """A plotly scatter of the findings of every kept step: x = step, y = module, colour = kind."""
        import plotly.graph_objects as go

        history = self._history_or_error()
        findings = [f for step in history.steps for f in self.diagnose(step, **thresholds)]
        figure = go.Figure()
        for kind in ("nan", "exploding", "vanishing", "dead"):
            chosen = [f for f in findings if f.kind == kind]
            if chosen:
                figure.add_trace(
                    go.Scatter(
                        x=[f.step for f in chosen],
                        y=[f.module or "(root)" for f in chosen],
                        mode="markers",
                        name=kind,
                        text=[f.message for f in chosen],
                        hovertemplate="%{text}<extra></extra>",
                    )
                )
        figure.update_layout(
            title="diagnosis over steps" + ("" if findings else ": no findings"),
            xaxis_title="step",
            yaxis={"type": "category"},
        )
        return figure

    def gather(self, dst: int = 0, group=None) -> watch_gather.RankHistory | None:
        """Bring every rank's history to rank ``dst``; a collective, call it on every rank.

        Returns a :class:`~hookviz.watching.gather.RankHistory` on ``dst`` (also kept as
        ``self.gathered``, which :meth:`save` writes), None elsewhere. Cost and findings: see
        :mod:`hookviz.watching.gather`. Raises WatchError without a process group or when the ranks
        watch different names.
        """
        self.gathered = watch_gather.gather(self, dst, group)
        return self.gathered

    def save(self, path, run=None) -> Path:
        """Write the gathered history (after :meth:`gather`, on ``dst``) or else this process's
        history to a ``.hookviz`` file; open it with :func:`hookviz.load`. Returns the path.

        ``run``: a :class:`hookviz.Run` of the same model to store with it, so that
        ``hookviz.show(hookviz.load(path))`` draws the norms on its graph. Raises WatchError when
        no step was recorded.
        """
        import dataclasses

        self._row(None)
        history = self.gathered if self.gathered is not None else watch_gather.from_watch(self)
        return save(dataclasses.replace(history, run=run) if run is not None else history, path)

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
    outputs: bool = True,
    capacity: int = 1024,
) -> Watch:
    """Watch the gradients of ``model`` over training steps (see :mod:`hookviz.watching.watch`).

    Args:
        model: the model being trained.
        every: record every ``every``-th step (every backward that reaches the model is a step).
        parameters: record each parameter's gradient (its ``.grad`` once this backward accumulated).
        outputs: record the gradient w.r.t. each module's output.
        capacity: steps kept before thinning (see the module docstring).

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
    return Watch(model, every, parameters=parameters, outputs=outputs, capacity=capacity)


# ---------------------------------------------------------------------------- hooks


def _remove(handles: list, tensor_handles: list) -> None:
    for handle in handles:
        handle.remove()
    handles.clear()
    for handle in tensor_handles:
        handle.remove()
    tensor_handles.clear()


def _on_parameter(reference: weakref.ref, column: int, parameter: torch.Tensor) -> None:
    """``register_post_accumulate_grad_hook``: reduce the parameter's ``.grad``; returns None."""
    self = reference()
    if self is not None and self._ranks is not None and watch_gather.is_shard(parameter):
        return  # FSDP2 calls a shard's hooks with the reduced .grad, from its end-of-backward callback
    if self is not None and not self.closed and self._begin():
        self._arrived.append(column)
        grad = parameter.grad
        if self._ranks is not None:  # DDP / FSDP2: .grad is the local gradient only now
            self._measured.append((column, watch_gather.local_statistics(grad)))
        elif grad is not None:
            self._reducer.add(column, grad)


def _parameter_hook(reference: weakref.ref, column: int):
    """The parameter hook of one column (for hooks added later, on FSDP2's unsharded parameters)."""
    return partial(_on_parameter, reference, column)


def _sink_begin(reference: weakref.ref, task: int) -> None:
    """The sink's first hook of a backward: begin the step (sets the sink's members)."""
    self = reference()
    if self is not None and not self.closed:
        self._new_backward(task)


def _sink_fallback(reference: weakref.ref, column: int, grad: torch.Tensor) -> None:
    """A gradient the sink's hooks do not read themselves: to the Python reduction."""
    self = reference()
    if self is not None:
        self._reducer.add(column, grad)


def _on_output_grads(reference: weakref.ref, column: int, output_nr: int, grad_outputs: tuple) -> None:
    """Node pre-hook on the Node that made a module output: hand the gradient w.r.t. that output to the
    step's reduction; returns None (the gradients are unchanged)."""
    grad = grad_outputs[output_nr]
    if grad is None:
        return
    self = reference()
    if self is not None and not self.closed and self._begin():
        self._arrived.append(column)
        self._reducer.add(column, grad)


def _on_output_grad(reference: weakref.ref, column: int, grad: torch.Tensor) -> None:
    """``Tensor.register_hook`` on a module output that is a leaf (it has no Node): as above."""
    _on_output_grads(reference, column, 0, (grad,))


def _on_forward(reference: weakref.ref, column: int, module, args, output) -> None:
    """Forward hook: put a gradient hook on each output tensor that requires grad; returns None."""
    self = reference()
    if self is None or self.closed or not self.recording or not torch.is_grad_enabled():
        return
    if isinstance(output, torch.Tensor):
        tensors = (output,)
    else:  # a tensor returned twice (``return out, out``) is one output: hooked once
        tensors = {id(t): t for t in pytree.tree_leaves(output) if isinstance(t, torch.Tensor)}.values()
    for tensor in tensors:
        if tensor.requires_grad:
            node = tensor.grad_fn
            if node is None:
                hook = tensor.register_hook(self._leaf_output_hook(column))
            else:
                hook = node.register_prehook(self._output_hook(column, tensor.output_nr))
            self._tensor_handles.append(hook)
