"""The rows of the benchmark table: hookviz through its public API, its peers, and the floors.

A row is set up on a case (``cases.Case``) and gives a step to time against a baseline: the plain
training step, or for a re-run also a plain backward on a retained graph. Anything a row needs that
is missing (a peer not installed, an API that changed) skips that row with the reason.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import io
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

import hookviz
from benchmarks.cases import Case


class Skip(Exception):
    """A row that cannot run here; the message says why."""


@dataclass
class Row:
    """One line of the table.

    Attributes:
        label: what the table calls it.
        setup: ``setup(case) -> (step, close)``; ``step()`` is timed, ``close()`` runs after.
        baseline: "step" (the case's plain step), "optimizer" (a plain step of a twin with its
            ``opt.step()``), "backward" (a plain backward on a retained graph), "watched" (a
            step of a twin under ``hookviz.watch``, defaults) or "floor" (a plain step of a twin
            and one ``_foreach_norm`` of its gradients: the floor row's step).
        targets: the ratio an issue asks for, by case key ("mlp", "gpt").
        block_seconds: time blocks of as many steps as the baseline takes in about this long,
            not single steps: a row whose cost comes now and then (a live update a second) is
            timed over whole periods.
        clock: what each sample is timed by: wall time (``time.perf_counter``), which other
            processes' load on a shared machine moves; the CPU time of the process
            (``time.process_time``: every thread, a background writer's work counts); or of the
            calling thread alone (``time.thread_time``: the thread a CPU backward's hooks and
            end-of-backward callbacks run on, so a watch's own work, without intra-op worker
            threads).
    """

    label: str
    setup: Callable[[Case], tuple[Callable[[], object], Callable[[], object]]]
    baseline: str = "step"
    targets: dict[str, float] = field(default_factory=dict)
    block_seconds: float | None = None
    clock: Callable[[], float] = time.perf_counter


def _nothing() -> None:
    return None


def _session(case: Case) -> hookviz.Session:
    return hookviz.Session(case.model, case.args, loss_fn=case.loss_fn)


def fresh_run(case: Case):
    session = _session(case)
    return (lambda: session.run(forward=True)), _nothing


def rerun(case: Case):
    session = _session(case)
    session.run(forward=True)  # the graph the re-runs go back through
    return session.run, _nothing


def fresh_run_every_detail(case: Case):
    session = _session(case)
    if not hasattr(hookviz.Run, "fill_details"):
        raise Skip("hookviz.Run has no fill_details()")
    return (lambda: session.run(forward=True).fill_details()), _nothing


def _twin(case: Case) -> tuple[torch.nn.Module, Callable[[], None]]:
    """A copy of the case's model and its plain step: a watch hooks the model it watches, so it
    watches the twin and the baseline stays plain."""
    twin = copy.deepcopy(case.model)

    def step() -> None:
        twin.zero_grad(set_to_none=True)
        case.loss_fn(twin(*case.args)).backward()

    return twin, step


def _watch_row(**options):
    def setup(case: Case):
        twin, step = _twin(case)
        watch = hookviz.watch(twin, **options)
        return step, watch.close

    return setup


def _optimizer_twin(case: Case) -> tuple[torch.nn.Module, torch.optim.Optimizer, Callable[[], None]]:
    """A copy of the case's model, its optimizer (``case.optimizer``) and its plain training step
    with ``opt.step()``: the model the other rows time is never stepped."""
    twin, step = _twin(case)
    optimizer = case.optimizer(twin)

    def training_step() -> None:
        step()
        optimizer.step()

    return twin, optimizer, training_step


def optimizer_step(case: Case) -> Callable[[], None]:
    """A plain training step with ``opt.step()`` on a twin: the baseline of the ``optimizer=`` row."""
    return _optimizer_twin(case)[2]


def watch_with_optimizer(case: Case):
    """A twin's training step with ``opt.step()`` under ``hookviz.watch(twin, optimizer=opt)``."""
    if "optimizer" not in inspect.signature(hookviz.watch).parameters:
        raise Skip("hookviz.watch has no optimizer= here")
    twin, optimizer, step = _optimizer_twin(case)
    return step, hookviz.watch(twin, optimizer=optimizer).close


def watched_step(case: Case) -> tuple[Callable[[], None], Callable[[], None]]:
    """A twin's plain step under ``hookviz.watch`` (defaults), and its close: the baseline of a
    live view's row."""
    twin, step = _twin(case)
    return step, hookviz.watch(twin).close


def live_view(case: Case):
    """A twin's step under ``hookviz.watch`` with ``hookviz.show(watch)`` following it (its
    default: at most one update a second, sent from its own thread). Without a kernel the
    widget's comm sends nothing, but every update is built and serialised as in a notebook."""
    twin, step = _twin(case)
    watch = hookviz.watch(twin)
    try:
        view = hookviz.show(watch)
    except Exception as error:
        watch.close()
        raise Skip(f"hookviz.show(watch) failed: {type(error).__name__}: {error}") from error
    if getattr(view, "live", None) is None:
        watch.close()
        raise Skip("hookviz.show(watch) does not follow an open watch here")
    return step, watch.close


def autosaving_watch(case: Case):
    """A twin's step under ``hookviz.watch(twin, path=..., save_every_seconds=1)``: the history
    written to a temporary folder from a background thread at most once a second."""
    if "path" not in inspect.signature(hookviz.watch).parameters:
        raise Skip("hookviz.watch has no path= here")
    twin, step = _twin(case)
    folder = tempfile.mkdtemp(prefix="hookviz-bench-")
    watch = hookviz.watch(twin, path=os.path.join(folder, "bench.hookviz"), save_every_seconds=1)

    def close() -> None:
        watch.close()
        shutil.rmtree(folder, ignore_errors=True)

    return step, close


def _watch_outputs_default() -> bool | None:
    parameter = inspect.signature(hookviz.watch).parameters.get("outputs")
    return None if parameter is None else parameter.default


def wandb_watch(case: Case):
    try:
        import wandb
    except ImportError as error:
        raise Skip("wandb is not installed (pip install -e '.[bench]')") from error
    twin, twin_step = _twin(case)
    quiet = (contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()))
    with quiet[0], quiet[1]:
        run = wandb.init(mode="offline", dir=tempfile.mkdtemp(), project="hookviz-bench")
        run.watch(twin, log="gradients", log_freq=1)

    def step() -> None:
        twin_step()
        run.log({})

    def close() -> None:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            run.unwatch(twin)
            run.finish()

    return step, close


def torchlens_trace(case: Case):
    try:
        import torchlens
    except ImportError as error:
        raise Skip("torchlens is not installed (pip install -e '.[bench]')") from error
    # unwrap_when_done: torchlens wraps torch's functions, which would slow every later row.
    options = torchlens.options.CaptureOptions(unwrap_when_done=True)

    def step() -> None:
        with contextlib.redirect_stdout(io.StringIO()):
            torchlens.trace(case.model, list(case.args), capture=options)  # saves every layer by default

    return step, _nothing


def torchviz_make_dot(case: Case):
    try:
        import torchviz
    except ImportError as error:
        raise Skip("torchviz is not installed (pip install -e '.[bench]')") from error
    parameters = dict(case.model.named_parameters())

    def step() -> None:
        case.model.zero_grad(set_to_none=True)
        loss = case.loss_fn(case.model(*case.args))
        torchviz.make_dot(loss, params=parameters)  # the graph object only: no Graphviz layout
        loss.backward()

    return step, _nothing


def _norms_after(step: Callable[[], None], model: torch.nn.Module) -> Callable[[], None]:
    """``step`` followed by one ``_foreach_norm`` of ``model``'s gradients, read to the host."""

    def with_norms() -> None:
        step()
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        torch.stack(torch._foreach_norm(grads)).tolist()

    return with_norms


def floor_one_foreach_norm(case: Case):
    return _norms_after(case.plain_step, case.model), _nothing


def floor_step(case: Case) -> Callable[[], None]:
    """The floor row's step on a twin: the baseline a watch's own cost is measured above."""
    twin, step = _twin(case)
    return _norms_after(step, twin)


def _norm_every_gradient(loss: torch.Tensor) -> list[torch.Tensor]:
    """Hang a Node post-hook on every Node of ``loss``'s graph that queues the 2-norm of each
    gradient the Node passes on (no host sync); returns the list they fill."""
    norms: list[torch.Tensor] = []

    def hook(grad_inputs, grad_outputs):
        norms.extend(torch.linalg.vector_norm(g) for g in grad_inputs if g is not None)

    seen, stack = set(), [loss.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        node.register_hook(hook)
        stack.extend(child for child, _ in node.next_functions)
    return norms


def floor_fresh_norm_per_gradient(case: Case):
    def step() -> None:
        case.model.zero_grad(set_to_none=True)
        loss = case.loss_fn(case.model(*case.args))
        norms = _norm_every_gradient(loss)
        loss.backward()
        torch.stack(norms).tolist()

    return step, _nothing


def retained_backward(case: Case) -> Callable[[], object]:
    """A plain backward through a graph kept for re-use: the baseline of a re-run."""
    loss = case.loss_fn(case.model(*case.args))
    trainable = [p for p in case.model.parameters() if p.requires_grad]
    return lambda: torch.autograd.grad(loss, trainable, retain_graph=True)


def floor_rerun_norm_per_gradient(case: Case):
    loss = case.loss_fn(case.model(*case.args))
    trainable = [p for p in case.model.parameters() if p.requires_grad]
    norms = _norm_every_gradient(loss)

    def step() -> None:
        norms.clear()
        torch.autograd.grad(loss, trainable, retain_graph=True)
        torch.stack(norms).tolist()

    return step, _nothing


def rows() -> list[Row]:
    """Every row, in table order."""
    default_outputs = _watch_outputs_default()
    watches = [
        Row("hookviz.watch(model), defaults", _watch_row(), targets={"mlp": 1.10, "gpt": 1.02}),
        # the watch's own cost, paired with the floor (not the difference of two rows' medians):
        # at most 5 % of a plain step, which is about 1.045x of the floor's (floor ~1.08x a step)
        Row(
            "hookviz.watch(model), defaults, over the floor (plain step + one _foreach_norm)",
            _watch_row(),
            baseline="floor",
            targets={"mlp": 1.045},
        ),
        Row(
            "hookviz.watch(model), defaults, over the floor, CPU time of the calling thread",
            _watch_row(),
            baseline="floor",
            targets={"mlp": 1.045},
            clock=time.thread_time,
        ),
        Row(
            "hookviz.watch(model, optimizer=opt), over a step with opt.step() (MLP: SGD momentum; "
            "GPT-2: AdamW)",
            watch_with_optimizer,
            baseline="optimizer",
            targets={"mlp": 1.10, "gpt": 1.02},
        ),
    ]
    if "stats_every" in inspect.signature(hookviz.watch).parameters:
        watches.append(Row("hookviz.watch(model, stats_every=1)", _watch_row(stats_every=1)))
    if default_outputs is not None:
        other = not default_outputs
        watches.append(Row(f"hookviz.watch(model, outputs={other})", _watch_row(outputs=other)))
    return [
        Row("hookviz fresh run: Session.run(forward=True)", fresh_run, targets={"gpt": 1.2}),
        Row("hookviz backward-only re-run: Session.run()", rerun, targets={"mlp": 1.05, "gpt": 1.05}),
        Row(
            "hookviz backward-only re-run, over a plain backward",
            rerun,
            baseline="backward",
            targets={"mlp": 1.05, "gpt": 1.05},
        ),
        Row("hookviz fresh run + run.fill_details()", fresh_run_every_detail),
        *watches,
        Row(
            "hookviz.show(watch) live, over a watched step (blocks of ~1 s)",
            live_view,
            baseline="watched",
            targets={"mlp": 1.02, "gpt": 1.02},
            block_seconds=1.0,
        ),
        Row(
            "hookviz.watch(model, path=, save_every_seconds=1), over a watched step (blocks of ~1 s)",
            autosaving_watch,
            baseline="watched",
            targets={"gpt": 1.01},
            block_seconds=1.0,
        ),
        Row(
            "hookviz.watch(model, path=, save_every_seconds=1), CPU time of the process (every thread)",
            autosaving_watch,
            baseline="watched",
            targets={"gpt": 1.01},
            block_seconds=1.0,
            clock=time.process_time,
        ),
        Row("wandb.watch(log='gradients', log_freq=1), offline", wandb_watch),
        Row("torchlens trace (forward, saves every layer)", torchlens_trace),
        Row("torchviz make_dot + backward", torchviz_make_dot),
        Row("floor: plain step + one _foreach_norm", floor_one_foreach_norm),
        Row("floor: fresh, a Node hook and norm per gradient", floor_fresh_norm_per_gradient),
        Row("floor: re-run, a Node hook and norm per gradient", floor_rerun_norm_per_gradient, "backward"),
    ]
